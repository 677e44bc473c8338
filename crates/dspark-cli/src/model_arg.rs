//! Resolving `--model` (a directory, a .gguf file, or `demo`) and building the backend.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::DType;
use dspark_engine::load::LoadedModel;
use dspark_engine::pipeline::{default_max_draft, load_drafter, Pipeline};
use dspark_engine::spec::{Mode, SpecParams};

use crate::args::{ModelArgs, SpecArgs};

/// A directory, a .gguf file, or `demo` (SmolLM2-135M-Instruct, fetched on first use).
pub fn resolve_model(model: &str) -> Result<PathBuf> {
    if model == "demo" {
        return dspark_hub::demo::ensure_demo().context("the demo model is not available");
    }
    let p = PathBuf::from(model);
    if p.exists() {
        return Ok(p);
    }
    bail!("model `{model}` not found: pass a model directory, a .gguf file, or `demo`")
}

/// The candle backend for `--device` / `--dtype`.
pub fn backend(device: &str, dtype: Option<&str>, keep_quantized: bool) -> Result<CandleBackend> {
    let b = match device {
        "cpu" => CandleBackend::cpu(),
        d if d.starts_with("cuda") => {
            let ordinal = d.strip_prefix("cuda:").map(str::parse).transpose()?.unwrap_or(0);
            CandleBackend::cuda(ordinal).context("CUDA is not available (build with --features cuda)")?
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
pub fn build_pipeline(
    m: &ModelArgs,
    s: &SpecArgs,
    lm: LoadedModel<CandleBackend>,
    b: &CandleBackend,
) -> Result<Pipeline<CandleBackend>> {
    let mode = Mode::parse(&s.mode).with_context(|| format!("unknown mode `{}`", s.mode))?;
    let max_draft = s.max_draft.unwrap_or_else(|| default_max_draft(mode));
    let spec = SpecParams { max_draft: max_draft.max(1), confidence_threshold: s.confidence_threshold };
    let drafter = match mode {
        Mode::Baseline => None,
        _ => {
            let path = match (&s.drafter, mode, m.model.as_str()) {
                (Some(d), _, _) => resolve_model(d)?,
                (None, Mode::Draft, "demo") => resolve_model("demo")?,
                (None, _, _) => bail!(
                    "no built-in {} drafter for `{}`: pass --drafter PATH",
                    mode.as_str(),
                    m.model
                ),
            };
            // the demo's draft model is the same GGUF kept quantized
            let draft_backend = b.clone().keep_quantized(true);
            let block = if mode == Mode::Draft { max_draft.clamp(1, 16) } else { 16 };
            Some(
                load_drafter(b, &draft_backend, mode, &path, &lm.model, block)
                    .with_context(|| format!("loading drafter {}", path.display()))?,
            )
        }
    };
    Ok(Pipeline::new(lm, mode, drafter, spec)?)
}
