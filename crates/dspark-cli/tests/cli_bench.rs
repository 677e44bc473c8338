//! `dspark bench` on the demo model, the real binary: the HumanEval prompt set and sampled runs
//! (tau at a temperature, no greedy-identity claim), a greedy run that reports identity, and an
//! unknown prompt set refused by name; `--tau-only` (acceptance alone, no baseline pass).

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

#[test]
fn tau_only_runs_the_drafter_alone_and_counts_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tau.json");
    let (ok, log) = bench(&out, &["--tau-only", "--temperature", "0.7"]);
    assert!(ok, "{log}");
    assert!(!log.contains("baseline"), "no baseline pass: {log}");
    let t = &read(&out)["tau_only"];
    assert_eq!(t["mode"], "draft");
    assert_eq!(t["prompts"], 2);
    assert_eq!(t["stops_at_eos"], true);
    assert_eq!(t["temperature"].as_f64(), Some(0.7));
    let rounds = t["rounds"].as_u64().unwrap();
    let in_rounds = t["tokens_in_rounds"].as_u64().unwrap();
    // the histogram covers every round, and tau is what the rounds committed
    let counts: Vec<u64> = serde_json::from_value(t["accept_length_counts"].clone()).unwrap();
    assert_eq!(counts.iter().sum::<u64>(), rounds);
    let weighted: u64 = counts.iter().enumerate().map(|(l, &n)| l as u64 * n).sum();
    assert_eq!(weighted, in_rounds);
    let tau = t["mean_tau"].as_f64().unwrap();
    assert!((tau - in_rounds as f64 / rounds as f64).abs() < 1e-9);
    // at most --max-draft 3 drafts + 1 per round
    assert!(counts.len() <= 5 && rounds > 0, "{counts:?}");

    let (ok, log) = Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args([
            "bench",
            "--model",
            "demo",
            "--tau-only",
            "--prompts",
            "1",
            "--out",
        ])
        .arg(dir.path().join("b.json"))
        .output()
        .map(|o| {
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert!(!ok);
    assert!(
        log.contains("--tau-only needs a speculative --mode"),
        "{log}"
    );
}
