//! A loaded target plus the drafter of the chosen mode: the one object a front end (CLI,
//! server worker, app) drives. Owns the target KV cache so a later prefix cache can keep it.

use std::path::Path;

use crate::backend::Backend;
use crate::drafters::draft_vocab::DraftVocabSize;
use crate::drafters::{draft_model::DraftModel, load_dflash_sized, load_dspark_sized};
use crate::error::EngineError;
use crate::generate::{baseline, GenParams, GenResult, TokenSink};
use crate::kv::KvCache;
use crate::load::LoadedModel;
use crate::model::open_checkpoint;
use crate::model::transformer::Transformer;
use crate::prefix_cache::{PrefixCache, PrefixCacheConfig, PrefixCacheInfo};
use crate::spec::draft_budget::DraftBudget;
use crate::spec::policy::{CountRule, DraftLen};
use crate::spec::{decode, Drafter, DrafterState, Mode, SpecParams};

pub struct Pipeline<B: Backend> {
    pub target: LoadedModel<B>,
    pub mode: Mode,
    pub spec: SpecParams,
    drafter: Option<Box<dyn Drafter<B>>>,
    cache: KvCache<B>,
    prefix: Option<PrefixCache<B>>,
    /// DFlash/DSpark with no configured draft count: the measured cost-aware choice of drafts
    /// per round, kept across requests.
    budget: Option<DraftBudget>,
}

/// Loads the drafter for `mode` from `path`. draft-model drafters are loaded with
/// `draft_backend` (e.g. one that keeps GGUF weights quantized); a DFlash/DSpark drafter's
/// draft-vocabulary rows are built once, for `vocab` (`DraftVocabSize::Drafter`: its own).
pub fn load_drafter<B: Backend>(
    backend: &B,
    draft_backend: &B,
    mode: Mode,
    path: &Path,
    target: &Transformer<B>,
    len: impl Into<DraftLen>,
    vocab: DraftVocabSize,
) -> Result<Box<dyn Drafter<B>>, EngineError> {
    Ok(match mode {
        Mode::Baseline => {
            return Err(EngineError::Invalid(
                "baseline mode takes no drafter".into(),
            ));
        }
        Mode::Dspark => Box::new(load_dspark_sized(backend, path, target, vocab)?),
        Mode::Dflash => Box::new(load_dflash_sized(backend, path, target, vocab)?),
        Mode::Draft => {
            let ck = open_checkpoint(path)?;
            let m = Transformer::load(draft_backend, ck.cfg, ck.source.as_ref())?;
            Box::new(DraftModel::new(m, target.cfg.vocab_size, len)?)
        }
    })
}

impl<B: Backend> Pipeline<B> {
    pub fn new(
        target: LoadedModel<B>,
        mode: Mode,
        drafter: Option<Box<dyn Drafter<B>>>,
        spec: SpecParams,
    ) -> Result<Self, EngineError> {
        if mode != Mode::Baseline && drafter.is_none() {
            return Err(EngineError::Invalid(format!(
                "{} mode needs a drafter",
                mode.as_str()
            )));
        }
        let cache = target.model.new_cache();
        Ok(Pipeline {
            target,
            mode,
            spec,
            drafter,
            cache,
            prefix: None,
            budget: None,
        })
    }

    /// Turns on the prefix cache. `drafter_label` (e.g. the drafter's path) joins the model
    /// path, mode and dtype in the fingerprint that keeps spilled files of other setups out.
    pub fn enable_prefix_cache(&mut self, cfg: PrefixCacheConfig, drafter_label: &str) {
        let b = self.target.model.backend();
        let fp = format!(
            "{}|{}|{}|{:?}|{}",
            self.target.path.display(),
            self.mode.as_str(),
            drafter_label,
            b.compute_dtype(),
            b.device_label()
        );
        let shape = (
            self.target.model.cfg.num_layers,
            self.target.model.cfg.max_position_embeddings,
        );
        self.prefix = Some(PrefixCache::new(b, cfg, &fp, shape));
    }

    /// Applies live settings: drafts per round, confidence threshold (through the draft
    /// policy) and the prefix cache's slot and RAM limits. Takes effect at the next request.
    pub fn retune(&mut self, t: &crate::worker::Tuning) {
        let invariant = self.target.model.backend().rows_batch_invariant();
        self.spec = crate::spec::policy::spec_params(
            self.mode,
            t.max_draft,
            t.confidence_threshold,
            crate::spec::policy::lookup(t.lookup, invariant),
        );
        self.budget = None;
        if let (Some(p), Some((slots, ram))) = (self.prefix.as_mut(), t.prefix_limits) {
            p.set_limits(slots, ram);
        }
    }

    /// Prefix-cache counters (`enabled: false` when off).
    pub fn prefix_cache_info(&self) -> PrefixCacheInfo {
        self.prefix.as_ref().map(|p| p.info()).unwrap_or_default()
    }

    /// Drops every cached prefix.
    pub fn clear_prefix_cache(&mut self) {
        if let Some(p) = self.prefix.as_mut() {
            p.clear();
        }
    }

    /// The measured draft-count state, when this pipeline chooses drafts per round itself.
    pub fn draft_budget(&self) -> Option<&DraftBudget> {
        self.budget.as_ref()
    }

