//! Online pulls through the `hf-hub` crate: it resolves the revision (repo info), lists the files
//! (tree), downloads them into the Hugging Face cache layout (`blobs/<etag>`, snapshot symlinks)
//! and reports progress. On top of it, `resume` adds what it lacks (LFS hashes, Range resume,
//! integrity); here the blocking facade runs it on its own runtime thread, bridges its progress
//! events to [`Progress`] and polls [`Progress::cancelled`] between events.

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use hf_hub::progress::{DownloadEvent, FileStatus, ProgressEvent, ProgressHandler};
use hf_hub::repository::RepoTreeEntry;
use hf_hub::{HFClient, HFError, HFRepository, RepoTypeModel};

use crate::download::{is_commit, repo_folder, Progress, PullOptions, Pulled};
use crate::resume::{append_missing, io_err, lfs_hashes, verify, Hash};
use crate::HubError;

/// How often a running transfer forwards progress and checks for cancellation.
const POLL: Duration = Duration::from_millis(20);

pub(crate) fn hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (gated or private repo: set HF_TOKEN)",
        404 => " (no such repo, revision or file)",
        _ => "",
    }
}

/// An `hf-hub` error as a [`HubError`]; `what` names the repo or file it concerns.
pub(crate) fn map_err(e: HFError, what: &str) -> HubError {
    let http = |status: u16, url: String| HubError::Http {
        url,
        status,
        hint: hint(status),
    };
    match e {
        HFError::RepoNotFound { .. }
        | HFError::RevisionNotFound { .. }
        | HFError::EntryNotFound { .. } => http(404, what.into()),
        HFError::AuthRequired { context } => http(401, context.url),
        HFError::Forbidden { context } => http(403, context.url),
        HFError::RateLimited { context, .. } | HFError::Http { context } => {
            http(context.status.as_u16(), context.url)
        }
        HFError::Request { source, url } => HubError::Network {
            url: url.unwrap_or_else(|| what.into()),
            message: error_chain(&source),
        },
        HFError::Io(source) => HubError::Io {
            path: what.into(),
            source,
        },
        other => HubError::Metadata {
            url: what.into(),
            message: other.to_string(),
        },
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// One file of the snapshot and the hash it must have.
struct FilePlan {
    name: String,
    size: u64,
    hash: Hash,
}

/// Bytes announced by `hf-hub` (or by the resume stream) but not yet forwarded to [`Progress`].
#[derive(Default)]
struct Bridge {
    pending: AtomicU64,
    /// Cumulative count of the current file in `hf-hub`'s last event.
    last: Mutex<u64>,
}

impl Bridge {
    fn cumulative(&self, now: u64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if now > *last {
            self.pending.fetch_add(now - *last, Ordering::SeqCst);
            *last = now;
        }
    }

    /// Forwards what arrived since the last call; returns its size.
    fn flush(&self, progress: &dyn Progress) -> u64 {
        let n = self.pending.swap(0, Ordering::SeqCst);
        if n > 0 {
            progress.advance(n);
        }
        n
    }
}

impl ProgressHandler for Bridge {
    fn on_progress(&self, event: &ProgressEvent) {
        match event {
            ProgressEvent::Download(DownloadEvent::Progress { files }) => {
                // `Complete` carries the full size also for cache hits: only moving bytes count.
                for f in files.iter().filter(|f| f.status == FileStatus::InProgress) {
                    self.cumulative(f.bytes_completed);
                }
            }
            ProgressEvent::Download(DownloadEvent::AggregateProgress {
                bytes_completed, ..
            }) => self.cumulative(*bytes_completed),
            _ => {}
        }
    }
}

/// Runs `fut`, forwarding progress every [`POLL`]; drops it with [`HubError::Cancelled`] once
/// `progress.cancelled()`. Adds the bytes forwarded to `received`.
async fn drive<T>(
    fut: impl Future<Output = Result<T, HubError>>,
    bridge: &Bridge,
    progress: &dyn Progress,
    received: &mut u64,
) -> Result<T, HubError> {
    let out = {
        tokio::pin!(fut);
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                r = &mut fut => break r,
                _ = tick.tick() => {
                    *received += bridge.flush(progress);
                    if progress.cancelled() {
                        break Err(HubError::Cancelled);
                    }
                }
            }
        }
    };
    // the future is dropped: every byte it wrote has been announced
    *received += bridge.flush(progress);
    out
}

