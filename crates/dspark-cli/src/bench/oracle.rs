//! The oracle drafter, for `dspark bench --oracle-tau` only (never built by the serve path):
//! it wraps a real drafter, runs that drafter's forward each round so the draft *cost* is
//! real, then throws its tokens away and proposes the target's own greedy continuation
//! (precomputed by the baseline run) with a wrong token at a chosen position. Acceptance is
//! thereby forced: a round commits exactly `accept` tokens (the accepted drafts plus the
//! correction), so speculative speed can be measured at a chosen mean tau without a trained
//! drafter for the target.

use dspark_engine::backend::Backend;
use dspark_engine::error::EngineError;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Drafter, DrafterState, Proposal, SpecParams};
use rand::RngCore;

/// Tokens committed per round so that their mean over rounds tends to `tau` (>= 1): rounds
/// take `floor(tau)` or `ceil(tau)`, spread evenly (the running mean never strays from tau by
/// more than one round's rounding).
pub fn accept_pattern(tau: f64, rounds: usize) -> Vec<usize> {
    let tau = tau.max(1.0);
    let mut out = Vec::with_capacity(rounds);
    let mut total = 0usize;
    for r in 1..=rounds {
        let want = (tau * r as f64).round() as usize;
        let n = want.saturating_sub(total).max(1);
        total += n;
        out.push(n);
    }
    out
}

/// The block proposed when the pending token is `continuation[k]`: the next `n` tokens of
/// `continuation`, with the one at draft index `accept - 1` replaced by a different token,
/// so that verification accepts `accept - 1` drafts and commits `accept` tokens. Past the end
/// of `continuation` it proposes token 0.
pub fn forced_block(
    continuation: &[u32],
    k: usize,
    n: usize,
    accept: usize,
    vocab: u32,
) -> Vec<u32> {
    (0..n)
        .map(|j| {
            let t = continuation.get(k + 1 + j).copied().unwrap_or(0);
            if j + 1 == accept {
                (t + 1) % vocab
            } else {
                t
            }
        })
        .collect()
}

/// A drafter whose proposals are the target's known greedy continuation (see the module doc).
pub struct Oracle<B: Backend> {
    inner: Box<dyn Drafter<B>>,
    prompt_len: usize,
    continuation: Vec<u32>,
    pattern: Vec<usize>,
    round: usize,
    vocab: u32,
}

impl<B: Backend> Oracle<B> {
    pub fn new(inner: Box<dyn Drafter<B>>, vocab: usize) -> Self {
        Oracle {
            inner,
            prompt_len: 0,
            continuation: Vec::new(),
            pattern: vec![1],
            round: 0,
            vocab: vocab as u32,
        }
    }

    /// The next generation starts after `prompt_len` prompt tokens; `continuation` is what the
    /// baseline emitted there, and round r commits `pattern[r % len]` tokens.
    pub fn script(&mut self, prompt_len: usize, continuation: Vec<u32>, pattern: Vec<usize>) {
        self.prompt_len = prompt_len;
        self.continuation = continuation;
        self.pattern = if pattern.is_empty() { vec![1] } else { pattern };
        self.round = 0;
    }

    /// The wrapped drafter's name (whose cost the rounds carry).
    pub fn inner_name(&self) -> &'static str {
        self.inner.name()
    }
}

impl<B: Backend> Drafter<B> for Oracle<B> {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn block_len(&self) -> usize {
        self.inner.block_len()
    }
    fn taps(&self) -> &[usize] {
        self.inner.taps()
    }
    fn prefill(
        &mut self,
        tokens: &[u32],
        start: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.inner.prefill(tokens, start, taps)
    }
    fn propose(
        &mut self,
        target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError> {
        // the real drafter's forward, for its cost (and so its state moves as it would)
        let real = self
            .inner
            .propose(target, pending, pos, max, spec, sampling, rng)?;
        let k = pos.saturating_sub(self.prompt_len);
        let accept = self.pattern[self.round % self.pattern.len()];
        self.round += 1;
        let tokens = forced_block(&self.continuation, k, real.tokens.len(), accept, self.vocab);
        Ok(Proposal { tokens, q: None })
    }
    fn commit(
        &mut self,
        tokens: &[u32],
        pos: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.inner.commit(tokens, pos, taps)
    }
    fn draft_vocab_len(&self) -> Option<usize> {
        self.inner.draft_vocab_len()
    }
    fn fit_prompt(&mut self, target: &Transformer<B>, prompt: &[u32]) -> Result<(), EngineError> {
        self.inner.fit_prompt(target, prompt)
    }
    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn take_state(&mut self) -> DrafterState<B> {
        self.inner.take_state()
    }
    fn put_state(&mut self, state: DrafterState<B>) {
        self.inner.put_state(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_means_tau() {
        assert_eq!(accept_pattern(2.0, 4), vec![2, 2, 2, 2]);
        assert_eq!(accept_pattern(4.0, 3), vec![4, 4, 4]);
        let p = accept_pattern(6.5, 10);
        assert!(p.iter().all(|&n| n == 6 || n == 7), "{p:?}");
        assert_eq!(p.iter().sum::<usize>(), 65);
        for r in 1..=10 {
            let mean = p[..r].iter().sum::<usize>() as f64 / r as f64;
            assert!((mean - 6.5).abs() <= 0.5 / r as f64 + 1e-9, "{r}: {mean}");
        }
        assert_eq!(accept_pattern(0.3, 2), vec![1, 1]);
    }

    /// Greedy verification of the forced block against the continuation commits exactly
    /// `accept` tokens (drafts accepted up to the first mismatch, plus one).
    #[test]
    fn forced_block_commits_accept_tokens() {
        let cont: Vec<u32> = (100..140).collect();
        for accept in 1..=8 {
            let k = 3;
            let d = forced_block(&cont, k, 7, accept, 1000);
            assert_eq!(d.len(), 7);
            // the target's greedy pick after draft j is cont[k + 1 + j]
            let accepted = d
                .iter()
                .enumerate()
                .take_while(|(j, &t)| t == cont[k + 1 + j])
                .count();
            assert_eq!(accepted + 1, accept.min(8), "accept {accept}");
        }
        // past the end: token 0, and the wrong token wraps inside the vocabulary
        assert_eq!(forced_block(&[5, 9], 1, 2, 1, 1), vec![0, 0]);
    }
}
