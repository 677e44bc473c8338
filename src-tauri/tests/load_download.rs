//! A load of a model that is not on disk yet: the download reports progress ("load-progress"
//! events, `info().download`), a cancel stops it (what arrived is kept), and the next load
//! resumes it, then serves the model under its repo id. Runs against the hub crate's fake hub
//! on 127.0.0.1:0; one test per binary because it sets HF_ENDPOINT and the cache paths.

#[path = "../../crates/dspark-hub/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{start, FakeFile, Hub, REPO};
use dspark_app::host::{Host, LoadRequest};

fn fixture_hub() -> Hub {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/spec/models/target");
    let file = |name: &str, lfs: bool| FakeFile {
        name: name.into(),
        bytes: std::fs::read(dir.join(name)).unwrap(),
        lfs,
    };
    Hub {
        files: vec![
            file("config.json", false),
            file("model.safetensors", true),
            file("tokenizer.json", false),
            file("tokenizer_config.json", false),
        ],
        stats: Default::default(),
        cut_after: Mutex::new(None),
        stall_after: Mutex::new(None),
        corrupt: Mutex::new(Vec::new()),
        token: Mutex::new(None),
    }
}

#[test]
fn load_reports_download_progress_can_be_cancelled_and_resumes() {
    let hub = fixture_hub();
    let total: u64 = hub.files.iter().map(|f| f.bytes.len() as u64).sum();
    let srv = start(hub);
    let dir = std::env::temp_dir().join(format!("dspark-app-download-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("HF_ENDPOINT", &srv.endpoint);
    std::env::set_var("HF_HOME", dir.join("hf"));
    std::env::set_var("DSPARK_CACHE", dir.join("cache"));
    std::env::set_var("DSPARK_LMSTUDIO_DIRS", dir.join("lmstudio"));
    for v in [
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_TOKEN",
        "DSPARK_MODEL",
        "DSPARK_MODE",
    ] {
        std::env::remove_var(v);
    }
    std::fs::write(dir.join("config.toml"), "port = 0\n").unwrap();
    let host = Host::new(dir.join("config.toml"));

    // the first progress event cancels the load
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let cancel_next = Arc::new(AtomicBool::new(true));
    let (ev, cn, weak) = (events.clone(), cancel_next.clone(), Arc::downgrade(&host));
    host.set_notify(move |e| {
        ev.lock().unwrap().push(e.to_string());
        if e == "load-progress" && cn.swap(false, Ordering::SeqCst) {
            let h = weak.upgrade().unwrap();
            assert!(h.info().download.is_some_and(|d| d.total == total));
            assert!(h.cancel_load());
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = LoadRequest {
        model: REPO.into(),
        mode: "baseline".into(),
        drafter: None,
        max_draft: None,
    };
    let err = rt.block_on(host.load(req.clone())).unwrap_err();
    let msg = err.body["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("cancelled"), "{msg}");
    let info = host.info();
    assert!(
        !info.running && !info.loading && info.download.is_none(),
        "{info:?}"
    );

    // the next load fetches the rest (nothing twice) with progress, then serves the model
    events.lock().unwrap().clear();
    rt.block_on(host.load(req)).unwrap();
    let info = host.info();
    assert!(info.running, "{info:?}");
    assert_eq!(
        info.model.as_deref(),
        Some(REPO),
        "the repo id, never a commit hash"
    );
    assert!(info.download.is_none());
    let n = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| *e == "load-progress")
        .count();
    assert!(n >= 2, "{n} progress events");
    assert_eq!(srv.hub.served(), total, "nothing fetched twice");
    let models = rt
        .block_on(host.request(axum::http::Method::GET, "/v1/models", None))
        .unwrap();
    assert_eq!(models["data"][0]["id"], REPO);
    host.unload();
    let _ = std::fs::remove_dir_all(dir);
}
