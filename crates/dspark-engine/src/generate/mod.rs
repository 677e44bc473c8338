//! Generation: shared request/result types, the stopping rules, and the baseline loop.
//! Speculative loops live in `crate::spec` and reuse everything here.

pub mod baseline;
pub mod stopping;
pub mod text;

use crate::sampling::logprobs::TokenLogprob;
use crate::sampling::SamplingParams;

/// What one generation call should do.
#[derive(Clone, Debug)]
pub struct GenParams {
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation (not emitted).
    pub eos: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// eos or a stop string.
    Stop,
    /// `max_new_tokens` reached.
    Length,
    /// The caller asked to stop (client gone).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What the consumer of tokens wants after each round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// A stop string matched: finish with `stop`.
    StopString,
    /// Abandon (client disconnected).
    Cancel,
}

/// Receives committed tokens round by round.
pub trait TokenSink {
    fn push(&mut self, ids: &[u32]) -> Flow;
    /// When the request asks for log-probabilities: those of the tokens of the next
    /// [`TokenSink::push`], one per token, delivered just before it.
    fn logprobs(&mut self, _entries: &[TokenLogprob]) {}
}

/// A sink that only collects.
impl TokenSink for Vec<u32> {
    fn push(&mut self, ids: &[u32]) -> Flow {
        self.extend_from_slice(ids);
        Flow::Continue
    }
}

/// Per-round statistics of a generation (baseline: one token per round).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GenStats {
    /// Tokens committed per round (accepted drafts + 1).
    pub accept_lengths: Vec<usize>,
    /// Drafts verified per speculative round (0: a plain target step); empty for the baseline.
    pub drafts_per_round: Vec<usize>,
    pub target_forwards: usize,
    pub prompt_tokens: usize,
    /// Prompt tokens taken from a cache instead of being prefilled.
    pub cached_tokens: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub draft_secs: f64,
    pub verify_secs: f64,
    /// Rounds whose drafts after the first came from prompt lookup.
    pub lookup_rounds: usize,
    /// Drafts from prompt lookup that verification accepted.
    pub lookup_accepted: usize,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenResult {
    pub tokens: Vec<u32>,
    /// The decoded text of `tokens` (filled by [`crate::pipeline::Pipeline`], which owns the
    /// tokenizer; empty when a loop is called directly).
    pub text: String,
    pub finish_reason: FinishReason,
    pub stats: GenStats,
    /// One entry per token of `tokens` when the request asked for log-probabilities.
    pub logprobs: Vec<TokenLogprob>,
}

impl GenResult {
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }
    /// Mean tokens committed per round.
    pub fn mean_accept_len(&self) -> f64 {
        let r = self.stats.accept_lengths.len().max(1);
        self.stats.accept_lengths.iter().sum::<usize>() as f64 / r as f64
    }
    /// End-to-end tokens per second (prefill included).
    pub fn tokens_per_sec(&self) -> f64 {
        let s = self.stats.prefill_secs + self.stats.decode_secs;
        if s > 0.0 {
            self.tokens.len() as f64 / s
        } else {
            0.0
        }
    }
    /// Decode-phase tokens per second.
    pub fn decode_tokens_per_sec(&self) -> f64 {
        if self.stats.decode_secs > 0.0 {
            self.tokens.len().saturating_sub(1) as f64 / self.stats.decode_secs
        } else {
            0.0
        }
    }
    /// Prompt tokens prefilled per second.
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        let n = self.stats.prompt_tokens - self.stats.cached_tokens;
        if self.stats.prefill_secs > 0.0 {
            n as f64 / self.stats.prefill_secs
        } else {
            0.0
        }
    }
}
