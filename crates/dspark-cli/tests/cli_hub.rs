//! The `dspark` binary's hub commands against the fake hub on 127.0.0.1:0 (shared with the hub
//! crate's tests): `pull` interrupted with Ctrl-C (SIGINT) and resumed without refetching,
//! `pull` offline, `models` marking an LM Studio copy, `doctor` failing on an unwritable cache.

#[path = "../../dspark-hub/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{start, Hub, REPO};
use sha2::{Digest, Sha256};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, endpoint: &str) -> Command {
        let d = self.dir.path();
        let mut c = Command::new(env!("CARGO_BIN_EXE_dspark"));
        c.env("HF_ENDPOINT", endpoint)
            .env("HF_HOME", d.join("hf"))
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_TOKEN")
            .env("DSPARK_CACHE", d.join("cache"))
            .env("DSPARK_CONFIG", d.join("config.toml"))
            .env("DSPARK_LMSTUDIO_DIRS", d.join("lmstudio"));
        c
    }

    fn blobs(&self) -> std::path::PathBuf {
        self.dir
            .path()
            .join("hf/hub/models--tiny-org--tiny-qwen3/blobs")
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn pull_interrupted_by_ctrl_c_resumes_without_refetching() {
    let hub = Hub::tiny_qwen3();
    let size = hub.file("model.safetensors").bytes.len() as u64;
    let want = hub.file("model.safetensors").sha256();
    let (tx, rx) = std::sync::mpsc::channel();
    *hub.stall_after.lock().unwrap() = Some(("model.safetensors".into(), 200_000, tx));
    let srv = start(hub);
    let env = Env::new();

    let mut cmd = env.cmd(&srv.endpoint);
    cmd.args(["pull", REPO]).stderr(std::process::Stdio::null());
    // A shell without job control starts background jobs with SIGINT ignored, and the child
    // would inherit that (the test then waits forever): give it the terminal's default.
    // SAFETY: only async-signal-safe `signal` runs between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the server sent the first part");
    // The bytes are on the wire; wait (bounded) until the client has written them.
    let part = env.blobs().join(format!("{want}.incomplete"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0) < 200_000 {
        assert!(
            Instant::now() < deadline,
            "client never wrote the first 200000 bytes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
    let kept = std::fs::metadata(&part).unwrap().len();
    assert_eq!(kept, 200_000);

    *srv.hub.stall_after.lock().unwrap() = None;
    let served = srv.hub.served();
    let out = env
        .cmd(&srv.endpoint)
        .args(["pull", REPO])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        srv.hub.served() - served,
        size - kept,
        "only the missing tail is fetched"
    );
    assert_eq!(
        srv.hub.file_requests().last().unwrap(),
        &("model.safetensors".to_string(), kept)
    );
    let snapshot = String::from_utf8(out.stdout).unwrap();
    let bytes = std::fs::read(Path::new(snapshot.trim()).join("model.safetensors")).unwrap();
    assert_eq!(common::hex(&Sha256::digest(bytes)), want);
}

#[test]
fn pull_offline_fails_clearly_without_requests() {
    let srv = start(Hub::tiny_qwen3());
    let env = Env::new();
    let out = env
        .cmd(&srv.endpoint)
        .env("HF_HUB_OFFLINE", "1")
        .args(["pull", REPO])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("HF_HUB_OFFLINE=1 forbids downloading"),
        "{}",
        text(&out)
    );
    assert_eq!(srv.hub.requests(), 0);
}

#[test]
fn models_lists_registry_and_marks_lmstudio_copy() {
    let env = Env::new();
    let lm = env.dir.path().join("lmstudio/mlx-community/Qwen3-8B-4bit");
    std::fs::create_dir_all(&lm).unwrap();
    std::fs::write(lm.join("config.json"), "{}").unwrap();
    let out = env
        .cmd("http://127.0.0.1:9")
        .arg("models")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for needle in [
        "qwen3-14b",
        "deepseek-ai/dspark_qwen3_8b_block7",
        "z-lab/gemma4-12B-it-DFlash",
        "demo",
    ] {
        assert!(t.contains(needle), "{needle} missing:\n{t}");
    }
    let line = t
        .lines()
        .find(|l| l.contains("mlx-community/Qwen3-8B-4bit"))
        .unwrap();
    assert!(
        line.contains("5.8 GB") && line.contains("on disk (LM Studio"),
        "{line}"
    );
    let line = t
        .lines()
        .find(|l| l.contains("mlx-community/Qwen3-8B-8bit"))
        .unwrap();
    assert!(
        line.contains("9.9 GB") && !line.contains("on disk"),
        "{line}"
    );
}

#[test]
fn doctor_reports_and_fails_on_unwritable_cache() {
    let env = Env::new();
    let out = env
        .cmd("http://127.0.0.1:9")
        .arg("doctor")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("candle cpu     matmul ok"),
        "{}",
        text(&out)
    );

    let file = env.dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = env
        .cmd("http://127.0.0.1:9")
        .env("DSPARK_CACHE", file.join("sub"))
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not ready: dspark cache:") && text(&out).contains("is not writable"),
        "{}",
        text(&out)
    );
}
