//! Lossless speculative decoding: a [`Drafter`] proposes a block, the target verifies it in one
//! forward, the accepted prefix plus one correction/bonus token is committed, and every cache
//! is cut back to the committed length.
//!
//! Invariant: after each round the target KV length equals the number of committed positions
//! (prompt + emitted tokens, minus the pending token that has not been fed yet), and so does
//! every drafter state.

pub mod decode;
pub mod draft_budget;
pub mod lookup_count;
pub mod policy;
pub mod prompt_lookup;
pub mod verify;

use rand::RngCore;

use crate::backend::Backend;
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::transformer::Transformer;
use crate::sampling::SamplingParams;

/// The decoding modes the engine offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Baseline,
    Dspark,
    Dflash,
    Draft,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "baseline" => Some(Mode::Baseline),
            "dspark" => Some(Mode::Dspark),
            "dflash" => Some(Mode::Dflash),
            "draft" | "draft-model" => Some(Mode::Draft),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Dspark => "dspark",
            Mode::Dflash => "dflash",
            Mode::Draft => "draft",
        }
    }
}

/// Knobs of the speculative loop.
#[derive(Clone, Copy, Debug)]
pub struct SpecParams {
    /// Drafts verified per round (capped by the drafter's block).
    pub max_draft: usize,
    /// DSpark confidence truncation: keep the longest prefix whose running product of
    /// confidences is >= this (at least one draft). 0 = off.
    pub confidence_threshold: f32,
    /// Drafts after the first come from prompt lookup where the context has a match
    /// ([`prompt_lookup::LookupContext::after`]; counts: [`lookup_count`]).
    pub lookup: bool,
}

/// Drafted tokens, and for sampled decoding the (truncated) draft distribution of each.
#[derive(Clone, Debug, Default)]
pub struct Proposal {
    pub tokens: Vec<u32>,
    pub q: Option<Vec<Vec<f32>>>,
}

/// A drafter's per-sequence state: its KV (or context K/V) cache, and tokens committed but
/// not yet fed (draft-model only).
pub struct DrafterState<B: Backend> {
    pub kv: Option<KvCache<B>>,
    pub backlog: Vec<u32>,
}

impl<B: Backend> DrafterState<B> {
    pub fn empty() -> Self {
        DrafterState {
            kv: None,
            backlog: Vec::new(),
        }
    }
    /// Committed positions this state covers.
    pub fn len(&self) -> usize {
        self.kv.as_ref().map_or(0, |k| k.len()) + self.backlog.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Cuts the state back to `len` committed positions.
    pub fn truncate(&mut self, len: usize) {
        let kv_len = self.kv.as_ref().map_or(0, |k| k.len());
        if len <= kv_len {
            if let Some(k) = self.kv.as_mut() {
                k.truncate(len);
            }
            self.backlog.clear();
        } else {
            self.backlog.truncate(len - kv_len);
        }
    }
}

/// A source of draft tokens. Positions are absolute sequence positions.
pub trait Drafter<B: Backend> {
    fn name(&self) -> &'static str;
    /// Largest number of drafts one round can produce.
    fn block_len(&self) -> usize;
    /// Target layers whose outputs the drafter reads (their fused rows arrive in `prefill`
    /// and `commit`).
    fn taps(&self) -> &[usize] {
        &[]
    }
    /// The target prefilled `tokens` at positions `start..`; `taps` holds their fused rows.
    fn prefill(
        &mut self,
        tokens: &[u32],
        start: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError>;
    /// Drafts up to `max` tokens following `pending`, which sits at position `pos`. Drafters
    /// that share the target's embedding or LM head read them from `target`.
    #[allow(clippy::too_many_arguments)]
    fn propose(
        &mut self,
        target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError>;
    /// `tokens` (the pending token and the accepted drafts) are now committed at positions
    /// `pos..`; `taps` holds their fused rows. Any state past them is discarded.
    fn commit(
        &mut self,
        tokens: &[u32],
        pos: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError>;
    /// Whether the caller picks each round's draft count (a measured
    /// [`draft_budget::DraftBudget`]): a drafter with a count rule of its own then drafts
    /// exactly the `max` that [`Drafter::propose`] is given. A round with no drafts calls
    /// [`Drafter::commit`] without a `propose` before it.
    fn set_count_from_caller(&mut self, _on: bool) {}
    /// Sets the ids this drafter's head scores ([`crate::drafters::draft_vocab`]); returns
    /// how many it now scores (`None`: the whole vocabulary, also for drafters without a
    /// draft vocabulary, and where the head's weight form has no rows to take).
    fn set_draft_vocab(
        &mut self,
        _target: &Transformer<B>,
        _size: crate::drafters::draft_vocab::DraftVocabSize,
    ) -> Result<Option<usize>, EngineError> {
        Ok(None)
    }
    /// How many ranked ids the head scores, before a prompt's (`None`: the whole vocabulary).
    fn draft_vocab_len(&self) -> Option<usize> {
        None
    }
    /// The next generation's prompt: a drafter with a draft vocabulary adds its ids to the
    /// ranked ones for that generation ([`crate::drafters::draft_vocab`]).
    fn fit_prompt(&mut self, _target: &Transformer<B>, _prompt: &[u32]) -> Result<(), EngineError> {
        Ok(())
    }
    /// Whether the drafts after a round's first may be replaced by others (prompt lookup,
    /// [`prompt_lookup`]): true where the drafter's state after a round depends only on the
    /// committed tokens, not on what it drafted (a draft model's cache holds its own drafts).
    fn lookup_safe(&self) -> bool {
        false
    }
    /// Rolls the drafter back to `len` committed positions (prefix reuse).
    fn truncate(&mut self, len: usize);
    /// Committed positions the drafter holds.
    fn len(&self) -> usize;
    /// Moves the drafter's per-sequence state out (leaving it empty), for a prefix cache.
    fn take_state(&mut self) -> DrafterState<B>;
    /// Installs state produced by [`Drafter::take_state`] for the same drafter.
    fn put_state(&mut self, state: DrafterState<B>);
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
