//! `dspark serve` on a model it must not load: truncated or corrupted safetensors and GGUF
//! files, repo ids with `..`, and a cached snapshot linking outside the HF cache. Each exits
//! non-zero with a typed message naming the file, and the port is never opened (a client
//! polling it the whole time never connects): nothing is served half-loaded.

use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn demo_gguf() -> PathBuf {
    let base = std::env::var_os("DSPARK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/dspark"));
    let p = base.join("artefacts/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `bash scripts/fetch-artefacts.sh` first",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `dspark serve ARGS --port P`, polling P until the process exits; returns
/// (exit success, stderr, whether a connection to P ever succeeded).
fn serve(args: &[&str], env: &[(&str, &str)]) -> (bool, String, bool) {
    let port = free_port();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dspark"));
    c.arg("serve")
        .args(args)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .env("RUST_BACKTRACE", "0")
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("DSPARK_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut connected = false;
    let status = loop {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(50))
            .is_ok()
        {
            connected = true;
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dspark serve {args:?} still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("listening on"), "{stdout}");
    (
        status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        connected,
    )
}

fn refused(args: &[&str], env: &[(&str, &str)], wants: &[&str]) {
    let (ok, stderr, connected) = serve(args, env);
    assert!(!ok, "{args:?} started: {stderr}");
    assert!(!connected, "{args:?}: the port was opened");
    for w in wants {
        assert!(stderr.contains(w), "{args:?}: `{w}` not in: {stderr}");
    }
}

#[test]
fn truncated_or_corrupt_safetensors_is_refused_before_the_port_opens() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("tests/fixtures/tiny/qwen3");
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let m = dir.path().join("m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::copy(src.join("config.json"), m.join("config.json")).unwrap();
    let model = m.join("model.safetensors");
    let arg = m.to_str().unwrap();

    // cut inside the tensor data: the header promises more than the file holds
    std::fs::write(&model, &bytes[..bytes.len() - 1600]).unwrap();
    refused(
        &["--model", arg],
        &[],
        &["model.safetensors", "cannot parse"],
    );
    // cut inside the header
    std::fs::write(&model, &bytes[..100]).unwrap();
    refused(
        &["--model", arg],
        &[],
        &["model.safetensors", "cannot parse"],
    );
    // header bytes overwritten (not JSON any more)
    let mut bad = bytes.clone();
    bad[8..40].fill(b'#');
    std::fs::write(&model, &bad).unwrap();
    refused(
        &["--model", arg],
        &[],
        &["model.safetensors", "cannot parse"],
    );
}

#[test]
fn truncated_or_corrupt_gguf_is_refused_before_the_port_opens() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read(demo_gguf()).unwrap();
    let p = dir.path().join("cut.gguf");
    let arg = p.to_str().unwrap();
    // the embedding table cut short, then a later layer's tensor
    for keep in [2_000_000, full.len() / 2] {
        std::fs::write(&p, &full[..keep]).unwrap();
        refused(
            &["--model", arg],
            &[],
            &["cut.gguf", "tensor needs", "remaining in file"],
        );
    }
    // the magic overwritten
    let mut bad = full[..4_000_000].to_vec();
    bad[..4].copy_from_slice(b"XXXX");
    std::fs::write(&p, &bad).unwrap();
    refused(&["--model", arg], &[], &["cut.gguf"]);
}

#[test]
fn repo_ids_and_cached_snapshots_cannot_leave_their_folders() {
    refused(
        &["--model", "some-org/.."],
        &[],
        &["not a Hugging Face repo id"],
    );
    // the drafter path goes through the same resolution
    refused(
        &[
            "--model",
            fixture("tests/fixtures/tiny/qwen3").to_str().unwrap(),
            "--mode",
            "draft",
            "--drafter",
            "x/..",
        ],
        &[],
        &["not a Hugging Face repo id"],
    );

    // an HF cache whose snapshot links config.json outside the cache
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let repo = cache.join("models--evil-org--tiny");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let src = fixture("tests/fixtures/tiny/qwen3");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), outside.join(f)).unwrap();
        symlink(outside.join(f), snap.join(f)).unwrap();
    }
    let hub = cache.to_str().unwrap();
    refused(
        &["--model", "evil-org/tiny"],
        &[("HF_HUB_CACHE", hub)],
        &["refusing", "outside the cache"],
    );
}
