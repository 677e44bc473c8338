//! The blocking face of hub downloads: [`pull`] of a repo into the Hugging Face cache layout
//! (`models--org--name/{blobs,snapshots/<commit>,refs/<rev>}`), its options from the
//! environment, the [`Progress`] callbacks, and cache lookups that need no network.
//!
//! The transfer itself runs on the `hf-hub` crate (`fetch`), with Range resume of
//! `blobs/<hash>.incomplete` parts and the size + hash check of every blob (LFS sha256, or the
//! git blob sha1 of small files) kept on top where `hf-hub` lacks them (`resume`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::contain::{check_revision, check_snapshot};
use crate::HubError;

/// The public hub, used unless `HF_ENDPOINT` says otherwise.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Receives download events; every method defaults to doing nothing.
pub trait Progress: Sync {
    /// Before the first file: file count, bytes of the whole snapshot, bytes already on disk.
    fn start(&self, _files: usize, _total: u64, _done: u64) {}
    /// A file begins (or resumes at `done` bytes).
    fn file_start(&self, _name: &str, _size: u64, _done: u64) {}
    fn advance(&self, _bytes: u64) {}
    fn file_done(&self, _name: &str) {}
    fn finish(&self) {}
    /// Polled between chunks: `true` stops the download with [`HubError::Cancelled`]; what
    /// arrived stays on disk and the next pull resumes from it.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Progress that reports nothing.
pub struct NoProgress;
impl Progress for NoProgress {}

/// Where and how to pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    pub revision: String,
    pub endpoint: String,
    pub cache: PathBuf,
    pub offline: bool,
    pub token: Option<String>,
    /// Automatic resumes after a dropped connection, per file.
    pub retries: u32,
}

impl PullOptions {
    /// `HF_ENDPOINT`, `HF_HUB_OFFLINE`, `HF_TOKEN` and the HF cache from the environment.
    pub fn from_env() -> PullOptions {
        let endpoint = std::env::var("HF_ENDPOINT").ok().filter(|s| !s.is_empty());
        PullOptions {
            revision: "main".into(),
            endpoint: endpoint
                .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
                .trim_end_matches('/')
                .into(),
            cache: crate::paths::hf_cache_dir(),
            offline: offline_env(),
            token: std::env::var("HF_TOKEN").ok().filter(|s| !s.is_empty()),
            retries: 3,
        }
    }
}

/// True when `HF_HUB_OFFLINE` is set to 1/true/yes/on.
pub fn offline_env() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// The result of a pull.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub snapshot: PathBuf,
    pub commit: String,
    /// Bytes received over the network in this call.
    pub fetched_bytes: u64,
    /// Files that were already complete in the cache.
    pub reused_files: usize,
}

/// `models--org--name` under the cache.
pub fn repo_folder(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

pub(crate) fn check_repo_id(repo: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = repo.split('/').collect();
    let ok_part = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if parts.len() == 2 && parts.iter().all(|p| ok_part(p)) {
        Ok(())
    } else {
        Err(HubError::BadRepoId(repo.into()))
    }
}

pub(crate) fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit())
}

/// The snapshot of `repo@revision` already in the cache, without touching the network.
/// `Ok(None)` when it is not there; an error when the revision or the ref's content could
/// climb out of the cache, or when the snapshot links outside it ([`check_snapshot`]).
pub fn cached_snapshot(
    cache: &Path,
    repo: &str,
    revision: &str,
) -> Result<Option<PathBuf>, HubError> {
    check_repo_id(repo)?;
    check_revision(revision)?;
    let folder = repo_folder(cache, repo);
    let commit = if is_commit(revision) {
        revision.to_string()
    } else {
        let r = folder.join("refs").join(revision);
        let Ok(text) = fs::read_to_string(&r) else {
            return Ok(None);
        };
        let commit = text.trim().to_string();
        if !is_commit(&commit) {
            return Err(HubError::UnsafePath {
                path: r,
                reason: format!("the ref holds {commit:?}, not a commit id"),
            });
        }
        commit
    };
    let snap = folder.join("snapshots").join(commit);
    if !snap.is_dir() {
        return Ok(None);
    }
    check_snapshot(&folder, &snap)?;
    Ok(Some(snap))
}

/// Downloads (or completes) `repo` at `opts.revision` into the HF cache and returns its snapshot.
/// Offline, only the cache is consulted.
pub fn pull(repo: &str, opts: &PullOptions, progress: &dyn Progress) -> Result<Pulled, HubError> {
    check_repo_id(repo)?;
    check_revision(&opts.revision)?;
    if opts.offline {
        return match cached_snapshot(&opts.cache, repo, &opts.revision)? {
            Some(snapshot) => {
                let commit = snapshot
                    .file_name()
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok(Pulled {
                    snapshot,
                    commit,
                    fetched_bytes: 0,
                    reused_files: 0,
                })
            }
            None => Err(HubError::Offline {
                repo: repo.into(),
                revision: opts.revision.clone(),
                cache: opts.cache.clone(),
            }),
        };
    }
    crate::fetch::pull_online(repo, opts, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_are_checked() {
        assert!(check_repo_id("org/name-1.5B_x").is_ok());
        for bad in ["name", "a/b/c", "../x", "a/..", "a b/c", "/x"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
    }
}
