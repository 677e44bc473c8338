//! A loaded target plus the drafter of the chosen mode: the one object a front end (CLI,
//! server worker, app) drives. Owns the target KV cache so a later prefix cache can keep it.

use std::path::Path;

use crate::backend::Backend;
use crate::drafters::{draft_model::DraftModel, load_dflash, load_dspark};
use crate::error::EngineError;
use crate::generate::{baseline, GenParams, GenResult, TokenSink};
use crate::kv::KvCache;
use crate::load::LoadedModel;
use crate::model::open_checkpoint;
use crate::model::transformer::Transformer;
use crate::spec::{decode, Drafter, Mode, SpecParams};

pub struct Pipeline<B: Backend> {
    pub target: LoadedModel<B>,
    pub mode: Mode,
    pub spec: SpecParams,
    drafter: Option<Box<dyn Drafter<B>>>,
    cache: KvCache<B>,
}

/// Default drafts per round when `--max-draft` is not given.
pub fn default_max_draft(mode: Mode) -> usize {
    match mode {
        Mode::Baseline => 1,
        Mode::Draft => 4,
        Mode::Dspark | Mode::Dflash => usize::MAX, // the drafter's full block
    }
}

/// Loads the drafter for `mode` from `path`. draft-model drafters are loaded with
/// `draft_backend` (e.g. one that keeps GGUF weights quantized).
pub fn load_drafter<B: Backend>(
    backend: &B,
    draft_backend: &B,
    mode: Mode,
    path: &Path,
    target: &Transformer<B>,
    block: usize,
) -> Result<Box<dyn Drafter<B>>, EngineError> {
    Ok(match mode {
        Mode::Baseline => {
            return Err(EngineError::Invalid("baseline mode takes no drafter".into()));
        }
        Mode::Dspark => Box::new(load_dspark(backend, path, target)?),
        Mode::Dflash => Box::new(load_dflash(backend, path, target)?),
        Mode::Draft => {
            let ck = open_checkpoint(path)?;
            let m = Transformer::load(draft_backend, ck.cfg, ck.source.as_ref())?;
            Box::new(DraftModel::new(m, target.cfg.vocab_size, block)?)
        }
    })
}

impl<B: Backend> Pipeline<B> {
    pub fn new(target: LoadedModel<B>, mode: Mode, drafter: Option<Box<dyn Drafter<B>>>, spec: SpecParams) -> Result<Self, EngineError> {
        if mode != Mode::Baseline && drafter.is_none() {
            return Err(EngineError::Invalid(format!("{} mode needs a drafter", mode.as_str())));
        }
        let cache = target.model.new_cache();
        Ok(Pipeline { target, mode, spec, drafter, cache })
    }

    pub fn drafter_name(&self) -> Option<&'static str> {
        self.drafter.as_ref().map(|d| d.name())
    }

    /// One generation with the target alone, whatever the mode (benchmarks' reference).
    pub fn generate_baseline(&mut self, prompt: &[u32], params: &GenParams, sink: &mut dyn TokenSink) -> Result<GenResult, EngineError> {
        self.cache.clear();
        baseline::generate(&self.target.model, &mut self.cache, prompt, params, sink)
    }

    /// One generation from scratch.
    pub fn generate(&mut self, prompt: &[u32], params: &GenParams, sink: &mut dyn TokenSink) -> Result<GenResult, EngineError> {
        self.cache.clear();
        match (&mut self.drafter, self.mode) {
            (Some(d), m) if m != Mode::Baseline => {
                d.truncate(0);
                decode::generate(&self.target.model, &mut self.cache, d.as_mut(), prompt, params, &self.spec, sink)
            }
            _ => baseline::generate(&self.target.model, &mut self.cache, prompt, params, sink),
        }
    }
}
