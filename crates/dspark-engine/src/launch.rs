//! The one way to start the engine: a [`LaunchSpec`] (resolved model and drafter paths, mode,
//! backend, dtype, draft knobs, prefix cache, queue) becomes a backend ([`with_backend`]), a
//! [`Pipeline`] ([`build_pipeline`]) or a running [`EngineHandle`] ([`spawn`]). `dspark serve`,
//! `generate`, `bench` and the app all come through here, so the same settings build the same
//! pipeline. Besides `backend/`, the only file with `cfg(feature = "mlx" | "cuda")`.

use std::path::PathBuf;

use crate::backend::candle::CandleBackend;
use crate::backend::{Backend, DType};
pub use crate::drafters::draft_vocab::DraftVocabSize;
use crate::error::EngineError;
use crate::load::{load_model, LoadedModel};
use crate::pipeline::{load_drafter, Pipeline};
use crate::prefix_cache::PrefixCacheConfig;
use crate::spec::{policy, Mode};
use crate::worker::{EngineHandle, Tuning};

/// Which tensor backend runs the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// MLX on Apple Silicon builds with the `mlx` feature, else candle (CUDA when the device
    /// names a GPU).
    #[default]
    Auto,
    Candle,
    Mlx,
    /// candle on a CUDA device.
    Cuda,
}

impl BackendKind {
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "auto" => Some(BackendKind::Auto),
            "candle" => Some(BackendKind::Candle),
            "mlx" => Some(BackendKind::Mlx),
            "cuda" => Some(BackendKind::Cuda),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Candle => "candle",
            BackendKind::Mlx => "mlx",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// Everything that decides which pipeline runs. Paths are resolved (the hub turns registry
/// ids, repos and `demo` into them); `drafter` is `None` only in baseline mode.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSpec {
    pub model: PathBuf,
    pub mode: Mode,
    pub drafter: Option<PathBuf>,
    pub backend: BackendKind,
    /// auto, cpu, cuda or cuda:N (candle); auto, cpu or gpu (MLX).
    pub device: String,
    /// Activation dtype; `None` = the device's default (f32 on CPUs, bf16 on GPUs).
    pub dtype: Option<DType>,
    /// Keep GGUF block-quantized weights packed (CPU, f32) instead of dequantizing.
    pub keep_quantized: bool,
    /// Matmul arithmetic on the CPU (candle).
    pub matmul: Matmul,
    /// Drafts per round; `None` = the mode's default (`spec::policy`).
    pub max_draft: Option<usize>,
    pub confidence_threshold: f32,
    /// Prompt lookup after each round's first draft; `None` = the default
    /// (`spec::policy::lookup`).
    pub lookup: Option<bool>,
    /// Ids a DFlash/DSpark drafter's head scores (`crate::drafters::draft_vocab`).
    pub draft_vocab: DraftVocabSize,
    /// `None` = prefix cache off.
    pub prefix_cache: Option<PrefixCacheConfig>,
    /// Jobs that may wait while one generates.
    pub queue: usize,
}

impl LaunchSpec {
    /// `model` in `mode` with every other setting at its default (prefix cache on).
    pub fn new(model: impl Into<PathBuf>, mode: Mode, drafter: Option<PathBuf>) -> LaunchSpec {
        LaunchSpec {
            model: model.into(),
            mode,
            drafter,
            backend: BackendKind::Auto,
            device: "auto".into(),
            dtype: None,
            keep_quantized: false,
            matmul: Matmul::F32,
            max_draft: None,
            confidence_threshold: 0.0,
            lookup: None,
            draft_vocab: DraftVocabSize::Drafter,
            prefix_cache: Some(PrefixCacheConfig::default()),
            queue: 8,
        }
    }

    /// Settings that fail before anything loads: a drafter mode without a drafter.
    pub fn check(&self) -> Result<(), LaunchError> {
        match (self.mode, &self.drafter) {
            (Mode::Baseline, _) | (_, Some(_)) => Ok(()),
            (m, None) => Err(LaunchError::NoDrafter(m.as_str())),
        }
    }

    /// The live-changeable part of this spec.
    pub fn tuning(&self) -> Tuning {
        Tuning {
            max_draft: self.max_draft,
            confidence_threshold: self.confidence_threshold,
            lookup: self.lookup,
            prefix_limits: self
                .prefix_cache
                .as_ref()
                .map(|c| (c.max_slots, c.max_ram_bytes)),
        }
    }
}

