//! Resolving `--model` (a directory, a .gguf file, or `demo`) and building the backend.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::{Backend, DType};
use dspark_engine::load::LoadedModel;
use dspark_engine::pipeline::{default_max_draft, load_drafter, Pipeline};
use dspark_engine::spec::{Mode, SpecParams};

use crate::args::{ModelArgs, SpecArgs};

/// A directory, a .gguf file, `demo`, a registry id (`qwen3-8b`) or a hub repo id, which is
/// taken from LM Studio's folders or the HF cache, or downloaded with progress bars.
pub fn resolve_model(model: &str) -> Result<PathBuf> {
    Ok(dspark_hub::resolve_model_path(
        model,
        false,
        &crate::pull::Bars::new(),
    )?)
}

/// The backend of `--backend` / `--device` / `--dtype`.
pub enum AnyBackend {
    Candle(CandleBackend),
    #[cfg(feature = "mlx")]
    Mlx(dspark_engine::backend::mlx::MlxBackend),
}

/// Resolves `--backend auto` (MLX on Apple Silicon when built with `mlx`, else candle).
pub fn any_backend(m: &ModelArgs) -> Result<AnyBackend> {
    let mlx = match m.backend.as_str() {
        "candle" => false,
        "mlx" => true,
        "auto" => cfg!(all(
            feature = "mlx",
            target_os = "macos",
            target_arch = "aarch64"
        )),
        other => bail!("unknown backend `{other}` (auto, candle, mlx)"),
    };
    if !mlx {
        return backend(&m.device, m.dtype.as_deref(), m.keep_quantized).map(AnyBackend::Candle);
    }
    mlx_backend(m)
}

#[cfg(feature = "mlx")]
fn mlx_backend(m: &ModelArgs) -> Result<AnyBackend> {
    use dspark_engine::backend::mlx::MlxBackend;
    let b = match m.device.as_str() {
        "auto" => MlxBackend::default_device(),
        "cpu" => MlxBackend::cpu(),
        "gpu" | "metal" => MlxBackend::gpu(),
        other => bail!("unknown MLX device `{other}` (auto, cpu, gpu)"),
    };
    let b = match m.dtype.as_deref() {
        None => b,
        Some(s) => b.with_dtype(DType::parse(s).with_context(|| format!("unknown dtype `{s}`"))?),
    };
    Ok(AnyBackend::Mlx(b))
}

#[cfg(not(feature = "mlx"))]
fn mlx_backend(_: &ModelArgs) -> Result<AnyBackend> {
    bail!("this dspark was built without MLX (rebuild with --features mlx)")
}

/// A backend the CLI can drive: how it runs a draft model.
pub trait CliBackend: Backend {
    /// The backend for a draft model (candle keeps GGUF weights quantized for speed).
    fn draft_backend(&self) -> Self;
}

impl CliBackend for CandleBackend {
    fn draft_backend(&self) -> Self {
        self.clone().keep_quantized(true)
    }
}

#[cfg(feature = "mlx")]
impl CliBackend for dspark_engine::backend::mlx::MlxBackend {
    fn draft_backend(&self) -> Self {
        self.clone()
    }
}

/// The candle backend for `--device` / `--dtype`.
pub fn backend(device: &str, dtype: Option<&str>, keep_quantized: bool) -> Result<CandleBackend> {
    let b = match device {
        "cpu" | "auto" => CandleBackend::cpu(),
        d if d.starts_with("cuda") => {
            let ordinal = d
                .strip_prefix("cuda:")
                .map(str::parse)
                .transpose()?
                .unwrap_or(0);
            CandleBackend::cuda(ordinal)
                .context("CUDA is not available (build with --features cuda)")?
        }
        other => bail!("unknown device `{other}` (cpu, cuda, cuda:N)"),
    };
    let b = match dtype {
        None => b,
        Some(s) => b.with_dtype(DType::parse(s).with_context(|| format!("unknown dtype `{s}`"))?),
    };
    Ok(b.keep_quantized(keep_quantized))
}

/// The target plus the drafter of `--mode`.
pub fn build_pipeline<B: CliBackend>(
    m: &ModelArgs,
    s: &SpecArgs,
    lm: LoadedModel<B>,
    b: &B,
) -> Result<Pipeline<B>> {
    let mode = Mode::parse(&s.mode).with_context(|| format!("unknown mode `{}`", s.mode))?;
    let max_draft = s.max_draft.unwrap_or_else(|| default_max_draft(mode));
    let spec = SpecParams {
        max_draft: max_draft.max(1),
        confidence_threshold: s.confidence_threshold,
    };
    let drafter = match mode {
        Mode::Baseline => None,
        _ => {
            // explicit --drafter, else the registry's drafter for this target and mode
            let hub_mode = dspark_hub::Mode::parse(mode.as_str()).context("mode")?;
            let r = dspark_hub::resolve(&m.model, hub_mode, s.drafter.as_deref())?;
            let path = resolve_model(r.drafter.as_deref().unwrap_or_default())?;
            // the demo's draft model is the same GGUF kept quantized
            let draft_backend = b.draft_backend();
            let block = if mode == Mode::Draft {
                max_draft.clamp(1, 16)
            } else {
                16
            };
            Some(
                load_drafter(b, &draft_backend, mode, &path, &lm.model, block)
                    .with_context(|| format!("loading drafter {}", path.display()))?,
            )
        }
    };
    Ok(Pipeline::new(lm, mode, drafter, spec)?)
}