    /// How many ids the drafter's head scores (`None`: the whole vocabulary, or no drafter).
    pub fn draft_vocab_len(&self) -> Option<usize> {
        self.drafter.as_ref().and_then(|d| d.draft_vocab_len())
    }

    pub fn drafter_name(&self) -> Option<&'static str> {
        self.drafter.as_ref().map(|d| d.name())
    }

    /// Moves the drafter out (the pipeline then runs baseline only), for a benchmark that
    /// drives `spec::decode::generate` itself with a wrapped drafter.
    pub fn take_drafter(&mut self) -> Option<Box<dyn Drafter<B>>> {
        self.mode = Mode::Baseline;
        self.drafter.take()
    }

    /// One generation with the target alone, whatever the mode (benchmarks' reference).
    pub fn generate_baseline(
        &mut self,
        prompt: &[u32],
        params: &GenParams,
        sink: &mut dyn TokenSink,
    ) -> Result<GenResult, EngineError> {
        self.cache.clear();
        let r = baseline::generate(&self.target.model, &mut self.cache, prompt, params, sink)?;
        Ok(self.with_text(r))
    }

    /// Drops the target's and the drafter's KV caches for new, empty ones: the next generation
    /// starts as a request that misses the prefix cache does in a server (new buffers, so a
    /// device's captured steps over the old ones do not apply). For `dspark bench --fresh-cache`.
    pub fn fresh_caches(&mut self) {
        self.cache = self.target.model.new_cache();
        if let Some(d) = self.drafter.as_mut() {
            d.put_state(DrafterState::empty());
        }
    }

    /// Fills `text` from the tokens (special tokens skipped).
    fn with_text(&self, mut r: GenResult) -> GenResult {
        r.text = self
            .target
            .tokenizer
            .decode(&r.tokens, true)
            .unwrap_or_default();
        r
    }

    /// One generation, starting from the longest cached prefix when the prefix cache is on.
    /// On success the computed state is kept (also for a cancelled request); on an error only
    /// the state of this request is dropped.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenParams,
        sink: &mut dyn TokenSink,
    ) -> Result<GenResult, EngineError> {
        let Some(prefix) = self.prefix.as_mut() else {
            self.cache.clear();
            if let Some(d) = self.drafter.as_mut() {
                d.truncate(0);
            }
            let r = self.run(prompt, params, sink, None)?;
            return Ok(self.with_text(r));
        };
        let (cache, dstate) = match prefix.acquire(prompt) {
            Some(a) => (a.target, a.drafter),
            None => (self.target.model.new_cache(), DrafterState::empty()),
        };
        let r = self.run(prompt, params, sink, Some((cache, dstate)));
        let result = r?;
        let mut cache = std::mem::replace(&mut self.cache, self.target.model.new_cache());
        let mut dstate = match self.drafter.as_mut() {
            Some(d) if self.mode != Mode::Baseline => d.take_state(),
            _ => DrafterState::empty(),
        };
        let len = cache.len().min(prompt.len() + result.tokens.len());
        cache.truncate(len);
        let len = cache.len(); // a sliding-window cache may have started over
        dstate.truncate(len);
        let mut seq = prompt.to_vec();
        seq.extend_from_slice(&result.tokens);
        seq.truncate(len);
        let elem = self.target.model.backend().compute_dtype().size_in_bytes();
        if let Some(p) = self.prefix.as_mut() {
            p.store(seq, cache, dstate, elem);
        }
        Ok(self.with_text(result))
    }

    fn run(
        &mut self,
        prompt: &[u32],
        params: &GenParams,
        sink: &mut dyn TokenSink,
        start: Option<(KvCache<B>, DrafterState<B>)>,
    ) -> Result<GenResult, EngineError> {
        if let Some((cache, dstate)) = start {
            self.cache = cache;
            if let Some(d) = self.drafter.as_mut() {
                d.put_state(dstate);
            }
        }
        let backend = self.target.model.backend();
        let rule = crate::spec::policy::count_rule(
            self.mode,
            self.spec.max_draft,
            &params.sampling,
            backend.rows_batch_invariant(),
        );
        let row_cost = backend.spec_row_cost();
        // a prior budget belongs to this request alone: its rounds depend on the request (and
        // seed) only
        let mut own: Option<DraftBudget> = None;
        let r = match (&mut self.drafter, self.mode) {
            (Some(d), m) if m != Mode::Baseline => {
                let budget = match &mut self.budget {
                    Some(b) if rule == CountRule::Measured && b.block() == d.block_len() => Some(b),
                    slot if rule == CountRule::Measured => {
                        Some(slot.insert(DraftBudget::new(d.block_len())))
                    }
                    _ if rule == CountRule::Prior => {
                        Some(own.insert(DraftBudget::with_prior_cost(d.block_len(), row_cost)))
                    }
                    _ => None,
                };
                decode::generate_with(
                    &self.target.model,
                    &mut self.cache,
                    d.as_mut(),
                    prompt,
                    params,
                    &self.spec,
                    budget,
                    sink,
                )
            }
            _ => baseline::generate(&self.target.model, &mut self.cache, prompt, params, sink),
        };
        if r.is_err() {
            // never keep state of a failed request
            self.cache = self.target.model.new_cache();
            if let Some(d) = self.drafter.as_mut() {
                d.truncate(0);
            }
        }
        r
    }
}
