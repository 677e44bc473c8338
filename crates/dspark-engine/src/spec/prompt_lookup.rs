//! Prompt lookup after the drafter's first draft: where the context through that draft ends
//! in a pair of tokens that occurred earlier, the drafts after it are the tokens that followed
//! the best earlier occurrence, instead of the drafter's own.
//!
//! The best occurrence is the one whose preceding tokens match the context's longest (up to
//! [`MAX_MATCH`] tokens, the latest on ties), among the pair's latest [`MAX_CANDIDATES`]
//! occurrences. The match length comes with the drafts: a draft-count budget keeps the
//! acceptance of pair-only matches apart from longer ones ([`super::lookup_count`]).
//!
//! Why this rule: `scripts/train/lookup_walk.py` measured it with the trained demo drafters
//! (`bench-results/smollm2-lookup-walk.json`). Replacing the drafter wherever a match exists
//! loses up to 0.17 tokens a round at 1-3 drafts; keeping the drafter's first draft never
//! loses at one draft and gains most at full blocks (+0.13 to +0.35 at 7 drafts, the latest
//! occurrence). Ranking occurrences by match length adds +0.19 / +0.20 tokens a round on
//! HumanEval at 7 drafts (DFlash b8 / DSpark b7, every held-out prompt, by dspark:
//! `bench-results/smollm2-lookup-longest-heldout-tau.json`) and +0.04 on MT-Bench.
//!
//! Exactness: a lookup draft is a function of the context, so its draft distribution is one-hot
//! (`q(d) = 1`). Verification then accepts it with probability `p(d)` and, on rejection, samples
//! from `p` without `d`: exact, as for any draft. Greedy verification compares ids as always.

use std::collections::HashMap;

use super::Proposal;

/// Tokens that must match before a continuation is copied.
pub const NGRAM: usize = 2;
/// Longest match measured when ranking occurrences.
pub const MAX_MATCH: usize = 16;
/// A pair's occurrences ranked per round, the latest first.
pub const MAX_CANDIDATES: usize = 64;

/// The prompt and every committed token, with the start positions of each pair in it.
#[derive(Debug, Default)]
pub struct LookupContext {
    ctx: Vec<u32>,
    starts: HashMap<(u32, u32), Vec<u32>>,
}

/// What the lookup found after a first draft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The tokens that followed the chosen occurrence (at least one).
    pub tokens: Vec<u32>,
    /// Tokens of the context's end (the first draft last) that the occurrence matched: at
    /// least [`NGRAM`], at most [`MAX_MATCH`].
    pub matched: usize,
}

impl LookupContext {
    /// A context holding `prompt`.
    pub fn new(prompt: &[u32]) -> Self {
        let mut c = LookupContext::default();
        c.extend(prompt);
        c
    }

    /// Appends committed tokens.
    pub fn extend(&mut self, tokens: &[u32]) {
        for &t in tokens {
            if let Some(&prev) = self.ctx.last() {
                let s = (self.ctx.len() - 1) as u32;
                self.starts.entry((prev, t)).or_default().push(s);
            }
            self.ctx.push(t);
        }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.ctx.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.ctx.is_empty()
    }

    /// With `first` appended to the context: the tokens (at most `max`) that followed the best
    /// earlier occurrence of its last pair, never past `first` itself; `None` without one.
    pub fn after(&self, first: u32, max: usize) -> Option<Found> {
        let n = self.ctx.len();
        if n == 0 || max == 0 {
            return None;
        }
        let list = self.starts.get(&(self.ctx[n - 1], first))?;
        // the context with `first` appended, without copying it
        let at = |i: usize| if i == n { first } else { self.ctx[i] };
        let mut best: Option<(usize, usize)> = None;
        for &s in list.iter().rev().take(MAX_CANDIDATES) {
            let s = s as usize;
            // tokens before the pair that also precede the context's last pair
            let before = (1..=MAX_MATCH - NGRAM)
                .take_while(|&i| i <= s && at(s - i) == at(n - 1 - i))
                .count();
            let m = NGRAM + before;
            if best.is_none_or(|(_, bm)| m > bm) {
                best = Some((s, m));
            }
        }
        let (s, matched) = best?;
        let from = s + NGRAM;
        let tokens = (from..(from + max).min(n + 1)).map(at).collect();
        Some(Found { tokens, matched })
    }
}

/// `proposal` with its drafts after the first replaced by `found` (`found.len() + 1` drafts in
/// all). Sampled proposals get a one-hot draft distribution over `vocab` ids for each lookup
/// draft; the first keeps the drafter's.
pub fn replace_after_first(proposal: &mut Proposal, found: &[u32], vocab: usize) {
    proposal.tokens.truncate(1);
    proposal.tokens.extend_from_slice(found);
    if let Some(q) = proposal.q.as_mut() {
        q.truncate(1);
        q.extend(found.iter().map(|&t| one_hot(t, vocab)));
    }
}

