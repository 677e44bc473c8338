//! Mock-runtime tests of the app's Tauri commands (`tauri::test`, no display, no webview):
//! the same `configure` as the real app, with the server's scripted engine installed instead
//! of a model. IPC requests use the local origin `tauri://localhost` (Windows:
//! `http://tauri.localhost`); other origins are refused for app commands.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use dspark_app::host::Host;
use dspark_server::scripted::{Rule, Script, ScriptedEngine};
use serde_json::{json, Value};
use tauri::ipc::{CallbackFn, InvokeBody};
use tauri::test::{
    get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY,
};
use tauri::webview::InvokeRequest;
use tauri::{App, WebviewWindow};

struct Fixture {
    _app: App<MockRuntime>,
    window: WebviewWindow<MockRuntime>,
    host: Arc<Host>,
    dir: std::path::PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.host.stop_listener();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scripted(reply: &str, round_ms: u64, repeat: bool) -> Arc<ScriptedEngine> {
    let mut s = Script::replying(reply);
    s.round_ms = round_ms;
    s.rules = vec![Rule {
        if_contains: None,
        reply: reply.into(),
        repeat,
    }];
    Arc::new(ScriptedEngine::new(s))
}

fn fixture(name: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("dspark-app-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // port 0: the listener takes any free port
    std::fs::write(dir.join("config.toml"), "port = 0\n").unwrap();
    let host = Host::new(dir.join("config.toml"));
    host.install(
        scripted("Hello from the scripted engine.", 0, false),
        "scripted".into(),
    );
    let app = dspark_app::configure(mock_builder(), host.clone())
        .build(mock_context(noop_assets()))
        .unwrap();
    let window = tauri::WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .unwrap();
    Fixture {
        _app: app,
        window,
        host,
        dir,
    }
}

fn invoke(f: &Fixture, cmd: &str, body: Value) -> Result<Value, Value> {
    let url = if cfg!(windows) {
        "http://tauri.localhost"
    } else {
        "tauri://localhost"
    };
    get_ipc_response(
        &f.window,
        InvokeRequest {
            cmd: cmd.into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            url: url.parse().unwrap(),
            body: InvokeBody::Json(body),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        },
    )
    .map(|b| b.deserialize::<Value>().unwrap())
}

#[test]
fn app_info_reports_the_loaded_model_and_no_listener() {
    let f = fixture("info");
    let info = invoke(&f, "app_info", json!({})).unwrap();
    assert_eq!(info["running"], true);
    assert_eq!(info["listening"], false);
    assert_eq!(info["model"], "scripted");
    assert_eq!(info["url"], Value::Null);
}

#[test]
fn api_get_goes_through_the_in_process_router() {
    let f = fixture("api");
    let models = invoke(&f, "api_get", json!({"path": "/v1/models"})).unwrap();
    assert_eq!(models["data"][0]["id"], "scripted");
    let metrics = invoke(&f, "api_get", json!({"path": "/metrics"})).unwrap();
    assert_eq!(metrics["requests"], 0);
    let live = invoke(&f, "api_get", json!({"path": "/api/live"})).unwrap();
    assert_eq!(live["generating"], false);
    // errors come back as {status, body} with the server's words
    let err = invoke(&f, "api_get", json!({"path": "/nope"})).unwrap_err();
    assert_eq!(err["status"], 404);
    assert!(err["body"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/nope"));
}

#[test]
fn chat_streams_sse_and_feeds_the_live_gauges() {
    let f = fixture("chat");
    let mut text = String::new();
    tauri::async_runtime::block_on(f.host.chat(
        7,
        json!({"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": true}}),
        |piece| {
            assert!(piece.ends_with("\n\n"), "pieces end on event boundaries");
            text.push_str(&piece);
            true
        },
    ))
    .unwrap();
    assert!(text.contains(r#"{"content":"Hell"}"#), "{text}");
    assert!(text.contains("\"x_dspark\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let live = f.host.live.snapshot();
    assert_eq!(live.generations, 1);
    assert!(live.rounds >= 2 && live.histogram[3] >= 1, "{live:?}");
    // the IPC command with a channel from the webview side runs the same path
    let before = f.host.live.snapshot().generations;
    invoke(
        &f,
        "chat",
        json!({"id": 8, "body": {"messages": [{"role": "user", "content": "again"}]}, "onEvent": "__CHANNEL__:1"}),
    )
    .unwrap();
    assert_eq!(f.host.live.snapshot().generations, before + 1);
    // an invalid request is refused with the server's message
    let err = invoke(
        &f,
        "chat",
        json!({"id": 9, "body": {"messages": "nope"}, "onEvent": "__CHANNEL__:2"}),
    )
    .unwrap_err();
    assert_eq!(err["status"], 400);
}

#[test]
fn chat_cancel_stops_a_running_generation() {
    let f = fixture("cancel");
    f.host.install(scripted("tick ", 20, true), "slow".into());
    assert_eq!(invoke(&f, "chat_cancel", json!({"id": 99})).unwrap(), false);
    let host = f.host.clone();
    // the first piece says the chat is registered and streaming (a fixed sleep here could
    // end before a loaded machine had started the chat)
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut pieces = 0;
        tauri::async_runtime::block_on(host.chat(
            1,
            json!({"messages": [{"role": "user", "content": "go"}], "max_tokens": 4000}),
            |_| {
                pieces += 1;
                let _ = first_tx.send(());
                true
            },
        ))
        .map(|_| pieces)
    });
    first_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a first piece of the chat");
    assert_eq!(invoke(&f, "chat_cancel", json!({"id": 1})).unwrap(), true);
    let pieces = worker.join().unwrap().unwrap();
    assert!(pieces >= 1);
    // the engine sees the cancel once the dropped stream reports the next round
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut cancelled = 0;
    while std::time::Instant::now() < deadline {
        let m = invoke(&f, "api_get", json!({"path": "/metrics"})).unwrap();
        cancelled = m["engine"]["cancelled"].as_u64().unwrap_or(0);
        if cancelled >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cancelled, 1);
}

#[test]
fn server_start_serves_http_and_server_stop_closes_it() {
    let f = fixture("server");
    let info = invoke(&f, "server_start", json!({})).unwrap();
    assert_eq!(info["listening"], true);
    let url = info["url"].as_str().unwrap().to_string();
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"status\":\"ok\""), "{resp}");
    let info = invoke(&f, "server_stop", json!({})).unwrap();
    assert_eq!(info["listening"], false);
    // the listener closes on the server task, after `server_stop` returns: poll (a fixed
    // 200 ms wait could end first on a loaded machine)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{addr} still accepts connections 30 s after server_stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The HTTP status line of `GET path` on `addr` with an optional bearer key.
fn http_status(addr: &str, path: &str, key: Option<&str>) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.lines().next().unwrap_or_default().to_string()
}

#[test]
fn settings_are_saved_to_the_hub_settings_file_and_apply_at_once() {
    let f = fixture("settings");
    std::fs::write(
        f.dir.join("config.toml"),
        "# kept\nport = 0\nconfidence_threshold = 0.5\n",
    )
    .unwrap();
    let info = invoke(&f, "server_start", json!({})).unwrap();
    let url = info["url"].as_str().unwrap().to_string();
    let addr = url.trim_start_matches("http://");
    assert!(http_status(addr, "/v1/models", None).contains(" 200"));
    let r = invoke(
        &f,
        "settings_save",
        json!({"settings": {"port": 0, "api_key": "k", "thinking": false, "max_draft": 6}}),
    )
    .unwrap();
    assert!(r["where"].as_str().unwrap().ends_with("config.toml"));
    let s = invoke(&f, "settings_get", json!({})).unwrap();
    assert_eq!(s["port"], 0);
    assert_eq!(s["api_key"], "k");
    assert_eq!(s["thinking"], false);
    assert_eq!(s["max_draft"], 6);
    // the hub's own parser (what `dspark serve` uses) reads the same file; keys the app does
    // not edit and comments are kept
    let hub = dspark_hub::settings::Settings::load(&f.dir.join("config.toml")).unwrap();
    assert_eq!((hub.port, hub.max_draft), (Some(0), Some(6)));
    assert_eq!(hub.confidence_threshold, Some(0.5));
    let text = std::fs::read_to_string(f.dir.join("config.toml")).unwrap();
    assert!(text.starts_with("# kept"), "{text}");
    // the running router takes the new key at once: outside clients need it, and the app's
    // own calls (which carry it) never see a 401
    assert!(http_status(addr, "/v1/models", None).contains(" 401"));
    assert!(http_status(addr, "/v1/models", Some("k")).contains(" 200"));
    let models = invoke(&f, "api_get", json!({"path": "/v1/models"})).unwrap();
    assert_eq!(models["data"][0]["id"], "scripted");
}

#[test]
fn bad_paths_are_errors_not_panics() {
    let f = fixture("baduri");
    for path in ["/v1/models\u{0}x", "/a b", "/%zz\n"] {
        let err = invoke(&f, "api_get", json!({ "path": path })).unwrap_err();
        let status = err["status"].as_u64().unwrap();
        assert!((400..500).contains(&status), "{path:?}: {err}");
        assert!(err["body"]["error"]["message"].is_string(), "{err}");
    }
    // the app still works afterwards
    assert!(invoke(&f, "api_get", json!({"path": "/v1/models"})).is_ok());
}

#[test]
fn model_manager_commands() {
    let f = fixture("models");
    let reg = invoke(&f, "registry", json!({})).unwrap();
    let rows = reg.as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows
        .iter()
        .all(|r| r["id"].is_string() && r["target"].is_string()));
    let r = invoke(
        &f,
        "resolve_drafter",
        json!({"model": "demo", "mode": "draft"}),
    )
    .unwrap();
    assert_eq!(r["target"], "demo");
    assert!(r["drafter"].is_string());
    let err = invoke(
        &f,
        "resolve_drafter",
        json!({"model": "demo", "mode": "fast"}),
    )
    .unwrap_err();
    assert!(err["body"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown mode"));
    // nothing is loading: there is no download to cancel
    assert_eq!(invoke(&f, "cancel_load", json!({})).unwrap(), false);
    // the registry says which models cannot run yet, and why
    let gemma = rows.iter().find(|r| r["id"] == "gemma-4-12b").unwrap();
    assert!(gemma["unavailable"].as_str().unwrap().contains("Gemma 4"));
    assert!(rows
        .iter()
        .any(|r| r["id"] == "qwen3-8b" && r["unavailable"].is_null()));
    let err = invoke(
        &f,
        "load_model",
        json!({"req": {"model": "gemma-4-12b", "mode": "dspark"}}),
    )
    .unwrap_err();
    assert!(err["body"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot be loaded"));
    let info = invoke(&f, "unload_model", json!({})).unwrap();
    assert_eq!(info["running"], false);
    let err = invoke(&f, "api_get", json!({"path": "/v1/models"})).unwrap_err();
    assert!(err["body"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no model is loaded"));
}

#[test]
fn tray_text_shows_live_speed_only_while_generating() {
    let f = fixture("tray");
    let mut live = f.host.live.snapshot();
    let info = f.host.info();
    let (title, tip) = dspark_app::tray::tray_text(&live, &info);
    assert_eq!(title, None);
    assert!(
        tip.contains("scripted") && tip.contains("server stopped"),
        "{tip}"
    );
    live.generating = true;
    live.tokens_per_sec = 41.7;
    live.accept_len = 3.25;
    let (title, tip) = dspark_app::tray::tray_text(&live, &info);
    assert_eq!(title.as_deref(), Some("42 t/s · 3.2"));
    assert!(
        tip.contains("41.7 tok/s") && tip.contains("accept 3.25"),
        "{tip}"
    );
}
