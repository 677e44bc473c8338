//! draft-model speculation: a small autoregressive model with the target's tokenizer drafts
//! `k` tokens per round, one forward each, keeping its own KV cache. The prompt is fed in one
//! batched forward at prefill, right after the target's; tokens committed but not yet fed (the
//! last accepted draft of a fully accepted block) wait in a backlog and are fed with the next
//! round's first forward. With an adaptive [`DraftLen`] the number of drafts follows
//! [`policy::adaptive_draft_len`] from the sequence's rounds already verified, unless the caller
//! picks the count (a measured budget, which may also choose rounds without drafts: their
//! committed token joins the backlog).

use rand::RngCore;

use crate::backend::Backend;
use crate::constrain::Drafting;
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::transformer::{LogitsWanted, Transformer};
use crate::sampling::{distribution, pick, SamplingParams};
use crate::spec::policy::{self, AcceptanceTally, DraftLen};
use crate::spec::{Drafter, DrafterState, Proposal, SpecParams};

pub struct DraftModel<B: Backend> {
    model: Transformer<B>,
    cache: KvCache<B>,
    /// Committed tokens at positions `cache.len()..`, not yet fed.
    backlog: Vec<u32>,
    block: usize,
    /// The sequence's verified drafts when the count adapts (`None`: always up to the
    /// round's max).
    adaptive: Option<AcceptanceTally>,
    /// Drafts proposed in the round being verified (`None`: the round had none, so
    /// `propose` was not called).
    drafted: Option<usize>,
    /// The caller picks each round's count: draft exactly what `propose` is given.
    count_from_caller: bool,
}

impl<B: Backend> DraftModel<B> {
    /// `len`: the most drafts per round (a count), or an adaptive length. Fails when the
    /// vocabularies differ.
    pub fn new(
        model: Transformer<B>,
        target_vocab: usize,
        len: impl Into<DraftLen>,
    ) -> Result<Self, EngineError> {
        let len = len.into();
        if model.cfg.vocab_size != target_vocab {
            return Err(EngineError::DrafterMismatch(format!(
                "draft model vocabulary {} != target vocabulary {target_vocab}",
                model.cfg.vocab_size
            )));
        }
        let cache = model.new_cache();
        Ok(DraftModel {
            model,
            cache,
            backlog: Vec::new(),
            block: len.cap(),
            adaptive: match len {
                DraftLen::Adaptive { start, .. } => Some(AcceptanceTally::new(start)),
                DraftLen::Fixed(_) => None,
            },
            drafted: None,
            count_from_caller: false,
        })
    }
}

impl<B: Backend> Drafter<B> for DraftModel<B> {
    fn name(&self) -> &'static str {
        "draft-model"
    }

    fn block_len(&self) -> usize {
        self.block
    }

    fn prefill(
        &mut self,
        tokens: &[u32],
        start: usize,
        _taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.truncate(start);
        // every sequence starts its draft count afresh: a seeded sampled request must draw the
        // same random numbers whatever the server served before it
        if let Some(tally) = self.adaptive.as_mut() {
            *tally = AcceptanceTally::new(tally.start());
        }
        self.backlog.extend_from_slice(tokens);
        let feed = std::mem::take(&mut self.backlog);
        if !feed.is_empty() {
            self.model
                .forward(&feed, &mut self.cache, &[], LogitsWanted::None)?;
        }
        Ok(())
    }

    fn propose(
        &mut self,
        _target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        _spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError> {
        if self.len() != pos {
            return Err(EngineError::Invalid(format!(
                "draft model holds {} positions, the target {pos}",
                self.len()
            )));
        }
        let b = self.model.backend().clone();
        let mut feed = std::mem::take(&mut self.backlog);
        feed.push(pending);
        let max = match self.adaptive {
            Some(t) if !self.count_from_caller => {
                policy::adaptive_draft_len(&t, self.block).min(max)
            }
            _ => max,
        }
        .max(1);
        let mut tokens = Vec::with_capacity(max);
        let mut qs = Vec::new();
        // under a grammar, draft i is chosen from a row masked after drafts 0..i
        let mut grammar = Drafting::new(sampling);
        for i in 0..max {
            let out = self
                .model
                .forward(&feed, &mut self.cache, &[], LogitsWanted::Last)?;
            let mut row = b.to_f32_vec(out.logits.as_ref().expect("asked for logits"))?;
            grammar.mask(&mut row)?;
            let d = if sampling.is_greedy() {
                pick(&row, sampling, rng)
            } else {
                let q = distribution(&row, sampling);
                let d = crate::sampling::sample_index(&q, rng);
                qs.push(q);
                d
            };
            grammar.chose(d)?;
            tokens.push(d);
            if !grammar.open() {
                break;
            }
            if i + 1 < max {
                feed = vec![d];
            }
        }
        self.drafted = Some(tokens.len());
        let q = if sampling.is_greedy() { None } else { Some(qs) };
        Ok(Proposal { tokens, q })
    }

    fn commit(
        &mut self,
        tokens: &[u32],
        pos: usize,
        _taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        // tokens = pending + the accepted drafts
        let Some(drafted) = self.drafted.take() else {
            // a round without drafts: the pending token joins the backlog, fed with the next
            // round's first forward (or the next prefill)
            if self.len() != pos {
                return Err(EngineError::Invalid(format!(
                    "draft model holds {} positions, the target committed at {pos}",
                    self.len()
                )));
            }
            self.backlog.extend_from_slice(tokens);
            return Ok(());
        };
        if let Some(tally) = self.adaptive.as_mut() {
            tally.record(drafted, tokens.len().saturating_sub(1));
        }
        // the cache holds pending + all but the last draft; accepted ones are a prefix of that
        let end = pos + tokens.len();
        self.cache.truncate(end);
        let fed = self.cache.len().saturating_sub(pos);
        self.backlog = tokens[fed.min(tokens.len())..].to_vec();
        Ok(())
    }

    fn set_count_from_caller(&mut self, on: bool) {
        self.count_from_caller = on;
    }

    fn truncate(&mut self, len: usize) {
        self.drafted = None;
        if len <= self.cache.len() {
            self.cache.truncate(len);
            self.backlog.clear();
        } else {
            self.backlog.truncate(len - self.cache.len());
        }
    }

    fn len(&self) -> usize {
        self.cache.len() + self.backlog.len()
    }

    fn take_state(&mut self) -> DrafterState<B> {
        let kv = std::mem::replace(&mut self.cache, self.model.new_cache());
        DrafterState {
            kv: Some(kv),
            backlog: std::mem::take(&mut self.backlog),
        }
    }

    fn put_state(&mut self, state: DrafterState<B>) {
        self.cache = state.kv.unwrap_or_else(|| self.model.new_cache());
        self.backlog = state.backlog;
    }
}
