//! Helpers shared by the cross-crate tests: fixture paths and golden-file loading.

pub mod stats;

use std::path::PathBuf;

/// `tests/fixtures/...` inside the repository.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
}

/// Reads a JSON golden file.
pub fn golden(name: &str) -> serde_json::Value {
    let p = fixture(&format!("golden/{name}"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fetched artefact (`scripts/fetch-artefacts.sh`), or a panic that says how to get it.
pub fn artefact(rel: &str) -> PathBuf {
    let base = std::env::var_os("DSPARK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs_home().join(".cache/dspark"));
    let p = base.join("artefacts").join(rel);
    assert!(p.exists(), "{} is missing: run `bash scripts/fetch-artefacts.sh` first", p.display());
    p
}

fn dirs_home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"))
}

pub fn as_f32_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

pub fn as_u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
