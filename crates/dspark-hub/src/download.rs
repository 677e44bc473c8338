//! Hugging Face hub downloads into the standard cache layout
//! (`models--org--name/{blobs,snapshots/<commit>,refs/<rev>}`), with resume and integrity.
//!
//! Each file streams into `blobs/<hash>.incomplete`; an interrupted download (Ctrl-C, a dropped
//! connection) leaves that prefix on disk and the next pull continues with an HTTP Range request.
//! A finished blob is checked against the size and hash in the hub metadata (LFS sha256, or the
//! git blob sha1 of small files) before it is renamed into place and linked from the snapshot.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sha1::Sha1;
use sha2::{Digest, Sha256};

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

#[derive(Deserialize)]
struct RepoInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: String,
    size: u64,
}

/// What a finished file must look like.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Hash {
    Sha256(String),
    GitSha1(String),
}

impl Hash {
    fn hex(&self) -> &str {
        match self {
            Hash::Sha256(h) | Hash::GitSha1(h) => h,
        }
    }
}

struct FilePlan {
    name: String,
    size: u64,
    hash: Hash,
}

/// `models--org--name` under the cache.
pub fn repo_folder(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

fn check_repo_id(repo: &str) -> Result<(), HubError> {
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

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit())
}

/// The snapshot of `repo@revision` already in the cache, without touching the network.
pub fn cached_snapshot(cache: &Path, repo: &str, revision: &str) -> Option<PathBuf> {
    let folder = repo_folder(cache, repo);
    let commit = if is_commit(revision) {
        revision.to_string()
    } else {
        fs::read_to_string(folder.join("refs").join(revision))
            .ok()?
            .trim()
            .to_string()
    };
    let snap = folder.join("snapshots").join(commit);
    snap.is_dir().then_some(snap)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Percent-encodes everything but unreserved characters and `/`.
fn encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Client {
    agent: ureq::Agent,
    token: Option<String>,
}

impl Client {
    fn new(token: Option<String>) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(30))
            .timeout_read(Duration::from_secs(60))
            .redirects(10)
            .user_agent(concat!("dspark/", env!("CARGO_PKG_VERSION")))
            .build();
        Client { agent, token }
    }

    fn get(&self, url: &str, range_from: u64) -> Result<ureq::Response, HubError> {
        let mut req = self.agent.get(url);
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        if range_from > 0 {
            req = req.set("Range", &format!("bytes={range_from}-"));
        }
        req.call().map_err(|e| match e {
            ureq::Error::Status(status, _) => HubError::Http {
                url: url.into(),
                status,
                hint: match status {
                    401 | 403 => " (gated or private repo: set HF_TOKEN)",
                    404 => " (no such repo, revision or file)",
                    _ => "",
                },
            },
            ureq::Error::Transport(t) => HubError::Network {
                url: url.into(),
                message: t.to_string(),
            },
        })
    }
}

fn fetch_plan(
    client: &Client,
    opts: &PullOptions,
    repo: &str,
) -> Result<(String, Vec<FilePlan>), HubError> {
    let url = format!(
        "{}/api/models/{repo}/revision/{}?blobs=true",
        opts.endpoint,
        encode_path(&opts.revision)
    );
    let meta_err = |message: String| HubError::Metadata {
        url: url.clone(),
        message,
    };
    let body = client
        .get(&url, 0)?
        .into_string()
        .map_err(|e| meta_err(e.to_string()))?;
    let info: RepoInfo = serde_json::from_str(&body).map_err(|e| meta_err(e.to_string()))?;
    if !is_commit(&info.sha) {
        return Err(meta_err(format!("`sha` {:?} is not a commit id", info.sha)));
    }
    let mut files = Vec::with_capacity(info.siblings.len());
    for s in info.siblings {
        if s.rfilename
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(meta_err(format!("unsafe file name {:?}", s.rfilename)));
        }
        let (size, hash) = match (s.lfs, s.size, s.blob_id) {
            (Some(l), _, _) => (l.size, Hash::Sha256(l.sha256.to_ascii_lowercase())),
            (None, Some(size), Some(b)) => (size, Hash::GitSha1(b.to_ascii_lowercase())),
            _ => {
                return Err(meta_err(format!(
                    "{}: no size or hash (the `?blobs=true` fields)",
                    s.rfilename
                )))
            }
        };
        if !hash.hex().chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(meta_err(format!(
                "{}: bad hash {:?}",
                s.rfilename,
                hash.hex()
            )));
        }
        files.push(FilePlan {
            name: s.rfilename,
            size,
            hash,
        });
    }
    Ok((info.sha, files))
}