/// Downloads `repo` at `opts.revision` (the blocking entry point of [`crate::download::pull`]).
pub(crate) fn pull_online(
    repo: &str,
    opts: &PullOptions,
    progress: &dyn Progress,
) -> Result<Pulled, HubError> {
    // A runtime of its own on a thread of its own: callers may already be inside tokio.
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(io_err(&opts.cache))?;
            rt.block_on(run(repo, opts, progress))
        })
        .join()
        .unwrap_or_else(|_| {
            Err(HubError::Fetch {
                what: repo.into(),
                message: "the download thread panicked".into(),
            })
        })
    })
}

async fn plan(
    hf: &HFRepository<RepoTypeModel>,
    opts: &PullOptions,
    repo: &str,
) -> Result<(String, Vec<FilePlan>), HubError> {
    let info = hf
        .info()
        .revision(opts.revision.clone())
        .send()
        .await
        .map_err(|e| map_err(e, repo))?;
    let meta_err = |message: String| HubError::Metadata {
        url: format!("{}/api/models/{repo}", opts.endpoint),
        message,
    };
    let commit = info.sha.unwrap_or_default();
    if !is_commit(&commit) {
        return Err(meta_err(format!("`sha` {commit:?} is not a commit id")));
    }
    let mut entries = Vec::new();
    {
        let stream = hf
            .list_tree()
            .revision(commit.clone())
            .recursive(true)
            .send()
            .map_err(|e| map_err(e, repo))?;
        futures_util::pin_mut!(stream);
        while let Some(e) = stream.next().await {
            entries.push(e.map_err(|e| map_err(e, repo))?);
        }
    }
    let any_lfs = entries
        .iter()
        .any(|e| matches!(e, RepoTreeEntry::File { lfs: Some(_), .. }));
    let lfs = if any_lfs {
        lfs_hashes(&opts.endpoint, opts.token.as_deref(), repo, &commit).await?
    } else {
        Default::default()
    };
    let mut files = Vec::new();
    for e in entries {
        let RepoTreeEntry::File {
            oid,
            size,
            path,
            lfs: l,
            ..
        } = e
        else {
            continue;
        };
        if path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(meta_err(format!("unsafe file name {path:?}")));
        }
        let hash = match l {
            Some(_) => Hash::Sha256(
                lfs.get(&path)
                    .cloned()
                    .ok_or_else(|| meta_err(format!("{path}: no LFS sha256")))?,
            ),
            None => Hash::GitSha1(oid.to_ascii_lowercase()),
        };
        if !hash.hex().chars().all(|c| c.is_ascii_hexdigit()) || hash.hex().is_empty() {
            return Err(meta_err(format!("{path}: bad hash {:?}", hash.hex())));
        }
        files.push(FilePlan {
            name: path,
            size,
            hash,
        });
    }
    Ok((commit, files))
}

