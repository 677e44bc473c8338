//! Helpers shared by the cross-crate tests: fixture paths, golden-file loading and the
//! backend the shared golden suite runs on (`DSPARK_BACKEND`, see [`selected_backend`]).

pub mod recorder;
pub mod stats;

use std::path::PathBuf;

use dspark_engine::backend::candle::CandleBackend;

/// A backend the suite can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Candle,
    Mlx,
    /// candle on `cuda:0` (the `cuda` feature).
    Cuda,
}

/// `DSPARK_BACKEND=candle|mlx|cuda`. Unset: MLX when built with the `mlx` feature, CUDA when
/// built with the `cuda` feature, else candle on the CPU.
pub fn selected_backend() -> Which {
    match std::env::var("DSPARK_BACKEND").ok().as_deref() {
        Some("candle") => Which::Candle,
        Some("mlx") => {
            if !cfg!(feature = "mlx") {
                panic!("DSPARK_BACKEND=mlx needs the tests built with --features mlx");
            }
            Which::Mlx
        }
        Some("cuda") => {
            if !cfg!(feature = "cuda") {
                panic!("DSPARK_BACKEND=cuda needs the tests built with --features cuda");
            }
            Which::Cuda
        }
        None | Some("") => {
            if cfg!(feature = "mlx") {
                Which::Mlx
            } else if cfg!(feature = "cuda") {
                Which::Cuda
            } else {
                Which::Candle
            }
        }
        Some(other) => panic!("DSPARK_BACKEND={other}: expected `candle`, `mlx` or `cuda`"),
    }
}

/// The candle backend of the suite: CPU, f32, drafting through the exact head
/// ([`CandleBackend::with_exact_drafts`]) as the reference implementations do, so that the
/// goldens' drafts compare id for id. The default, faster draft head is covered by the tests
/// that build their backend with `with_exact_drafts(false)` (smollm2_trained,
/// spec_sampling_smollm2).
pub fn candle_backend() -> CandleBackend {
    CandleBackend::cpu().with_exact_drafts(true)
}

/// The CUDA backend of the suite: candle on `cuda:0`, f32 compute (the goldens are f32), with
/// cuBLAS's TF32 path off (candle's default; set here so the bound does not depend on it).
#[cfg(feature = "cuda")]
pub fn cuda_backend() -> CandleBackend {
    use dspark_engine::backend::DType;
    candle_core::cuda::set_gemm_reduced_precision_f32(false);
    CandleBackend::cuda(0)
        .unwrap_or_else(|e| panic!("cuda:0: {e}"))
        .with_dtype(DType::F32)
}

#[cfg(not(feature = "cuda"))]
pub fn cuda_backend() -> CandleBackend {
    unreachable!("selected_backend() is Cuda only with the cuda feature")
}

/// A random Qwen3-form target spec over `vocab` ids whose heads (64 wide) the CUDA one-launch
/// attention inputs take, so that its steps can be captured as CUDA graphs (the tiny specs'
/// narrower heads run op by op).
pub fn graph_capturable_spec(vocab: usize) -> dspark_engine::testing::RandomSpec {
    dspark_engine::testing::RandomSpec {
        hidden: 128,
        intermediate: 256,
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
        layer_scale: 0.15,
        ..dspark_engine::testing::RandomSpec::tiny(vocab)
    }
}

/// The MLX backend of the suite: MLX's default device (Metal on Apple Silicon), f32.
#[cfg(feature = "mlx")]
pub fn mlx_backend() -> dspark_engine::backend::mlx::MlxBackend {
    use dspark_engine::backend::{mlx::MlxBackend, DType};
    MlxBackend::default_device().with_dtype(DType::F32)
}

/// Calls a test body generic over `B: Backend` (taking the backend by value) on the backend
/// of [`selected_backend`].
#[macro_export]
macro_rules! on_backend {
    ($body:expr) => {
        match $crate::selected_backend() {
            $crate::Which::Candle => $body($crate::candle_backend()),
            $crate::Which::Mlx => $crate::__on_mlx!($body),
            $crate::Which::Cuda => $body($crate::cuda_backend()),
        }
    };
}

#[cfg(feature = "mlx")]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_mlx {
    ($body:expr) => {
        $body($crate::mlx_backend())
    };
}

#[cfg(not(feature = "mlx"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_mlx {
    ($body:expr) => {
        unreachable!("selected_backend() is Mlx only with the mlx feature")
    };
}

/// `tests/fixtures/...` inside the repository; `DSPARK_TESTS_DIR` (the `tests/` folder) when the
/// test binary runs away from the tree it was built in (the CUDA binaries on the GPU machine).
pub fn fixture(rel: &str) -> PathBuf {
    std::env::var_os("DSPARK_TESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("fixtures")
        .join(rel)
}

/// Whether the suite runs on a CUDA device (looser numeric bounds where a test says so).
pub fn on_cuda() -> bool {
    selected_backend() == Which::Cuda
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
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/fetch-artefacts.sh` first",
        p.display()
    );
    p
}

fn dirs_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

pub fn as_f32_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

pub fn as_u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Largest |a - b|; NaN when either side holds a NaN anywhere (so `d < tol` fails), unlike a
/// fold with `f32::max`, which skips NaN.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m, d| {
            if m.is_nan() || d.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
}

/// Largest |v| (NaN-propagating like [`max_abs_diff`]).
pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0.0, |m: f32, x| {
        if m.is_nan() || x.is_nan() {
            f32::NAN
        } else {
            m.max(x.abs())
        }
    })
}

/// Fails listing every collected failure (`what` names the cases, e.g. "cases") when any
/// of `total` checks failed; golden suites collect all differences before failing.
pub fn assert_none_failed(failures: &[String], total: usize, what: &str) {
    assert!(
        failures.is_empty(),
        "{} of {total} {what} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The first `n` held-out MT-Bench first turns (the fetched `mtbench/question.jsonl`) as the
/// user turn of a chat, rendered by `tok`'s chat template with the generation prompt, as dspark
/// renders a request.
pub fn mtbench_chat_prompts(tok: &dspark_engine::tokenizer::Tokenizer, n: usize) -> Vec<Vec<u32>> {
    let questions = std::fs::read_to_string(artefact("mtbench/question.jsonl")).unwrap();
    let opts = dspark_engine::chat_template::ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    questions
        .lines()
        .take(n)
        .map(|line| {
            let q: serde_json::Value = serde_json::from_str(line).unwrap();
            let msgs = serde_json::json!([{"role": "user", "content": q["turns"][0]}]);
            let text = tok.chat_template().unwrap().render(&msgs, &opts).unwrap();
            tok.encode(&text, false).unwrap()
        })
        .collect()
}

/// One greedy-identity case of the speculative suites: a prompt, a token budget, the drafts
/// a round may verify and the eos ids.
pub struct GreedyCase {
    pub prompt: Vec<u32>,
    pub max_new: usize,
    pub cap: usize,
    pub eos: Vec<u32>,
}

impl GreedyCase {
    /// Greedy decoding of this case's budget with its eos ids.
    pub fn params(&self) -> dspark_engine::generate::GenParams {
        dspark_engine::generate::GenParams {
            max_new_tokens: self.max_new,
            sampling: dspark_engine::sampling::SamplingParams::greedy(),
            eos: self.eos.clone(),
        }
    }
}
