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

/// Whether this CPU runs the exact packed kernel (x86 with AVX2, FMA and F16C), which holds a
/// dequantized GGUF's quantized matmul weights packed.
fn exact_packed_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[test]
fn too_large_is_refused_with_the_numbers() {
    // 135 M parameters dequantized to a dense f32 copy need 0.54 GB; say 0.3 GB is available
    let dense = ("DSPARK_EXACT_PACKED", "0");
    let (ok, stdout, stderr) = generate(
        &[("DSPARK_MEMORY_AVAILABLE_MB", "300"), dense],
        &["--dequantize"],
    );
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
    let (ok, _, stderr) = generate(&[("DSPARK_MEMORY_AVAILABLE_MB", "300"), dense], &[]);
    assert!(!ok && stderr.contains("needs about 0.54 GB"), "{stderr}");

    // held packed by the exact kernel (the default where the CPU has it), the dequantized
    // model counts its quantized matmul weights at 1.25 bytes each: about 0.17 GB
    if exact_packed_here() {
        let (ok, _, stderr) = generate(&[("DSPARK_MEMORY_AVAILABLE_MB", "100")], &[]);
        assert!(
            !ok && stderr.contains("needs about 0.17 GB") && stderr.contains("held packed"),
            "{stderr}"
        );
        let (ok, _, stderr) = generate(&[("DSPARK_MEMORY_AVAILABLE_MB", "300")], &[]);
        assert!(ok, "{stderr}");
    }

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
            dense,
        ],
        &["--dequantize"],
    );
    assert!(ok, "{stderr}");
}
