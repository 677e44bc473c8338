//! Path containment for the Hugging Face cache: revision names that cannot climb out of
//! `refs/`, and a check that a snapshot reused from the cache holds nothing (a symlink, or the
//! snapshot folder itself) that resolves outside its repo's `blobs/` folder. The hub writes
//! `snapshots/<commit>/<file> -> ../../blobs/<hash>`; anything else pointing elsewhere (another
//! user's file, `/etc/...`) is refused before the model loader reads it.

use std::fs;
use std::path::{Path, PathBuf};

use crate::HubError;

/// Deepest folder nesting inside a snapshot that is walked (hub repos are shallow).
const MAX_DEPTH: usize = 16;

fn unsafe_path(path: &Path, reason: impl Into<String>) -> HubError {
    HubError::UnsafePath {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A revision (`main`, a tag, `refs/pr/1`, a commit) is joined under `refs/`: it must be
/// relative, without empty, `.` or `..` parts, in a conservative character set.
pub fn check_revision(rev: &str) -> Result<(), HubError> {
    let ok_part = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
    };
    if rev.split('/').all(ok_part) {
        Ok(())
    } else {
        Err(unsafe_path(
            Path::new(rev),
            "a revision must be a branch, tag or commit name without `..`, empty parts or a leading `/`",
        ))
    }
}

/// Checks that `snapshot` (a folder under `repo_folder/snapshots/`) and every symlink inside it
/// resolve inside `repo_folder/blobs/` (the snapshot folder itself inside `repo_folder`).
/// Regular files and folders inside the snapshot are accepted as they are (a copy where symlinks
/// are unavailable). The repo folder may itself be reached through a symlink (a cache moved to
/// another disk): containment is decided on canonical paths.
pub fn check_snapshot(repo_folder: &Path, snapshot: &Path) -> Result<(), HubError> {
    let canon = |p: &Path| {
        fs::canonicalize(p).map_err(|e| unsafe_path(p, format!("cannot be resolved: {e}")))
    };
    let root = canon(repo_folder)?;
    let snap = canon(snapshot)?;
    if !snap.starts_with(root.join("snapshots")) {
        return Err(unsafe_path(
            snapshot,
            format!(
                "the snapshot resolves to {}, outside {}",
                snap.display(),
                root.display()
            ),
        ));
    }
    let blobs = root.join("blobs");
    walk(&snap, &blobs, 0)
}

fn walk(dir: &Path, blobs: &Path, depth: usize) -> Result<(), HubError> {
    if depth > MAX_DEPTH {
        return Err(unsafe_path(
            dir,
            format!("nested deeper than {MAX_DEPTH} folders"),
        ));
    }
    let entries = fs::read_dir(dir).map_err(|source| HubError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| HubError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(|source| HubError::Io {
            path: path.clone(),
            source,
        })?;
        if meta.file_type().is_symlink() {
            let target: PathBuf = fs::canonicalize(&path).map_err(|e| {
                unsafe_path(
                    &path,
                    format!("a link whose target cannot be resolved: {e}"),
                )
            })?;
            if !target.starts_with(blobs) {
                return Err(unsafe_path(
                    &path,
                    format!(
                        "links to {}, outside the cache's {}",
                        target.display(),
                        blobs.display()
                    ),
                ));
            }
        } else if meta.is_dir() {
            walk(&path, blobs, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_cannot_climb() {
        for ok in [
            "main",
            "v1.0",
            "refs/pr/1",
            "0123456789abcdef0123456789abcdef01234567",
        ] {
            assert!(check_revision(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../x",
            "a/../../b",
            "/etc",
            "a//b",
            "a/.",
            "a b",
            "a\\..\\b",
        ] {
            assert!(check_revision(bad).is_err(), "{bad}");
        }
    }

    /// A cache laid out as the hub writes it passes; a snapshot file linked outside `blobs/`
    /// (absolute or relative), a linked folder, a dangling link and a snapshot folder that is
    /// itself a link outside are each refused, with the offending path in the message.
    #[cfg(unix)]
    #[test]
    fn snapshot_links_must_stay_in_the_cache() {
        use std::os::unix::fs::symlink;
        let base = std::env::temp_dir().join(format!("dspark-contain-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let repo = base.join("cache/models--org--name");
        let snap = repo.join("snapshots/abc");
        fs::create_dir_all(snap.join("sub")).unwrap();
        fs::create_dir_all(repo.join("blobs")).unwrap();
        fs::write(repo.join("blobs/h1"), "{}").unwrap();
        fs::write(repo.join("blobs/h2"), "x").unwrap();
        symlink("../../blobs/h1", snap.join("config.json")).unwrap();
        symlink("../../../blobs/h2", snap.join("sub/a.txt")).unwrap();
        fs::write(snap.join("copied.txt"), "a plain copy").unwrap();
        check_snapshot(&repo, &snap).unwrap();

        let outside = base.join("secret");
        fs::write(&outside, "not a model").unwrap();
        type Make<'a> = &'a dyn Fn(&Path);
        let cases: [(&str, Make); 4] = [
            ("absolute link out", &|p| symlink(&outside, p).unwrap()),
            ("relative link out", &|p| {
                symlink("../../../../secret", p).unwrap()
            }),
            ("link to a folder out", &|p| symlink(&base, p).unwrap()),
            ("dangling link", &|p| {
                symlink("../../blobs/missing", p).unwrap()
            }),
        ];
        for (what, make) in cases {
            let bad = snap.join("sub/model.safetensors");
            make(&bad);
            let err = check_snapshot(&repo, &snap).unwrap_err();
            assert!(matches!(err, HubError::UnsafePath { .. }), "{what}: {err}");
            assert!(
                err.to_string().contains("model.safetensors"),
                "{what}: {err}"
            );
            fs::remove_file(&bad).unwrap();
        }
        check_snapshot(&repo, &snap).unwrap();

        // the snapshot folder itself linked outside the repo folder
        let elsewhere = base.join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        let linked = repo.join("snapshots/def");
        symlink(&elsewhere, &linked).unwrap();
        assert!(matches!(
            check_snapshot(&repo, &linked),
            Err(HubError::UnsafePath { .. })
        ));

        // a whole cache reached through a symlink (moved to another disk) is fine
        let alias = base.join("alias");
        symlink(base.join("cache"), &alias).unwrap();
        check_snapshot(
            &alias.join("models--org--name"),
            &alias.join("models--org--name/snapshots/abc"),
        )
        .unwrap();
        let _ = fs::remove_dir_all(&base);
    }
}
