//! Turning a `--model` / `--drafter` value into a path on disk: `demo`, an existing file or
//! directory, a registry id, or a hub repo id found in LM Studio's folders, in the HF cache, or
//! downloaded into it. Also answers "is this repo on disk already?" for `dspark models`.

use std::path::{Path, PathBuf};

use crate::download::{cached_snapshot, pull, Progress, PullOptions};
use crate::registry::{self, DEMO};
use crate::{demo, paths, HubError};

/// Where a repo already lives on disk, if anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnDisk {
    HfCache(PathBuf),
    LmStudio(PathBuf),
    Demo(PathBuf),
}

impl OnDisk {
    pub fn path(&self) -> &Path {
        match self {
            OnDisk::HfCache(p) | OnDisk::LmStudio(p) | OnDisk::Demo(p) => p,
        }
    }
}

/// `org/name` in an LM Studio models folder (non-empty directory).
pub fn lmstudio_path(repo: &str) -> Option<PathBuf> {
    paths::lmstudio_dirs()
        .into_iter()
        .map(|d| d.join(repo))
        .find(|p| {
            p.is_dir()
                && p.read_dir()
                    .map(|mut r| r.next().is_some())
                    .unwrap_or(false)
        })
}

/// Where `repo` (or `demo`) already is, without touching the network.
pub fn find_on_disk(repo: &str) -> Option<OnDisk> {
    if demo::demo_drafter_dir(repo).is_some() {
        return demo::demo_drafter_path(repo).ok().map(OnDisk::Demo);
    }
    if repo == DEMO {
        let p = demo::demo_path();
        return p.is_file().then_some(OnDisk::Demo(p));
    }
    crate::download::check_repo_id(repo).ok()?;
    if let Some(p) = lmstudio_path(repo) {
        return Some(OnDisk::LmStudio(p));
    }
    // an unsafe snapshot is reported by `resolve_model_path`; here it is just not "on disk"
    cached_snapshot(&paths::hf_cache_dir(), repo, "main")
        .ok()
        .flatten()
        .map(OnDisk::HfCache)
}

fn looks_like_repo(spec: &str) -> bool {
    let mut parts = spec.split('/');
    matches!((parts.next(), parts.next(), parts.next()), (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty() && !a.starts_with('.'))
}

/// Resolves `spec` to a local path, downloading hub repos when allowed.
///
/// Order: `demo`; the demo's shipped drafters (`demo-dflash`, `demo-dspark`, from the
/// repository's `assets/drafters/`); an existing path; a registry id (`qwen3-8b`) becomes its default repo; a repo
/// id is taken from LM Studio's folders, then pulled into (or reused from) the HF cache. Offline
/// (`offline` or `HF_HUB_OFFLINE=1`) only the cache is used. When the hub cannot be reached
/// but a cached snapshot exists, that snapshot is used with a warning.
pub fn resolve_model_path(
    spec: &str,
    offline: bool,
    progress: &dyn Progress,
) -> Result<PathBuf, HubError> {
    if demo::demo_drafter_dir(spec).is_some() {
        return demo::demo_drafter_path(spec);
    }
    if spec == DEMO {
        if offline || crate::download::offline_env() {
            return Ok(find_on_disk(DEMO)
                .ok_or_else(|| {
                    HubError::NotFound(
                        "the demo model is not cached and offline mode forbids fetching it".into(),
                    )
                })?
                .path()
                .to_path_buf());
        }
        return demo::ensure_demo();
    }
    let p = Path::new(spec);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let repo = match registry::REGISTRY
        .iter()
        .find(|e| e.id == spec.to_lowercase())
    {
        Some(e) => e.default_target(),
        None => spec,
    };
    if repo == DEMO {
        return resolve_model_path(DEMO, offline, progress);
    }
    if !looks_like_repo(repo) {
        return Err(HubError::NotFound(format!(
            "model `{spec}` not found: pass a model directory, a .gguf file, a hub repo id (ORG/NAME), a registry id (see `dspark models`) or `demo`"
        )));
    }
    // `org/..` has the shape of a repo id but would name a folder above LM Studio's
    crate::download::check_repo_id(repo)?;
    if let Some(p) = lmstudio_path(repo) {
        tracing::info!("using {repo} from LM Studio's folder {}", p.display());
        return Ok(p);
    }
    let mut opts = PullOptions::from_env();
    opts.offline |= offline;
    match pull(repo, &opts, progress) {
        Ok(p) => Ok(p.snapshot),
        Err(
            e @ (HubError::Network { .. }
            | HubError::Http {
                status: 500..=599, ..
            }),
        ) => match cached_snapshot(&opts.cache, repo, &opts.revision)? {
            Some(snap) => {
                tracing::warn!("{e}; using the cached snapshot {}", snap.display());
                Ok(snap)
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_shape() {
        assert!(looks_like_repo("org/name"));
        assert!(!looks_like_repo("name"));
        assert!(!looks_like_repo("./x"));
        assert!(!looks_like_repo("a/b/c"));
    }
}
