//! Runs docs/curl-examples.sh (the README's curl examples) against the real router on a
//! loopback port, with the scripted engine behind it and auth on. Every curl uses `-f`, so
//! any HTTP error fails the script.

use std::sync::Arc;

use dspark_server::scripted::{Script, ScriptedEngine};
use dspark_server::{app, AppState, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_curl_examples_run_against_a_loopback_server() {
    let mut cfg = ServerConfig::new("scripted-model");
    cfg.api_key = Some("curl-key".into());
    let engine = ScriptedEngine::new(Script::replying("Bonjour !"));
    let router = app(AppState::new(Arc::new(engine), cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dspark_server::serve(listener, router, async {
        let _ = stop_rx.await;
    }));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/curl-examples.sh");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(script)
            .env("DSPARK_URL", &url)
            .env("DSPARK_API_KEY", "curl-key")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl examples failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"status\":\"ok\""), "{stdout}");
    assert!(
        stdout.contains("\"object\":\"chat.completion\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"content\":\"Bonjour !\""), "{stdout}");
    assert!(stdout.contains("data: [DONE]"), "{stdout}");
    assert!(
        stdout.contains("\"object\":\"text_completion\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("# TYPE dspark_requests_total counter"),
        "{stdout}"
    );
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
