//! `dspark bench` on the demo model, the real binary: the HumanEval prompt set and sampled runs
//! (tau at a temperature, no greedy-identity claim), a greedy run that reports identity, and an
//! unknown prompt set refused by name.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Fails with the fetch command when the demo model or HumanEval is missing.
fn require_artefacts() {
    let base = std::env::var_os("DSPARK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/dspark"));
    let a = base.join("artefacts");
    for f in [
        "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "humaneval/HumanEval.jsonl.gz",
    ] {
        assert!(
            a.join(f).is_file(),
            "{f} is missing: run `bash scripts/fetch-artefacts.sh` first"
        );
    }
}

fn bench(out: &Path, extra: &[&str]) -> (bool, String) {
    require_artefacts();
    let o = Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args([
            "bench",
            "--model",
            "demo",
            "--mode",
            "draft",
            "--max-draft",
            "3",
        ])
        .args(["--prompts", "2", "--max-tokens", "6", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn read(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn humaneval_sampled_and_greedy_runs_report_what_they_measured() {
    let dir = tempfile::tempdir().unwrap();
    let sampled = dir.path().join("sampled.json");
    let (ok, log) = bench(
        &sampled,
        &[
            "--prompt-set",
            "humaneval",
            "--temperature",
            "0.7",
            "--seed",
            "5",
        ],
    );
    assert!(ok, "{log}");
    let v = read(&sampled);
    assert_eq!(v["prompt_set"], "humaneval");
    assert_eq!(v["prompts"], 2);
    let s = &v["spec"];
    assert_eq!(s["temperature"].as_f64(), Some(0.7f32 as f64));
    assert_eq!(s["first_seed"], 5);
    assert!(s.get("greedy_identical").is_none(), "{s}");
    let tau = s["mean_tau"].as_f64().unwrap();
    assert!((1.0..=4.0).contains(&tau), "tau {tau}");
    assert!(log.contains("sampled at T = 0.7"), "{log}");

    let greedy = dir.path().join("greedy.json");
    let (ok, log) = bench(&greedy, &["--prompt-set", "humaneval"]);
    assert!(ok, "{log}");
    let g = read(&greedy);
    assert_eq!(g["spec"]["greedy_identical"], 2, "{log}");
    assert!(g["spec"].get("temperature").is_none());
}

#[test]
fn an_unknown_prompt_set_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, log) = bench(&dir.path().join("x.json"), &["--prompt-set", "gsm8k"]);
    assert!(!ok);
    assert!(log.contains("unknown prompt set \"gsm8k\""), "{log}");
}
