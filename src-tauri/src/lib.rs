//! dspark menu-bar app (Tauri v2): a tray icon with a menu, the built-in chat window (`ui/`),
//! and the same axum server as `dspark serve`, running in-process. The window talks to the
//! server through Tauri commands and events only (see `ui/api.js`); the HTTP listener is for
//! outside clients.
//!
//! [`configure`] registers state and commands on any runtime, so `tauri::test` mock-runtime
//! tests drive the commands without a display; [`run`] adds the tray, the window behaviour,
//! the live-stats ticker and the initial model load.

pub mod commands;
pub mod host;
pub mod loader;
pub mod settings;
pub mod tray;

use std::sync::Arc;
use std::time::Duration;

use tauri::{Builder, Emitter, Manager, RunEvent, Runtime, WindowEvent};

use crate::host::{Host, LoadRequest};

/// State and commands; no window, tray or background task.
pub fn configure<R: Runtime>(builder: Builder<R>, host: Arc<Host>) -> Builder<R> {
    builder
        .manage(host)
        .invoke_handler(tauri::generate_handler![
            commands::app_info,
            commands::api_get,
            commands::chat,
            commands::chat_cancel,
            commands::settings_get,
            commands::settings_save,
            commands::registry,
            commands::resolve_drafter,
            commands::load_model,
            commands::cancel_load,
            commands::unload_model,
            commands::server_start,
            commands::server_stop,
            commands::pull,
        ])
}

/// What to load at start: the settings' model and mode, else the defaults `dspark serve` uses
/// (`dspark_hub::layers::defaults`), so an unset key means the same pipeline in both.
pub fn initial_load(host: &Host) -> LoadRequest {
    let s = host.settings();
    let d = dspark_hub::layers::defaults();
    let model = s
        .model
        .or(d.model)
        .unwrap_or_else(|| dspark_hub::registry::DEMO.into());
    let mode = s
        .mode
        .unwrap_or_else(|| d.mode.unwrap_or(dspark_hub::Mode::Baseline).as_str().into());
    LoadRequest {
        model,
        mode,
        drafter: s.drafter,
        max_draft: s.max_draft,
    }
}

/// Pushes live stats to the window and the tray every 250 ms while anything changes.
fn spawn_ticker<R: Runtime>(app: tauri::AppHandle<R>, host: Arc<Host>) {
    tauri::async_runtime::spawn(async move {
        let mut last = None;
        let mut last_info = None;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let snap = host.live.snapshot();
            let info = host.info();
            if last.as_ref() != Some(&snap) || last_info.as_ref() != Some(&info) {
                let _ = app.emit("live", &snap);
                let (a, h) = (app.clone(), host.clone());
                let _ = app.run_on_main_thread(move || tray::refresh(&a, &h));
                last = Some(snap);
                last_info = Some(info);
            }
        }
    });
}

/// The app: tray, window, in-process server. Blocks until Quit.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DSPARK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let host = Host::new(dspark_hub::paths::config_file());
    let app = configure(Builder::default(), host.clone())
        .setup(move |app| {
            #[cfg(target_os = "macos")]
            app.set_activation_policy(tauri::ActivationPolicy::Accessory);
            let handle = app.handle().clone();
            let h2 = handle.clone();
            host.set_notify(move |ev| {
                let _ = h2.emit(ev, ());
            });
            tray::build(&handle)?;
            spawn_ticker(handle.clone(), host.clone());
            let h = host.clone();
            tauri::async_runtime::spawn(async move {
                let req = initial_load(&h);
                match h.load(req).await {
                    Ok(()) => match h.start_listener().await {
                        // the smoke test and users read the endpoint from stdout
                        Ok(url) => println!("dspark-app: listening on {url}"),
                        Err(e) => eprintln!("dspark-app: {}", failure_text(&e)),
                    },
                    Err(e) => eprintln!("dspark-app: {}", failure_text(&e)),
                }
                use std::io::Write;
                let _ = std::io::stdout().flush();
            });
            Ok(())
        })
        .on_window_event(|window, event| {
            // closing the window hides it; the app lives in the menu bar until Quit
            if let WindowEvent::CloseRequested { api, .. } = event {
                let _ = window.hide();
                api.prevent_close();
            }
        })
        .build(tauri::generate_context!())
        .expect("building the dspark app");
    app.run(|app, event| {
        if let RunEvent::ExitRequested { api, code, .. } = &event {
            if code.is_none() {
                api.prevent_exit();
            }
        }
        if let RunEvent::Exit = event {
            app.state::<Arc<Host>>().stop_listener();
            exit_now();
        }
    });
}

/// Ends the process right after Quit, without the toolkit's teardown: on Linux that teardown
/// (GTK and WebKit destructors while the runtime's and the engine's threads still run) once
/// crashed the app on quit on a loaded CI machine (exit 139 after "tray menu -> Quit"). Nothing
/// is lost by skipping it: settings are written when they change, never at exit, a download
/// resumes from its partial file, and the endpoint closes with the process.
fn exit_now() -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` (POSIX) ends the process; our buffered output was flushed above and no
    // other cleanup is owed.
    #[cfg(unix)]
    unsafe {
        libc::_exit(0)
    }
    #[cfg(not(unix))]
    std::process::exit(0)
}

fn failure_text(e: &host::ApiFailure) -> String {
    e.body["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| e.body.to_string())
}
