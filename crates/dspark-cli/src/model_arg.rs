//! Resolving `--model` (a directory, a .gguf file, or `demo`) and building the backend.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::DType;

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