async fn run(repo: &str, opts: &PullOptions, progress: &dyn Progress) -> Result<Pulled, HubError> {
    let mut builder = HFClient::builder()
        .endpoint(opts.endpoint.clone())
        .cache_dir(opts.cache.clone())
        .user_agent(concat!("dspark/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = &opts.token {
        builder = builder.token(t.clone());
    }
    let client = builder.build().map_err(|e| map_err(e, &opts.endpoint))?;
    let (owner, name) = repo.split_once('/').unwrap_or(("", repo));
    let hf = client.model(owner, name);

    let (commit, files) = plan(&hf, opts, repo).await?;
    let folder = repo_folder(&opts.cache, repo);
    let blobs = folder.join("blobs");
    let snapshot = folder.join("snapshots").join(&commit);
    fs::create_dir_all(&blobs).map_err(io_err(&blobs))?;
    fs::create_dir_all(&snapshot).map_err(io_err(&snapshot))?;
    // a reused snapshot must not link outside the cache before anything is written through it
    crate::contain::check_snapshot(&folder, &snapshot)?;
    if !is_commit(&opts.revision) {
        let r = folder.join("refs").join(&opts.revision);
        fs::create_dir_all(r.parent().unwrap_or(&folder)).map_err(io_err(&folder))?;
        fs::write(&r, &commit).map_err(io_err(&r))?;
    }

    let size_of = |p: &Path| fs::metadata(p).map(|m| m.len()).ok();
    let on_disk = |f: &FilePlan| {
        let blob = blobs.join(f.hash.hex());
        match size_of(&blob) {
            Some(n) if n == f.size => f.size,
            _ => size_of(&part_of(&blob)).unwrap_or(0).min(f.size),
        }
    };
    let total = files.iter().map(|f| f.size).sum();
    progress.start(files.len(), total, files.iter().map(on_disk).sum());

    let mut fetched = 0;
    let mut reused = 0;
    for f in &files {
        if progress.cancelled() {
            return Err(HubError::Cancelled);
        }
        let blob = blobs.join(f.hash.hex());
        if size_of(&blob) == Some(f.size) {
            reused += 1;
        } else {
            fetched += fetch_file(&hf, &commit, f, &blob, opts.retries, progress).await?;
        }
        // hf-hub links the snapshot to the blob (no request when the link is already there)
        let linked = hf
            .download_file()
            .filename(f.name.clone())
            .revision(commit.clone())
            .send()
            .await
            .map_err(|e| map_err(e, &f.name))?;
        check_linked(&linked, &blob, f)?;
    }
    crate::contain::check_snapshot(&folder, &snapshot)?;
    progress.finish();
    Ok(Pulled {
        snapshot,
        commit,
        fetched_bytes: fetched,
        reused_files: reused,
    })
}

fn part_of(blob: &Path) -> PathBuf {
    let mut s = blob.as_os_str().to_owned();
    s.push(".incomplete");
    PathBuf::from(s)
}

/// The snapshot entry hf-hub returned must be the verified blob (it names blobs by the hub's
/// etag: a different name means the hub's headers and its metadata disagree).
fn check_linked(linked: &Path, blob: &Path, f: &FilePlan) -> Result<(), HubError> {
    let target = fs::canonicalize(linked).map_err(io_err(linked))?;
    let want = fs::canonicalize(blob).map_err(io_err(blob))?;
    if target == want {
        return Ok(());
    }
    // what hf-hub stored under another name is checked like any download
    let res = verify(&target, &f.name, f.size, &f.hash);
    let _ = fs::remove_file(linked);
    res.and(Err(HubError::Metadata {
        url: f.name.clone(),
        message: format!(
            "the hub's etag names blob {}, its metadata {}",
            target.display(),
            f.hash.hex()
        ),
    }))
}

/// Fetches one file into `blob`: a fresh file through `hf-hub`'s `download_file`, a part left by
/// an interrupted attempt through the Range wrapper; retries dropped connections; verifies.
/// Returns bytes received.
async fn fetch_file(
    hf: &HFRepository<RepoTypeModel>,
    commit: &str,
    f: &FilePlan,
    blob: &Path,
    retries: u32,
    progress: &dyn Progress,
) -> Result<u64, HubError> {
    let part = part_of(blob);
    let mut received = 0;
    let mut attempt = 0;
    loop {
        let mut have = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if have > f.size {
            fs::remove_file(&part).map_err(io_err(&part))?;
            have = 0;
        }
        progress.file_start(&f.name, f.size, have);
        if progress.cancelled() {
            return Err(HubError::Cancelled);
        }
        let bridge = Arc::new(Bridge::default());
        let res = if have == 0 {
            let fut = hf
                .download_file()
                .filename(f.name.clone())
                .revision(commit.to_string())
                .progress(hf_hub::progress::Progress::from(bridge.clone()))
                .send();
            let fut = async {
                let linked = fut.await.map_err(|e| map_err(e, &f.name))?;
                // hf-hub renamed what arrived into blobs/ and linked it: check it first
                let stored = fs::canonicalize(&linked).map_err(io_err(&linked))?;
                verify(&stored, &f.name, f.size, &f.hash).inspect_err(|_| {
                    let _ = fs::remove_file(&linked);
                })
            };
            drive(fut, &bridge, progress, &mut received).await
        } else {
            let b = bridge.clone();
            let mut on_bytes = move |n: u64| {
                b.pending.fetch_add(n, Ordering::SeqCst);
            };
            let fut = async {
                append_missing(hf, commit, &f.name, &part, f.size, &mut on_bytes).await?;
                verify(&part, &f.name, f.size, &f.hash)?;
                fs::rename(&part, blob).map_err(io_err(blob))
            };
            drive(fut, &bridge, progress, &mut received).await
        };
        match res {
            Ok(()) => break,
            Err(e @ HubError::Network { .. }) if attempt < retries => {
                attempt += 1;
                tracing::warn!("{}: {e}; resuming (attempt {attempt} of {retries})", f.name);
            }
            Err(e) => return Err(e),
        }
    }
    progress.file_done(&f.name);
    Ok(received)
}