/// Downloads (or completes) `repo` at `opts.revision` into the HF cache and returns its snapshot.
/// Offline, only the cache is consulted.
pub fn pull(repo: &str, opts: &PullOptions, progress: &dyn Progress) -> Result<Pulled, HubError> {
    check_repo_id(repo)?;
    if opts.offline {
        return match cached_snapshot(&opts.cache, repo, &opts.revision) {
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
    let client = Client::new(opts.token.clone());
    let (commit, files) = fetch_plan(&client, opts, repo)?;
    let folder = repo_folder(&opts.cache, repo);
    let blobs = folder.join("blobs");
    let snapshot = folder.join("snapshots").join(&commit);
    fs::create_dir_all(&blobs).map_err(io_err(&blobs))?;
    fs::create_dir_all(&snapshot).map_err(io_err(&snapshot))?;
    if !is_commit(&opts.revision) {
        let refs = folder.join("refs");
        let r = refs.join(&opts.revision);
        fs::create_dir_all(r.parent().unwrap_or(&refs)).map_err(io_err(&refs))?;
        fs::write(&r, &commit).map_err(io_err(&r))?;
    }

    let total: u64 = files.iter().map(|f| f.size).sum();
    let on_disk = |f: &FilePlan| {
        let blob = blobs.join(f.hash.hex());
        match fs::metadata(&blob) {
            Ok(m) if m.len() == f.size => f.size,
            _ => fs::metadata(blob.with_extension("incomplete"))
                .map(|m| m.len().min(f.size))
                .unwrap_or(0),
        }
    };
    progress.start(files.len(), total, files.iter().map(on_disk).sum());

    let mut fetched = 0;
    let mut reused = 0;
    for f in &files {
        let blob = blobs.join(f.hash.hex());
        let complete = fs::metadata(&blob)
            .map(|m| m.len() == f.size)
            .unwrap_or(false);
        if complete {
            reused += 1;
        } else {
            let url = format!(
                "{}/{repo}/resolve/{commit}/{}",
                opts.endpoint,
                encode_path(&f.name)
            );
            fetched += fetch_blob(&client, &url, &blob, f, opts.retries, progress)?;
        }
        link_snapshot(&snapshot, &f.name, f.hash.hex())?;
    }
    progress.finish();
    Ok(Pulled {
        snapshot,
        commit,
        fetched_bytes: fetched,
        reused_files: reused,
    })
}

/// Fetches one blob through its `.incomplete` file, resuming and retrying; returns bytes received.
fn fetch_blob(
    client: &Client,
    url: &str,
    blob: &Path,
    f: &FilePlan,
    retries: u32,
    progress: &dyn Progress,
) -> Result<u64, HubError> {
    let part = blob.with_extension("incomplete");
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
        match transfer(client, url, &part, have, f.size, progress, &mut received) {
            Ok(()) => break,
            Err(e @ HubError::Network { .. }) if attempt < retries => {
                attempt += 1;
                tracing::warn!("{}: {e}; resuming (attempt {attempt} of {retries})", f.name);
            }
            Err(e) => return Err(e),
        }
    }
    verify(&part, f)?;
    fs::rename(&part, blob).map_err(io_err(blob))?;
    progress.file_done(&f.name);
    Ok(received)
}

/// Appends bytes `have..size` of `url` to `part`.
fn transfer(
    client: &Client,
    url: &str,
    part: &Path,
    have: u64,
    size: u64,
    progress: &dyn Progress,
    received: &mut u64,
) -> Result<(), HubError> {
    if have == size && size > 0 {
        return Ok(());
    }
    let resp = match client.get(url, have) {
        Err(HubError::Http { status: 416, .. }) if have > 0 => return Ok(()),
        r => r?,
    };
    let resumed = have > 0 && resp.status() == 206;
    let mut out = OpenOptions::new()
        .create(true)
        .append(resumed)
        .write(true)
        .truncate(!resumed)
        .open(part)
        .map_err(io_err(part))?;
    let mut reader = resp.into_reader();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(HubError::Network {
                    url: url.into(),
                    message: e.to_string(),
                })
            }
        };
        out.write_all(&buf[..n]).map_err(io_err(part))?;
        *received += n as u64;
        progress.advance(n as u64);
        if progress.cancelled() {
            return Err(HubError::Cancelled);
        }
    }
}