/// Matmul arithmetic on the CPU (`--matmul`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Matmul {
    /// f32 products and sums (the reference arithmetic).
    #[default]
    F32,
    /// Weights and each matmul's activations as bf16, products summed in f32, on AMX tiles
    /// where the CPU has AMX-BF16 (up to 16 rows cost about one, so verify blocks are nearly
    /// free), else by AVX-512 BF16 dot products (each row costs half what it does in f32),
    /// else f32.
    Bf16,
}

impl Matmul {
    pub fn parse(s: &str) -> Option<Matmul> {
        match s {
            "f32" => Some(Matmul::F32),
            "bf16" => Some(Matmul::Bf16),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Matmul::F32 => "f32",
            Matmul::Bf16 => "bf16",
        }
    }
}

/// Why an engine could not be started.
#[derive(thiserror::Error, Debug)]
pub enum LaunchError {
    #[error("unknown device `{device}` for {backend} ({expected})")]
    UnknownDevice {
        device: String,
        backend: &'static str,
        expected: &'static str,
    },
    #[error("this dspark was built without {what} (rebuild with --features {feature})")]
    NotBuilt {
        what: &'static str,
        feature: &'static str,
    },
    #[error("{0} mode needs a drafter")]
    NoDrafter(&'static str),
    // the cause is part of the message, not a `source`: printing the error chain (`{:#}`)
    // would otherwise repeat it
    #[error("loading {}: {error}", path.display())]
    Load { path: PathBuf, error: EngineError },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A backend the launcher can drive.
pub trait LaunchBackend: Backend {
    /// The backend a draft model loads on (candle keeps GGUF weights packed for speed).
    fn draft_backend(&self) -> Self;
}

impl LaunchBackend for CandleBackend {
    fn draft_backend(&self) -> Self {
        self.clone().keep_quantized(true)
    }
}

#[cfg(feature = "mlx")]
impl LaunchBackend for crate::backend::mlx::MlxBackend {
    fn draft_backend(&self) -> Self {
        self.clone()
    }
}

/// Work to run on whichever backend a spec picks (a generic closure, spelled as a trait).
pub trait OnBackend {
    type Out;
    fn run<B: LaunchBackend>(self, b: B) -> Self::Out;
}

/// Picks the backend of `spec` and runs `v` on it.
pub fn with_backend<V: OnBackend>(spec: &LaunchSpec, v: V) -> Result<V::Out, LaunchError> {
    spec.check()?;
    let mlx = match spec.backend {
        BackendKind::Mlx => true,
        BackendKind::Auto => {
            cfg!(all(
                feature = "mlx",
                target_os = "macos",
                target_arch = "aarch64"
            )) && !spec.device.starts_with("cuda")
        }
        BackendKind::Candle | BackendKind::Cuda => false,
    };
    if mlx {
        return mlx_run(spec, v);
    }
    Ok(v.run(candle_backend(spec)?))
}

#[cfg(feature = "mlx")]
fn mlx_run<V: OnBackend>(spec: &LaunchSpec, v: V) -> Result<V::Out, LaunchError> {
    use crate::backend::mlx::MlxBackend;
    let b = match spec.device.as_str() {
        "auto" => MlxBackend::default_device(),
        "cpu" => MlxBackend::cpu(),
        "gpu" | "metal" => MlxBackend::gpu(),
        other => {
            return Err(LaunchError::UnknownDevice {
                device: other.into(),
                backend: "mlx",
                expected: "auto, cpu, gpu",
            })
        }
    };
    Ok(v.run(match spec.dtype {
        Some(d) => b.with_dtype(d),
        None => b,
    }))
}

#[cfg(not(feature = "mlx"))]
fn mlx_run<V: OnBackend>(_: &LaunchSpec, _: V) -> Result<V::Out, LaunchError> {
    Err(LaunchError::NotBuilt {
        what: "MLX",
        feature: "mlx",
    })
}

/// The candle backend of `spec` (CPU, or CUDA for `--backend cuda` / `--device cuda[:N]`).
pub fn candle_backend(spec: &LaunchSpec) -> Result<CandleBackend, LaunchError> {
    let gpu = match spec.device.as_str() {
        "auto" | "gpu" if spec.backend == BackendKind::Cuda => Some(0),
        "auto" | "cpu" => None,
        "cuda" => Some(0),
        d => match d.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Some(n),
            _ => {
                return Err(LaunchError::UnknownDevice {
                    device: d.into(),
                    backend: "candle",
                    expected: "auto, cpu, cuda, cuda:N",
                })
            }
        },
    };
    let b = match gpu {
        None => CandleBackend::cpu(),
        Some(_) if !HAS_CUDA => {
            return Err(LaunchError::NotBuilt {
                what: "CUDA",
                feature: "cuda",
            })
        }
        Some(n) => {
            let on = CandleBackend::step_graphs_from_env()
                .unwrap_or_else(|| graphs_by_default(weight_file_bytes(&spec.model)));
            CandleBackend::cuda(n)
                .map_err(EngineError::from)?
                .with_step_graphs(on)
        }
    };
    let b = match spec.dtype {
        Some(d) => b.with_dtype(d),
        None => b,
    };
    Ok(b.keep_quantized(spec.keep_quantized)
        .with_bf16_matmul(spec.matmul == Matmul::Bf16))
}

/// Weight files (bytes on disk) below which a CUDA target replays its fixed-shape steps as CUDA
/// graphs unless `DSPARK_CUDA_GRAPHS` says otherwise. A small model's step is bound by the
/// host's launches: the demo (98 MB GGUF, 269 MB in bf16) on an H100 decodes 1,075-1,080
/// tok/s with graphs against 375-384 eager, and its speculation gains as much. A large one's is
/// bound by memory, where replays measured 2-4% slower (the 8B shape on the H200, 16 GB;
/// docs/cuda.md, ninth and fifteenth slices). Sizes between were not measured.
pub const GRAPHS_BELOW_BYTES: u64 = 2 << 30;

/// [`GRAPHS_BELOW_BYTES`]'s rule; unknown sizes keep the steps eager.
pub fn graphs_by_default(weight_bytes: Option<u64>) -> bool {
    weight_bytes.is_some_and(|n| n < GRAPHS_BELOW_BYTES)
}

/// Bytes of a model's weight files: a file's size, or a folder's `.safetensors` and `.gguf`
/// files together (`None` when there are none or they cannot be read).
pub fn weight_file_bytes(model: &std::path::Path) -> Option<u64> {
    let meta = std::fs::metadata(model).ok()?;
    if meta.is_file() {
        return Some(meta.len());
    }
    let mut total = 0;
    for e in std::fs::read_dir(model).ok()?.flatten() {
        let p = e.path();
        if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("safetensors" | "gguf")
        ) {
            total += std::fs::metadata(&p).ok()?.len();
        }
    }
    (total > 0).then_some(total)
}

