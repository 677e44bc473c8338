//! What plain `hf-hub` 1.0.0 does against the fake hub where `dspark_hub::download::pull` needs
//! more: each test pins down one gap that `src/resume.rs` fills. Should an `hf-hub` release
//! close a gap, its test here fails, and that part of the wrapper can go.
//!
//! - an interrupted download starts again from byte 0 (no `Range`);
//! - corrupted bytes are stored as the blob named by the hub's hash, unchecked;
//! - the tree listing drops the LFS sha256 (the hub sends `lfs.oid`, `hf-hub` reads `sha256`).
//!
//! The same situations through `pull` are `hub_download.rs`'s
//! `interrupted_download_resumes_without_refetching`, `corrupted_download_is_rejected_then_repaired`
//! and `pull_writes_the_hf_cache_layout`.

mod common;

use std::fs;

use common::{start, Hub, COMMIT, REPO};
use futures_util::StreamExt;
use hf_hub::repository::RepoTreeEntry;
use hf_hub::{HFClient, HFRepository, RepoTypeModel};
use sha2::{Digest, Sha256};

const MODEL: &str = "model.safetensors";

fn repo(endpoint: &str, cache: &std::path::Path) -> HFRepository<RepoTypeModel> {
    let client = HFClient::builder()
        .endpoint(endpoint)
        .cache_dir(cache)
        .retry_max_attempts(1)
        .build()
        .unwrap();
    let (owner, name) = REPO.split_once('/').unwrap();
    client.model(owner, name)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn hf_hub_alone_restarts_an_interrupted_download_from_zero() {
    let hub = Hub::tiny_qwen3();
    let size = hub.file(MODEL).bytes.len() as u64;
    let sha = hub.file(MODEL).sha256();
    *hub.cut_after.lock().unwrap() = Some((MODEL.into(), 300_000));
    let srv = start(hub);
    let cache = tempfile::tempdir().unwrap();
    let hf = repo(&srv.endpoint, cache.path());
    let rt = rt();
    let get = || rt.block_on(hf.download_file().filename(MODEL).revision(COMMIT).send());

    assert!(get().is_err(), "the cut connection fails the download");
    let part = cache
        .path()
        .join("models--tiny-org--tiny-qwen3/blobs")
        .join(format!("{sha}.incomplete"));
    let kept = fs::metadata(&part).unwrap().len();
    assert!(kept > 0, "the interrupted part is on disk ({kept} bytes)");

    get().unwrap();
    let gets: Vec<u64> = srv
        .hub
        .file_requests()
        .into_iter()
        .filter(|(n, _)| n == MODEL)
        .map(|(_, from)| from)
        .collect();
    assert_eq!(
        gets,
        vec![0, 0],
        "the second GET starts at 0, not at {kept}"
    );
    assert_eq!(
        srv.hub.served(),
        kept + size,
        "the kept bytes were fetched again"
    );
}

#[test]
fn hf_hub_alone_stores_corrupted_bytes() {
    let hub = Hub::tiny_qwen3();
    hub.corrupt.lock().unwrap().push(MODEL.into());
    let sha = hub.file(MODEL).sha256();
    let srv = start(hub);
    let cache = tempfile::tempdir().unwrap();
    let hf = repo(&srv.endpoint, cache.path());
    let path = rt()
        .block_on(hf.download_file().filename(MODEL).revision(COMMIT).send())
        .expect("hf-hub accepts the corrupted download");
    let blob = fs::canonicalize(&path).unwrap();
    assert_eq!(blob.file_name().unwrap().to_str(), Some(sha.as_str()));
    let got = common::hex(&Sha256::digest(fs::read(&blob).unwrap()));
    assert_ne!(got, sha, "the blob named {sha} holds other bytes");
}

#[test]
fn hf_hub_tree_listing_drops_the_lfs_sha256() {
    let srv = start(Hub::tiny_qwen3());
    let cache = tempfile::tempdir().unwrap();
    let hf = repo(&srv.endpoint, cache.path());
    let entries: Vec<RepoTreeEntry> = rt().block_on(async {
        let s = hf
            .list_tree()
            .revision(COMMIT)
            .recursive(true)
            .send()
            .unwrap();
        futures_util::pin_mut!(s);
        let mut v = Vec::new();
        while let Some(e) = s.next().await {
            v.push(e.unwrap());
        }
        v
    });
    let lfs = entries
        .iter()
        .find_map(|e| match e {
            RepoTreeEntry::File { path, lfs, .. } if path == MODEL => lfs.clone(),
            _ => None,
        })
        .expect("the LFS file is listed as LFS");
    assert_eq!(lfs.size, Some(srv.hub.file(MODEL).bytes.len() as u64));
    assert_eq!(lfs.sha256, None, "the hub's lfs.oid is not read");
}