fn one_hot(t: u32, vocab: usize) -> Vec<f32> {
    let mut q = vec![0.0; vocab];
    q[t as usize] = 1.0;
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`LookupContext::after`] by a scan of the whole context.
    fn scan(ctx: &[u32], first: u32, max: usize) -> Option<Found> {
        let mut c = ctx.to_vec();
        c.push(first);
        let n = c.len();
        if n <= NGRAM || max == 0 {
            return None;
        }
        let key = &c[n - NGRAM..];
        let occ: Vec<usize> = (0..n - NGRAM)
            .rev()
            .filter(|&s| &c[s..s + NGRAM] == key)
            .take(MAX_CANDIDATES)
            .collect();
        let len = |s: usize| {
            let mut m = NGRAM;
            while m < MAX_MATCH && m <= s + 1 && c[s + NGRAM - 1 - m] == c[n - 1 - m] {
                m += 1;
            }
            m
        };
        let s = *occ.iter().max_by_key(|&&s| (len(s), s))?;
        Some(Found {
            tokens: c[s + NGRAM..(s + NGRAM + max).min(n)].to_vec(),
            matched: len(s),
        })
    }

    fn after(ctx: &[u32], first: u32, max: usize) -> Option<Found> {
        LookupContext::new(ctx).after(first, max)
    }

    #[test]
    fn takes_the_occurrence_with_the_longest_match() {
        // context ... 5 | first 6: "5 6" at 1 (after 4) and at 5 (after 8); the context's end
        // is "4 5 6", so the occurrence at 1 matches three tokens and wins over the latest
        let ctx = [4, 5, 6, 7, 8, 5, 6, 9, 1, 4, 5];
        let f = after(&ctx, 6, 3).unwrap();
        assert_eq!(
            f,
            Found {
                tokens: vec![7, 8, 5],
                matched: 3
            }
        );
        // without the longer match the latest occurrence wins
        let ctx = [4, 5, 6, 7, 8, 5, 6, 9, 1, 3, 5];
        let f = after(&ctx, 6, 4).unwrap();
        assert_eq!(
            f,
            Found {
                tokens: vec![9, 1, 3, 5],
                matched: 2
            }
        );
    }

    #[test]
    fn continuation_stops_at_the_first_draft() {
        // "5 6" at 1 is followed by 2 5 and then the first draft 6 itself
        let f = after(&[3, 5, 6, 2, 5], 6, 8).unwrap();
        assert_eq!(f.tokens, vec![2, 5, 6]);
        // the pair overlapping itself: 7 7 | 7 -> the pair at 1 is followed by the first draft
        assert_eq!(after(&[7, 7], 7, 3).unwrap().tokens, vec![7]);
    }

    #[test]
    fn no_match_no_drafts() {
        assert!(after(&[1, 2, 3], 4, 4).is_none());
        assert!(after(&[], 2, 4).is_none());
        assert!(after(&[1, 2, 1], 2, 0).is_none());
        // one token of the pair alone is no match
        assert!(after(&[1, 9, 2, 1, 3], 2, 4).is_none());
    }

    #[test]
    fn the_index_agrees_with_a_scan_and_grows_with_the_context() {
        // small alphabets, so that pairs repeat often (past MAX_CANDIDATES) and matches run long
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |k: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % k) as u32
        };
        for alphabet in [2u64, 3, 5, 20] {
            let mut c = LookupContext::new(&[]);
            let mut ctx = Vec::new();
            for step in 0..600 {
                let t = next(alphabet);
                let grow = 1 + (step % 3) as usize;
                for first in 0..alphabet as u32 {
                    let max = 1 + (step % 9) as usize;
                    assert_eq!(
                        c.after(first, max),
                        scan(&ctx, first, max),
                        "at {}",
                        ctx.len()
                    );
                }
                let more: Vec<u32> = std::iter::once(t)
                    .chain((1..grow).map(|_| next(alphabet)))
                    .collect();
                c.extend(&more);
                ctx.extend_from_slice(&more);
                assert_eq!(c.len(), ctx.len());
            }
        }
    }

    #[test]
    fn replace_after_first_keeps_the_first_draft_and_its_distribution() {
        let mut p = Proposal {
            tokens: vec![6, 2, 2, 2],
            q: Some(vec![vec![0.25; 10]; 4]),
        };
        replace_after_first(&mut p, &[7, 8, 5, 1], 10);
        assert_eq!(p.tokens, vec![6, 7, 8, 5, 1]);
        let q = p.q.unwrap();
        assert_eq!(q.len(), 5);
        assert_eq!(q[0], vec![0.25; 10], "the drafter's own first distribution");
        for (row, &t) in q[1..].iter().zip(&[7u32, 8, 5, 1]) {
            assert_eq!(row.iter().sum::<f32>(), 1.0);
            assert_eq!(row[t as usize], 1.0);
        }
        let mut p = Proposal {
            tokens: vec![6, 2, 2, 2],
            q: None,
        };
        replace_after_first(&mut p, &[7], 10);
        assert_eq!(p.tokens, vec![6, 7]);
    }
}
