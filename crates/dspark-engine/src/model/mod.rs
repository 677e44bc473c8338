//! Models written once over the backend seam, and opening checkpoints from disk.

pub mod config;
pub mod drafter_gemma;
pub mod gemma;
pub mod gemma4;
pub mod kv_injection;
pub mod layer;
pub mod transformer;

use std::path::Path;

use crate::weights::gguf::GgufSource;
use crate::weights::safetensors::SafetensorsSource;
use crate::weights::{LoadError, WeightSource};
use config::TransformerConfig;

/// A checkpoint on disk: its config and a source of its tensors.
pub struct Checkpoint {
    pub cfg: TransformerConfig,
    pub source: Box<dyn WeightSource + Send>,
    /// Tokenizer metadata embedded in a GGUF file.
    pub gguf_tokenizer: Option<crate::tokenizer::GgufTokenizerMeta>,
}

/// Opens a model directory (config.json + *.safetensors) or a `.gguf` file.
pub fn open_checkpoint(path: &Path) -> Result<Checkpoint, LoadError> {
    if path.is_file() {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            let src = GgufSource::open(path)?;
            let cfg = TransformerConfig::from_gguf(&src)?;
            let gguf_tokenizer = if src.meta("tokenizer.ggml.tokens").is_some() {
                Some(
                    crate::tokenizer::gguf_tokenizer_meta(src.content())
                        .map_err(|e| LoadError::parse(path, format!("tokenizer metadata: {e}")))?,
                )
            } else {
                None
            };
            return Ok(Checkpoint {
                cfg,
                source: Box::new(src),
                gguf_tokenizer,
            });
        }
        return Err(LoadError::NotFound {
            path: path.to_path_buf(),
            message: "expected a directory with config.json or a .gguf file".into(),
        });
    }
    if !path.is_dir() {
        return Err(LoadError::NotFound {
            path: path.to_path_buf(),
            message: "no such file or directory".into(),
        });
    }
    let cfg_path = path.join("config.json");
    if !cfg_path.is_file() {
        // a directory holding exactly one .gguf is accepted too
        let ggufs: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| LoadError::io(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            })
            .collect();
        if ggufs.len() == 1 {
            return open_checkpoint(&ggufs[0]);
        }
        return Err(LoadError::NotFound {
            path: path.to_path_buf(),
            message: "no config.json (and not exactly one .gguf file)".into(),
        });
    }
    let cfg = TransformerConfig::from_json_file(&cfg_path)?;
    let src = SafetensorsSource::open_dir(path, cfg.quantization)?;
    Ok(Checkpoint {
        cfg,
        // a multimodal checkpoint's text model is served under plain names
        source: crate::weights::nested::nest(src),
        gguf_tokenizer: None,
    })
}
