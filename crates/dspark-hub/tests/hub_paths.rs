//! Path traversal against a fake hub and a planted cache: hub file names with `..` or a
//! leading `/`, revisions and refs that climb out of `refs/`, and a reused snapshot whose
//! links point outside the cache are all refused, and nothing is written outside the cache.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use common::{start, FakeFile, Hub, COMMIT, REPO};
use dspark_hub::download::{cached_snapshot, pull, repo_folder, NoProgress, PullOptions};
use dspark_hub::HubError;

fn opts(endpoint: &str, cache: &Path) -> PullOptions {
    PullOptions {
        revision: "main".into(),
        endpoint: endpoint.into(),
        cache: cache.into(),
        offline: false,
        token: None,
        retries: 0,
    }
}

fn unsafe_path(r: Result<impl std::fmt::Debug, HubError>) -> String {
    match r {
        Err(e @ HubError::UnsafePath { .. }) => e.to_string(),
        other => panic!("expected UnsafePath, got {other:?}"),
    }
}

#[test]
fn hub_file_names_cannot_leave_the_snapshot() {
    let base = tempfile::tempdir().unwrap();
    let cache = base.path().join("cache");
    for bad in [
        "../../../../escaped",
        "/tmp/abs-escaped",
        "a/../../b",
        "sub//x",
    ] {
        let mut hub = Hub::tiny_qwen3();
        hub.files.push(FakeFile {
            name: bad.into(),
            bytes: b"payload".to_vec(),
            lfs: false,
        });
        let srv = start(hub);
        let err = pull(REPO, &opts(&srv.endpoint, &cache), &NoProgress).unwrap_err();
        assert!(
            matches!(&err, HubError::Metadata { message, .. } if message.contains("unsafe file name")),
            "{bad}: {err}"
        );
        assert!(srv.hub.file_requests().is_empty(), "{bad}: fetched files");
    }
    assert!(!base.path().join("escaped").exists());
    assert!(
        !cache.exists(),
        "nothing written before the names were checked"
    );
}

#[test]
fn revisions_and_refs_cannot_climb_out() {
    let srv = start(Hub::tiny_qwen3());
    let cache = tempfile::tempdir().unwrap();
    for rev in ["../../outside", "/etc/passwd", "a/../../b"] {
        let mut o = opts(&srv.endpoint, cache.path());
        o.revision = rev.into();
        let msg = unsafe_path(pull(REPO, &o, &NoProgress));
        assert!(msg.contains("revision"), "{msg}");
        o.offline = true;
        unsafe_path(pull(REPO, &o, &NoProgress));
        unsafe_path(cached_snapshot(cache.path(), REPO, rev));
    }
    assert_eq!(srv.hub.requests(), 0, "refused before any request");

    // a ref file whose content is a path, not a commit id
    pull(REPO, &opts(&srv.endpoint, cache.path()), &NoProgress).unwrap();
    let refs = repo_folder(cache.path(), REPO).join("refs/main");
    fs::write(&refs, "../../../../elsewhere").unwrap();
    let msg = unsafe_path(cached_snapshot(cache.path(), REPO, "main"));
    assert!(msg.contains("not a commit id"), "{msg}");
}

#[test]
fn reused_snapshot_with_links_out_of_the_cache_is_refused() {
    let srv = start(Hub::tiny_qwen3());
    let base = tempfile::tempdir().unwrap();
    let cache = base.path().join("cache");
    let got = pull(REPO, &opts(&srv.endpoint, &cache), &NoProgress).unwrap();
    assert_eq!(
        cached_snapshot(&cache, REPO, "main").unwrap(),
        Some(got.snapshot.clone())
    );
    let secret = base.path().join("secret.txt");
    fs::write(&secret, "not yours").unwrap();

    // an extra file the loader would read (tokenizer.json) linked outside
    let planted = got.snapshot.join("tokenizer.json");
    symlink(&secret, &planted).unwrap();
    let mut off = opts(&srv.endpoint, &cache);
    off.offline = true;
    let msg = unsafe_path(pull(REPO, &off, &NoProgress));
    assert!(
        msg.contains("tokenizer.json") && msg.contains("outside"),
        "{msg}"
    );
    unsafe_path(cached_snapshot(&cache, REPO, "main"));
    // online, the planned files are relinked but the planted one is still refused
    unsafe_path(pull(REPO, &opts(&srv.endpoint, &cache), &NoProgress));
    fs::remove_file(&planted).unwrap();

    // a subfolder linked outside: refused before a pull writes a link through it
    let outdir = base.path().join("outdir");
    fs::create_dir_all(&outdir).unwrap();
    symlink(&outdir, got.snapshot.join("sub")).unwrap();
    let mut hub = Hub::tiny_qwen3();
    hub.files.push(FakeFile {
        name: "sub/extra.json".into(),
        bytes: b"{}".to_vec(),
        lfs: false,
    });
    let srv2 = start(hub);
    unsafe_path(pull(REPO, &opts(&srv2.endpoint, &cache), &NoProgress));
    assert_eq!(
        fs::read_dir(&outdir).unwrap().count(),
        0,
        "wrote through the link"
    );
    fs::remove_file(got.snapshot.join("sub")).unwrap();

    // the commit's snapshot folder itself replaced by a link outside
    let snap = repo_folder(&cache, REPO).join("snapshots").join(COMMIT);
    fs::rename(&snap, base.path().join("moved")).unwrap();
    symlink(base.path().join("moved"), &snap).unwrap();
    unsafe_path(cached_snapshot(&cache, REPO, "main"));
    unsafe_path(pull(REPO, &off, &NoProgress));
}
