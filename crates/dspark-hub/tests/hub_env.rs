//! `resolve_model_path` driven by the environment (`HF_ENDPOINT`, `HF_HOME`, `HF_HUB_OFFLINE`,
//! `HF_TOKEN`, LM Studio folders). One test per binary: it sets process-wide variables.

mod common;

use std::fs;

use common::{start, Hub, COMMIT, REPO};
use dspark_hub::download::NoProgress;
use dspark_hub::local::{find_on_disk, OnDisk};
use dspark_hub::{resolve_model_path, HubError};

#[test]
fn resolve_model_path_follows_the_environment() {
    let hub = Hub::tiny_qwen3();
    // every request must carry HF_TOKEN
    *hub.token.lock().unwrap() = Some("hf_env_token".into());
    let srv = start(hub);
    let home = tempfile::tempdir().unwrap();
    let lms = tempfile::tempdir().unwrap();
    std::env::set_var("HF_ENDPOINT", &srv.endpoint);
    std::env::set_var("HF_HOME", home.path());
    std::env::remove_var("HF_HUB_CACHE");
    std::env::set_var("DSPARK_LMSTUDIO_DIRS", lms.path());
    std::env::set_var("HF_TOKEN", "hf_env_token");

    // Offline and not cached: a clear error, no request.
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let err = resolve_model_path(REPO, false, &NoProgress).unwrap_err();
    assert!(matches!(err, HubError::Offline { .. }), "{err}");
    assert_eq!(srv.hub.requests(), 0);
    assert_eq!(find_on_disk(REPO), None);

    // Online: downloaded into $HF_HOME/hub.
    std::env::remove_var("HF_HUB_OFFLINE");
    let p = resolve_model_path(REPO, false, &NoProgress).unwrap();
    assert_eq!(
        p,
        home.path()
            .join("hub/models--tiny-org--tiny-qwen3/snapshots")
            .join(COMMIT)
    );
    assert!(p.join("config.json").is_file());
    assert_eq!(find_on_disk(REPO), Some(OnDisk::HfCache(p.clone())));

    // Offline again (flag or env): served from the cache without a request.
    let n = srv.hub.requests();
    assert_eq!(resolve_model_path(REPO, true, &NoProgress).unwrap(), p);
    std::env::set_var("HF_HUB_OFFLINE", "1");
    assert_eq!(resolve_model_path(REPO, false, &NoProgress).unwrap(), p);
    assert_eq!(srv.hub.requests(), n);

    // An LM Studio copy wins and needs no network.
    let lm = lms.path().join(REPO);
    fs::create_dir_all(&lm).unwrap();
    fs::write(lm.join("config.json"), "{}").unwrap();
    assert_eq!(resolve_model_path(REPO, false, &NoProgress).unwrap(), lm);
    assert_eq!(find_on_disk(REPO), Some(OnDisk::LmStudio(lm)));

    // Existing paths are used as they are; nonsense is refused with guidance.
    assert_eq!(
        resolve_model_path(home.path().to_str().unwrap(), false, &NoProgress).unwrap(),
        home.path()
    );
    let err = resolve_model_path("no-such-thing", false, &NoProgress).unwrap_err();
    assert!(err.to_string().contains("dspark models"), "{err}");
    assert_eq!(srv.hub.requests(), n);
}
