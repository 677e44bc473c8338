//! A model whose weights do not fit in the available memory is refused before loading, with
//! the numbers; `DSPARK_SKIP_MEMORY_CHECK=1` loads it anyway.

use std::path::PathBuf;
use std::process::Command;

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

fn generate(env: &[(&str, &str)], extra: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dspark"));
    c.arg("generate")
        .arg("--model")
        .arg(demo_gguf())
        .args(["--prompt", "hi", "--max-tokens", "2"])
        .args(extra)
        .env_remove("DSPARK_SKIP_MEMORY_CHECK");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn too_large_is_refused_with_the_numbers() {
    // 135 M parameters dequantized to f32 need 0.54 GB; say 0.3 GB is available
    let (ok, stdout, stderr) =
        generate(&[("DSPARK_MEMORY_AVAILABLE_MB", "300")], &["--dequantize"]);
    assert!(!ok, "loaded anyway: {stdout}");
    assert!(
        stderr.contains("needs about 0.54 GB") && stderr.contains("0.30 GB is available"),
        "{stderr}"
    );
    assert!(stderr.contains("dequantized to F32"), "{stderr}");
    assert!(
        stderr.contains("--keep-quantized would hold about 0.12 GB"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "generated before refusing: {stdout}");

    // by default (dequantized) it is refused the same way
    let (ok, _, stderr) = generate(&[("DSPARK_MEMORY_AVAILABLE_MB", "300")], &[]);
    assert!(!ok && stderr.contains("needs about 0.54 GB"), "{stderr}");

    // kept quantized, the same file fits (about 0.12 GB)
    let (ok, _, stderr) = generate(
        &[("DSPARK_MEMORY_AVAILABLE_MB", "300")],
        &["--keep-quantized"],
    );
    assert!(ok, "{stderr}");

    // and the override loads it
    let (ok, _, stderr) = generate(
        &[
            ("DSPARK_MEMORY_AVAILABLE_MB", "300"),
            ("DSPARK_SKIP_MEMORY_CHECK", "1"),
        ],
        &["--dequantize"],
    );
    assert!(ok, "{stderr}");
}
