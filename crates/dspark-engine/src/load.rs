//! Loading a target model together with its tokenizer and chat template, from a model
//! directory or a GGUF file.

pub mod memory_fit;

use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::open_checkpoint;
use crate::model::transformer::Transformer;
use crate::tokenizer::Tokenizer;

pub struct LoadedModel<B: Backend> {
    pub model: Transformer<B>,
    pub tokenizer: std::sync::Arc<Tokenizer>,
    pub path: PathBuf,
    /// What the weights became at load (forms and bytes), where the backend reports it.
    pub load_report: Option<crate::backend::load_report::LoadReport>,
}

impl<B: Backend> LoadedModel<B> {
    /// Token ids that end generation: the tokenizer's eos set plus config.json's.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut v = self.tokenizer.eos_ids().to_vec();
        v.extend(&self.model.cfg.eos_token_ids);
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Loads the model at `path`. For a directory the tokenizer comes from `tokenizer.json` in
/// it (or `tokenizer_dir` when given); for GGUF from its embedded metadata.
pub fn load_model<B: Backend>(
    backend: &B,
    path: &Path,
    tokenizer_dir: Option<&Path>,
) -> Result<LoadedModel<B>, EngineError> {
    let ck = open_checkpoint(path)?;
    let tokenizer = match (&ck.gguf_tokenizer, tokenizer_dir) {
        (_, Some(dir)) => Tokenizer::from_dir(dir),
        (Some(meta), None) => Tokenizer::from_gguf(meta),
        (None, None) => Tokenizer::from_dir(path),
    }
    .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
    // refuse before reading any weight when they cannot fit
    let (needed, how) = memory_fit::weights_estimate(backend, &ck.cfg, path);
    memory_fit::check(path, needed, &how, memory_fit::available_bytes())?;
    backend.take_load_report(); // what earlier loads left
    let model = Transformer::load(backend, ck.cfg, ck.source.as_ref())?;
    let load_report = backend.take_load_report();
    if let Some(r) = &load_report {
        tracing::info!("{}: {}", path.display(), r.summary());
        let (n, stored, held) = r.dequantized();
        if n > 0 {
            tracing::info!(
                "{}: dequantized {n} quantized tensors to {:?}: {:.1} MB in the file became {:.1} MB in memory (+{:.1} MB)",
                path.display(),
                backend.compute_dtype(),
                stored as f64 / 1e6,
                held as f64 / 1e6,
                held.saturating_sub(stored) as f64 / 1e6
            );
        }
    }
    Ok(LoadedModel {
        model,
        tokenizer: std::sync::Arc::new(tokenizer),
        path: path.to_path_buf(),
        load_report,
    })
}
