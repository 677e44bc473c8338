//! What `hf-hub` 1.0.0 lacks, kept as the smallest layer on top of it: the expected hash of each
//! file, Range resume of a `blobs/<hash>.incomplete` part, and the size + hash check of a
//! finished blob.
//!
//! - Hashes: `hf-hub`'s tree listing reads the LFS hash from a `sha256` field, but the hub's
//!   tree endpoint calls it `oid`, so LFS files come back without one; its repo info cannot ask
//!   for the `?blobs=true` fields. [`lfs_hashes`] makes that one metadata request.
//! - Resume: `hf-hub` streams every download into a fresh `.incomplete` file (no `Range`), so an
//!   interrupted file starts again from zero. [`append_missing`] continues a part through
//!   `hf-hub`'s ranged `download_file_stream`.
//! - Integrity: `hf-hub` renames whatever arrived into `blobs/`; [`verify`] checks the size and
//!   the sha256 (LFS) or git blob sha1 (small files) first.
//!
//! `tests/hub_hf_gaps.rs` shows each gap on plain `hf-hub` against the fake hub.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use futures_util::StreamExt;
use hf_hub::{HFRepository, RepoTypeModel};
use serde::Deserialize;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::HubError;

/// What a finished file must hash to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hash {
    Sha256(String),
    GitSha1(String),
}

impl Hash {
    pub(crate) fn hex(&self) -> &str {
        match self {
            Hash::Sha256(h) | Hash::GitSha1(h) => h,
        }
    }

    fn algo(&self) -> &'static str {
        match self {
            Hash::Sha256(_) => "sha256",
            Hash::GitSha1(_) => "git-sha1",
        }
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Deserialize)]
struct BlobsInfo {
    #[serde(default)]
    siblings: Vec<BlobsSibling>,
}

#[derive(Deserialize)]
struct BlobsSibling {
    rfilename: String,
    lfs: Option<BlobsLfs>,
}

#[derive(Deserialize)]
struct BlobsLfs {
    sha256: String,
}

/// File name -> LFS sha256 at `commit`, from `/api/models/{repo}/revision/{commit}?blobs=true`.
pub(crate) async fn lfs_hashes(
    endpoint: &str,
    token: Option<&str>,
    repo: &str,
    commit: &str,
) -> Result<HashMap<String, String>, HubError> {
    let url = format!("{endpoint}/api/models/{repo}/revision/{commit}?blobs=true");
    let meta_err = |message: String| HubError::Metadata {
        url: url.clone(),
        message,
    };
    let mut req = reqwest::Client::new().get(&url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| HubError::Network {
        url: url.clone(),
        message: e.to_string(),
    })?;
    if !resp.status().is_success() {
        return Err(HubError::Http {
            url: url.clone(),
            status: resp.status().as_u16(),
            hint: crate::fetch::hint(resp.status().as_u16()),
        });
    }
    let body = resp.bytes().await.map_err(|e| meta_err(e.to_string()))?;
    let info: BlobsInfo = serde_json::from_slice(&body).map_err(|e| meta_err(e.to_string()))?;
    let mut out = HashMap::new();
    for s in info.siblings {
        if let Some(l) = s.lfs {
            let h = l.sha256.to_ascii_lowercase();
            if h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(meta_err(format!("{}: bad sha256 {h:?}", s.rfilename)));
            }
            out.insert(s.rfilename, h);
        }
    }
    Ok(out)
}

/// Appends bytes `have..size` of `name@commit` to `part` through `hf-hub`'s ranged stream,
/// calling `on_bytes` for each chunk written.
pub(crate) async fn append_missing(
    repo: &HFRepository<RepoTypeModel>,
    commit: &str,
    name: &str,
    part: &Path,
    size: u64,
    on_bytes: &mut (dyn FnMut(u64) + Send),
) -> Result<(), HubError> {
    let have = fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    if have >= size {
        return Ok(());
    }
    let (_, mut stream) = repo
        .download_file_stream()
        .filename(name)
        .revision(commit)
        .range(have..size)
        .send()
        .await
        .map_err(|e| crate::fetch::map_err(e, name))?;
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(part)
        .map_err(io_err(part))?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| crate::fetch::map_err(e, name))?;
        out.write_all(&chunk).map_err(io_err(part))?;
        on_bytes(chunk.len() as u64);
    }
    Ok(())
}

/// Checks `path` against `size` and `hash`; a mismatching file is removed so the next pull
/// starts clean.
pub(crate) fn verify(path: &Path, name: &str, size: u64, hash: &Hash) -> Result<(), HubError> {
    let got = fs::metadata(path).map_err(io_err(path))?.len();
    let got_hash = if got == size {
        hash_file(path, hash)?
    } else {
        String::new()
    };
    if got == size && got_hash == hash.hex() {
        return Ok(());
    }
    let _ = fs::remove_file(path);
    Err(HubError::Corrupt {
        file: name.into(),
        algo: hash.algo(),
        got,
        got_hash,
        want: size,
        want_hash: hash.hex().into(),
    })
}

/// The hex digest of `path` in the algorithm of `kind` (git's `blob <len>\0` prefix for sha1).
pub(crate) fn hash_file(path: &Path, kind: &Hash) -> Result<String, HubError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_sha1_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fs::write(&p, "hello\n").unwrap();
        let h = hash_file(&p, &Hash::GitSha1(String::new())).unwrap();
        assert_eq!(h, "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
