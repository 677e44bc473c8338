//! The drafters, each a [`crate::spec::Drafter`] in its own file, and loading them from disk
//! with checks that they fit the target.

pub mod dflash;
pub mod draft_model;
pub mod draft_vocab;
pub mod dspark;

use std::path::Path;

use crate::backend::Backend;
use crate::drafters::draft_vocab::{DraftVocabSize, VocabChoice};
use crate::error::EngineError;
use crate::model::kv_injection::{DrafterConfig, KvInjectionNet};
use crate::model::transformer::Transformer;
use crate::spec::Drafter;
use crate::weights::safetensors::SafetensorsSource;
use crate::weights::{LoadError, WeightSource};

/// Checks that a KV-injection drafter's config fits `target`; the error names the mismatch.
pub fn check_fit<B: Backend>(
    cfg: &DrafterConfig,
    target: &Transformer<B>,
    shares_embedding: bool,
) -> Result<(), EngineError> {
    let t = &target.cfg;
    let bad = |m: String| Err(EngineError::DrafterMismatch(m));
    if cfg.vocab_size != t.vocab_size {
        return bad(format!(
            "drafter vocab_size {} != target vocab_size {}",
            cfg.vocab_size, t.vocab_size
        ));
    }
    if shares_embedding && cfg.hidden_size != t.hidden_size {
        return bad(format!(
            "drafter hidden_size {} != target hidden_size {}",
            cfg.hidden_size, t.hidden_size
        ));
    }
    if let Some(&l) = cfg.target_layer_ids.iter().find(|&&l| l >= t.num_layers) {
        return bad(format!(
            "drafter taps target layer {l}, but the target has {} layers",
            t.num_layers
        ));
    }
    if let Some(n) = cfg.num_target_layers {
        if n != t.num_layers {
            return bad(format!(
                "drafter was trained for {n} target layers, the target has {}",
                t.num_layers
            ));
        }
    }
    if cfg.mask_token_id as usize >= t.vocab_size {
        return bad(format!(
            "mask_token_id {} is outside the vocabulary of {}",
            cfg.mask_token_id, t.vocab_size
        ));
    }
    Ok(())
}

/// Reads `config.json` of a drafter directory.
pub fn read_config(dir: &Path) -> Result<serde_json::Value, LoadError> {
    let p = dir.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(|e| LoadError::io(&p, e))?;
    serde_json::from_str(&text).map_err(|e| LoadError::parse(&p, e))
}

/// Loads a DFlash drafter directory for `target`.
pub fn load_dflash<B: Backend>(
    b: &B,
    dir: &Path,
    target: &Transformer<B>,
) -> Result<dflash::DFlash<B>, EngineError> {
    load_dflash_sized(b, dir, target, DraftVocabSize::Drafter)
}

/// [`load_dflash`] with its draft vocabulary's size (the rows are built once, for it).
pub fn load_dflash_sized<B: Backend>(
    b: &B,
    dir: &Path,
    target: &Transformer<B>,
    size: DraftVocabSize,
) -> Result<dflash::DFlash<B>, EngineError> {
    let v = read_config(dir)?;
    let src = SafetensorsSource::open_dir(dir, None)?;
    dflash_from_parts_sized(b, &v, &src, target, size)
}

/// A DFlash drafter from a parsed config and a weight source.
pub fn dflash_from_parts<B: Backend>(
    b: &B,
    v: &serde_json::Value,
    src: &dyn WeightSource,
    target: &Transformer<B>,
) -> Result<dflash::DFlash<B>, EngineError> {
    dflash_from_parts_sized(b, v, src, target, DraftVocabSize::Drafter)
}

fn dflash_from_parts_sized<B: Backend>(
    b: &B,
    v: &serde_json::Value,
    src: &dyn WeightSource,
    target: &Transformer<B>,
    size: DraftVocabSize,
) -> Result<dflash::DFlash<B>, EngineError> {
    let path = src.path().join("config.json");
    if v.get("markov_rank")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
        > 0
    {
        return Err(EngineError::DrafterMismatch(format!(
            "{} has a Markov head: it is a DSpark drafter, not DFlash",
            src.path().display()
        )));
    }
    let cfg = DrafterConfig::from_json(v, &path)?;
    check_fit(&cfg, target, true)?;
    let net = KvInjectionNet::load(b, src, cfg, target.cfg.hidden_size)?;
    let choice = VocabChoice::read(src.path(), v, target.cfg.vocab_size)?;
    let mut d = dflash::DFlash::new(net).with_vocab_choice(choice);
    d.set_draft_vocab(target, size)?;
    Ok(d)
}

/// Loads a DSpark drafter directory for `target`.
pub fn load_dspark<B: Backend>(
    b: &B,
    dir: &Path,
    target: &Transformer<B>,
) -> Result<dspark::DSpark<B>, EngineError> {
    load_dspark_sized(b, dir, target, DraftVocabSize::Drafter)
}

/// [`load_dspark`] with its draft vocabulary's size (the rows are built once, for it).
pub fn load_dspark_sized<B: Backend>(
    b: &B,
    dir: &Path,
    target: &Transformer<B>,
    size: DraftVocabSize,
) -> Result<dspark::DSpark<B>, EngineError> {
    let v = read_config(dir)?;
    let src = SafetensorsSource::open_dir(dir, None)?;
    dspark_from_parts_sized(b, &v, &src, target, size)
}

/// A DSpark drafter from a parsed config and a weight source.
pub fn dspark_from_parts<B: Backend>(
    b: &B,
    v: &serde_json::Value,
    src: &dyn WeightSource,
    target: &Transformer<B>,
) -> Result<dspark::DSpark<B>, EngineError> {
    dspark_from_parts_sized(b, v, src, target, DraftVocabSize::Drafter)
}

fn dspark_from_parts_sized<B: Backend>(
    b: &B,
    v: &serde_json::Value,
    src: &dyn WeightSource,
    target: &Transformer<B>,
    size: DraftVocabSize,
) -> Result<dspark::DSpark<B>, EngineError> {
    let path = src.path().join("config.json");
    let cfg = DrafterConfig::from_json(v, &path)?.with_gemma(v, &path)?;
    check_fit(&cfg, target, false)?;
    let choice = VocabChoice::read(src.path(), v, target.cfg.vocab_size)?;
    let mut d = dspark::DSpark::load(b, src, cfg, v, target)?.with_vocab_choice(choice);
    d.set_draft_vocab(target, size)?;
    Ok(d)
}