/// Whether this build has the MLX backend (the `mlx` feature).
pub const HAS_MLX: bool = cfg!(feature = "mlx");
/// Whether this build has candle's CUDA device (the `cuda` feature).
pub const HAS_CUDA: bool = cfg!(feature = "cuda");

/// Every CPU backend this build has (candle, then MLX when built in), for side-by-side runs.
pub fn each_cpu_backend<V: OnBackend + Clone>(v: V) -> Vec<V::Out> {
    let candle = v.clone().run(CandleBackend::cpu());
    #[cfg(feature = "mlx")]
    return vec![candle, v.run(crate::backend::mlx::MlxBackend::cpu())];
    #[cfg(not(feature = "mlx"))]
    {
        drop(v);
        vec![candle]
    }
}

/// Loads the target of `spec` (tokenizer included) on `b`.
pub fn load_target<B: LaunchBackend>(
    spec: &LaunchSpec,
    b: &B,
) -> Result<LoadedModel<B>, LaunchError> {
    load_model(b, &spec.model, None).map_err(|error| LaunchError::Load {
        path: spec.model.clone(),
        error,
    })
}

/// The drafter of `spec`'s mode on top of a loaded target, the draft policy's knobs, and the
/// prefix cache when configured.
pub fn finish_pipeline<B: LaunchBackend>(
    spec: &LaunchSpec,
    b: &B,
    lm: LoadedModel<B>,
) -> Result<Pipeline<B>, LaunchError> {
    let params = policy::spec_params(
        spec.mode,
        spec.max_draft,
        spec.confidence_threshold,
        policy::lookup(spec.lookup, b.rows_batch_invariant()),
    );
    let drafter = match spec.mode {
        Mode::Baseline => None,
        mode => {
            let path = spec
                .drafter
                .as_ref()
                .ok_or(LaunchError::NoDrafter(mode.as_str()))?;
            let len = policy::draft_len(mode, spec.max_draft);
            let load_err = |error| LaunchError::Load {
                path: path.clone(),
                error,
            };
            let d = load_drafter(
                b,
                &b.draft_backend(),
                mode,
                path,
                &lm.model,
                len,
                spec.draft_vocab,
            )
            .map_err(load_err)?;
            Some(d)
        }
    };
    let mut pipe = Pipeline::new(lm, spec.mode, drafter, params)?;
    if let Some(cfg) = &spec.prefix_cache {
        let label = spec
            .drafter
            .as_ref()
            .map_or_else(|| "none".into(), |p| p.display().to_string());
        pipe.enable_prefix_cache(cfg.clone(), &label);
    }
    Ok(pipe)
}