/// Checks size and hash; a mismatching file is removed so the next pull starts clean.
fn verify(part: &Path, f: &FilePlan) -> Result<(), HubError> {
    let got = fs::metadata(part).map_err(io_err(part))?.len();
    let got_hash = if got == f.size {
        hash_file(part, &f.hash)?
    } else {
        String::new()
    };
    if got == f.size && got_hash == f.hash.hex() {
        return Ok(());
    }
    let _ = fs::remove_file(part);
    Err(HubError::Corrupt {
        file: f.name.clone(),
        algo: match f.hash {
            Hash::Sha256(_) => "sha256",
            Hash::GitSha1(_) => "git-sha1",
        },
        got,
        got_hash,
        want: f.size,
        want_hash: f.hash.hex().into(),
    })
}

fn hash_file(path: &Path, kind: &Hash) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let len = file.metadata().map_err(io_err(path))?.len();
    let mut sha256 = Sha256::new();
    let mut sha1 = Sha1::new();
    if let Hash::GitSha1(_) = kind {
        sha1.update(format!("blob {len}\0").as_bytes());
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        match kind {
            Hash::Sha256(_) => sha256.update(&buf[..n]),
            Hash::GitSha1(_) => sha1.update(&buf[..n]),
        }
    }
    let bytes: Vec<u8> = match kind {
        Hash::Sha256(_) => sha256.finalize().to_vec(),
        Hash::GitSha1(_) => sha1.finalize().to_vec(),
    };
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `snapshots/<commit>/<name>` -> `../../blobs/<hash>` (a copy where symlinks are unavailable).
fn link_snapshot(snapshot: &Path, name: &str, hash: &str) -> Result<(), HubError> {
    let dst = snapshot.join(name);
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let depth = name.matches('/').count() + 2;
    let rel: PathBuf = std::iter::repeat_n("..", depth)
        .collect::<PathBuf>()
        .join("blobs")
        .join(hash);
    if fs::read_link(&dst).map(|t| t == rel).unwrap_or(false) {
        return Ok(());
    }
    let _ = fs::remove_file(&dst);
    #[cfg(unix)]
    let res = std::os::unix::fs::symlink(&rel, &dst);
    #[cfg(not(unix))]
    let res = fs::copy(snapshot.join(&rel), &dst).map(|_| ());
    res.map_err(io_err(&dst))
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

    #[test]
    fn paths_are_encoded() {
        assert_eq!(encode_path("sub dir/a+b.json"), "sub%20dir/a%2Bb.json");
    }

    #[test]
    fn git_blob_sha1_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let d = tempdir();
        let p = d.join("f");
        fs::write(&p, "hello\n").unwrap();
        let h = hash_file(&p, &Hash::GitSha1(String::new())).unwrap();
        assert_eq!(h, "ce013625030ba8dba906f756967f9e9ca394464a");
        let _ = fs::remove_dir_all(d);
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("dspark-hub-unit-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }
}
