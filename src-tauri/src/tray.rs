//! The menu-bar (tray) icon: its menu, the live tok/s + accept-length title/tooltip, and the
//! clipboard for "Copy Endpoint URL". Generic over the runtime like the rest of the app.

use std::sync::Arc;

use tauri::menu::{Menu, MenuItem, PredefinedMenuItem};
use tauri::tray::{TrayIcon, TrayIconBuilder};
use tauri::{AppHandle, Emitter, Manager, Runtime};

use crate::host::Host;

pub const TRAY_ID: &str = "main";

/// The icon: a black template on macOS (tinted by the system), a light glyph elsewhere.
fn icon() -> tauri::image::Image<'static> {
    #[cfg(target_os = "macos")]
    {
        tauri::include_image!("../assets/tray-template@2x.png")
    }
    #[cfg(not(target_os = "macos"))]
    {
        tauri::include_image!("../assets/tray-linux.png")
    }
}

/// Builds the tray with its menu; menu ids are handled in [`on_menu`].
pub fn build<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<TrayIcon<R>> {
    let toggle = MenuItem::with_id(app, "toggle_server", "Stop Server", true, None::<&str>)?;
    let menu = Menu::with_items(
        app,
        &[
            &MenuItem::with_id(app, "open_chat", "Open Chat", true, None::<&str>)?,
            &MenuItem::with_id(app, "models", "Models…", true, None::<&str>)?,
            &MenuItem::with_id(app, "settings", "Settings…", true, None::<&str>)?,
            &PredefinedMenuItem::separator(app)?,
            &MenuItem::with_id(app, "copy_url", "Copy Endpoint URL", true, None::<&str>)?,
            &toggle,
            &PredefinedMenuItem::separator(app)?,
            &MenuItem::with_id(app, "quit", "Quit", true, None::<&str>)?,
        ],
    )?;
    app.manage(ToggleItem(toggle));
    TrayIconBuilder::with_id(TRAY_ID)
        .icon(icon())
        .icon_as_template(cfg!(target_os = "macos"))
        .tooltip("dspark")
        .menu(&menu)
        .show_menu_on_left_click(true)
        .on_menu_event(|app, ev| on_menu(app, ev.id().as_ref()))
        .build(app)
}

/// The Start/Stop Server item, relabelled as the listener changes.
pub struct ToggleItem<R: Runtime>(pub MenuItem<R>);

/// Shows the main window on `tab` (chat, models, settings, endpoint).
pub fn open<R: Runtime>(app: &AppHandle<R>, tab: &str) {
    if let Some(w) = app.get_webview_window("main") {
        let _ = w.show();
        let _ = w.unminimize();
        let _ = w.set_focus();
    }
    let _ = app.emit("navigate", tab);
}

pub fn on_menu<R: Runtime>(app: &AppHandle<R>, id: &str) {
    let host = app.state::<Arc<Host>>().inner().clone();
    match id {
        "open_chat" => open(app, "chat"),
        "models" => open(app, "models"),
        "settings" => open(app, "settings"),
        "copy_url" => {
            let url = host
                .info()
                .url
                .map(|u| format!("{u}/v1"))
                .unwrap_or_default();
            if let Err(e) = copy_to_clipboard(&url) {
                tracing::warn!("copy endpoint URL: {e}");
            }
        }
        "toggle_server" => {
            if host.info().listening {
                host.stop_listener();
            } else {
                tauri::async_runtime::spawn(async move {
                    match host.start_listener().await {
                        Ok(url) => println!("dspark-app: listening on {url}"),
                        Err(e) => {
                            eprintln!("dspark-app: start server: {}", e.body["error"]["message"])
                        }
                    }
                });
            }
        }
        "quit" => app.exit(0),
        _ => {}
    }
}

/// Keeps the tray in step with the host: the toggle's label, and while generating the live
/// tok/s and accept length as the title (macOS menu bar, Linux appindicator label) and tooltip.
pub fn refresh<R: Runtime>(app: &AppHandle<R>, host: &Host) {
    let info = host.info();
    if let Some(t) = app.try_state::<ToggleItem<R>>() {
        let label = if info.listening {
            "Stop Server"
        } else {
            "Start Server"
        };
        let _ = t.0.set_text(label);
    }
    let Some(tray) = app.tray_by_id(TRAY_ID) else {
        return;
    };
    let live = host.live.snapshot();
    let (title, tip) = tray_text(&live, &info);
    let _ = tray.set_title(title.as_deref());
    let _ = tray.set_tooltip(Some(tip));
}

/// The tray title (only while generating) and tooltip.
pub fn tray_text(
    live: &dspark_server::ui::LiveSnapshot,
    info: &crate::host::Info,
) -> (Option<String>, String) {
    let model = match (&info.model, &info.mode) {
        (Some(m), Some(mode)) => format!("{m} · {mode}"),
        (Some(m), None) => format!("{m} (loading)"),
        _ => "no model".into(),
    };
    let at = info.url.clone().unwrap_or_else(|| "server stopped".into());
    if live.generating {
        let title = format!("{:.0} t/s · {:.1}", live.tokens_per_sec, live.accept_len);
        let tip = format!(
            "dspark — {model}: {:.1} tok/s, accept {:.2} tokens/round",
            live.tokens_per_sec, live.accept_len
        );
        (Some(title), tip)
    } else {
        (None, format!("dspark — {model} — {at}"))
    }
}

#[cfg(target_os = "linux")]
fn copy_to_clipboard(text: &str) -> Result<(), String> {
    // menu events arrive on the GTK main thread
    let cb = gtk::Clipboard::get(&gtk::gdk::SELECTION_CLIPBOARD);
    cb.set_text(text);
    cb.store();
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn copy_to_clipboard(text: &str) -> Result<(), String> {
    use std::io::Write;
    let cmd = if cfg!(target_os = "macos") {
        "pbcopy"
    } else {
        "clip"
    };
    let mut child = std::process::Command::new(cmd)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    child.wait().map_err(|e| e.to_string())?;
    Ok(())
}