/// [`load_target`] then [`finish_pipeline`].
pub fn build_pipeline<B: LaunchBackend>(
    spec: &LaunchSpec,
    b: &B,
) -> Result<Pipeline<B>, LaunchError> {
    spec.check()?;
    let lm = load_target(spec, b)?;
    finish_pipeline(spec, b, lm)
}

/// Starts the engine worker for `spec`: the pipeline is built on the worker thread, which
/// then owns every tensor (MLX arrays included). Returns once the model is loaded.
pub fn spawn(spec: &LaunchSpec) -> Result<EngineHandle, LaunchError> {
    struct Spawn(LaunchSpec);
    impl OnBackend for Spawn {
        type Out = Result<EngineHandle, LaunchError>;
        fn run<B: LaunchBackend>(self, b: B) -> Self::Out {
            let spec = self.0;
            let queue = spec.queue;
            EngineHandle::spawn(move || build_pipeline(&spec, &b), queue)
        }
    }
    with_backend(spec, Spawn(spec.clone()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings() {
        let mut s = LaunchSpec::new("m", Mode::Baseline, None);
        s.device = "tpu".into();
        let e = candle_backend(&s).unwrap_err();
        assert!(e.to_string().contains("unknown device `tpu`"), "{e}");
        s.device = "cpu".into();
        s.dtype = Some(DType::BF16);
        assert_eq!(candle_backend(&s).unwrap().compute_dtype(), DType::BF16);
        if !HAS_CUDA {
            s.device = "cuda:1".into();
            let e = candle_backend(&s).unwrap_err();
            assert!(e.to_string().contains("--features cuda"), "{e}");
        }
        for k in ["auto", "candle", "mlx", "cuda"] {
            assert_eq!(BackendKind::parse(k).unwrap().as_str(), k);
        }
    }

    #[test]
    fn small_weights_get_cuda_graphs_by_default() {
        let dir = std::env::temp_dir().join(format!("dspark-graphs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(weight_file_bytes(&dir), None, "no weight files");
        std::fs::write(dir.join("model.safetensors"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.join("b.gguf"), vec![0u8; 24]).unwrap();
        std::fs::write(dir.join("config.json"), vec![0u8; 500]).unwrap();
        assert_eq!(weight_file_bytes(&dir), Some(1024));
        assert_eq!(weight_file_bytes(&dir.join("b.gguf")), Some(24));
        assert_eq!(weight_file_bytes(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(graphs_by_default(Some(98_000_000)), "the demo's GGUF");
        assert!(!graphs_by_default(Some(16_400_000_000)), "an 8B in bf16");
        assert!(!graphs_by_default(Some(GRAPHS_BELOW_BYTES)));
        assert!(!graphs_by_default(None));
    }

    #[test]
    fn drafter_modes_need_a_drafter() {
        let s = LaunchSpec::new("/nonexistent", Mode::Dspark, None);
        assert!(matches!(s.check(), Err(LaunchError::NoDrafter("dspark"))));
        match spawn(&s) {
            Err(LaunchError::NoDrafter("dspark")) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("started a dspark engine without a drafter"),
        }
        assert!(LaunchSpec::new("m", Mode::Baseline, None).check().is_ok());
    }
}
