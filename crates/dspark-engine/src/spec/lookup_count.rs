//! How many drafts a round verifies when prompt lookup ([`super::prompt_lookup`]) has drafts
//! after the first and a draft-count budget ([`super::draft_budget`]) chooses the counts.
//!
//! Lookup drafts are accepted at rates of their own, which depend on how long the match that
//! found them was. In an exact greedy walk of the demo's drafters over 40 + 40 held-out prompts
//! (2-core CPU costs: a verified draft adds about 0.16 of a decode step;
//! `scripts/train/lookup_count_walk.py`, `bench-results/smollm2-lookup-count-walk.json`), lookup
//! drafts after a match of the pair alone lost to the drafter's own at every count, while after
//! a match of three or more tokens they paid for a full block where the drafter's best was 2-3
//! drafts (HumanEval: 14% more tokens per unit of round cost). So
//! the budget keeps the lookup's acceptance per draft position apart for the two kinds of
//! match, and after a first draft with a match chooses between the drafter's count (its own
//! drafts) and the lookup's best count, by expected tokens per second of round time.
//!
//! Exactness: the choice is a function of finished rounds and of the context through the first
//! draft (which decides the match), never of the drafts it chooses between. Greedy output is
//! the target's whatever it picks; for sampling, drafts whose number and values are fixed once
//! the first draft is drawn are a stopping rule on drawn drafts, under which each position's
//! acceptance test stays exact (as with DSpark's confidence cut).

use super::draft_budget::{chained_rates, halve, DraftBudget, EXPLORE_EVERY};
use super::prompt_lookup::NGRAM;

/// Kinds of match whose acceptance is kept apart: the pair alone (0) and longer (1).
pub const BUCKETS: usize = 2;

/// The kind of a match of `matched` tokens.
pub fn bucket(matched: usize) -> usize {
    usize::from(matched > NGRAM)
}

/// Per kind of match and draft position (1 up to the block; position 0 is the drafter's):
/// rounds that verified a lookup draft there with every earlier draft accepted, and how many
/// of those accepted it.
#[derive(Clone, Debug)]
pub struct LookupRates {
    tried: [Vec<f64>; BUCKETS],
    accepted: [Vec<f64>; BUCKETS],
}

impl LookupRates {
    pub fn new(block: usize) -> Self {
        let zeros = || vec![0.0; block.max(1)];
        LookupRates {
            tried: [zeros(), zeros()],
            accepted: [zeros(), zeros()],
        }
    }

    /// Halves every count (the budget's half-life).
    pub fn halve(&mut self) {
        for v in self.tried.iter_mut().chain(self.accepted.iter_mut()) {
            halve(v);
        }
    }

    /// Records a round of `drafted` drafts, the first the drafter's, `accepted` accepted.
    pub fn observe(&mut self, bucket: usize, drafted: usize, accepted: usize) {
        let (tried, acc) = (&mut self.tried[bucket], &mut self.accepted[bucket]);
        let drafted = drafted.min(tried.len());
        for t in tried.iter_mut().take(drafted.min(accepted + 1)).skip(1) {
            *t += 1.0;
        }
        for a in acc.iter_mut().take(accepted.min(drafted)).skip(1) {
            *a += 1.0;
        }
    }

    /// Estimated acceptance of lookup drafts at positions 1, 2, .. given every earlier draft
    /// was accepted: the counts with two pseudo-rounds at the previous position's estimate (1/2
    /// before the first), as the budget estimates the drafter's.
    pub fn rates(&self, bucket: usize) -> impl Iterator<Item = f64> + '_ {
        chained_rates(&self.accepted[bucket][1..], &self.tried[bucket][1..])
    }
}

impl DraftBudget {
    /// Drafts for a round whose first draft (one of `own` the drafter made, as this budget
    /// chose) is followed by `available` lookup drafts from a match of kind `bucket`: the
    /// lookup's best count (2 or more, at most `cap`, the block and `available + 1`), or
    /// `None` to keep the drafter's drafts where they promise more tokens per second. Every
    /// [`EXPLORE_EVERY`]-th round takes the lookup anyway, so that its acceptance stays measured.
    pub fn choose_lookup(
        &self,
        cap: usize,
        own: usize,
        available: usize,
        bucket: usize,
    ) -> Option<usize> {
        let most = cap.clamp(1, self.block()).min(available + 1);
        if most < 2 {
            return None;
        }
        if self.warming_up() {
            return Some(most);
        }
        let r0 = self.accept_rate(0);
        let (mut run, mut tokens) = (r0, 1.0 + r0);
        let mut best: Option<(usize, f64)> = None;
        for (k, rate) in (2..=most).zip(self.lookup.rates(bucket)) {
            run *= rate;
            tokens += run;
            let Some(c) = self.round_cost(k) else {
                return Some(most);
            };
            let score = tokens / c.max(1e-9);
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((k, score));
            }
        }
        let (k, score) = best?;
        let theirs = self
            .round_cost(own)
            .map(|c| self.expected_tokens(own) / c.max(1e-9));
        let explore = self.rounds() % EXPLORE_EVERY == EXPLORE_EVERY / 2;
        match theirs {
            Some(s) if own >= 1 && s >= score && !explore => None,
            _ => Some(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget past its warm-up whose rounds cost `1 + 0.16 k` plain steps, whose drafter's
    /// first draft is accepted 3 times in 5 and its second half the time after that.
    fn budget(block: usize) -> DraftBudget {
        let mut b = DraftBudget::with_synthetic_cost(block, |k| 1.0 + 0.16 * k as f64);
        for i in 0..400 {
            let k = (i % block) + 1;
            b.observe(k, [2, 1, 0, 2, 0][i % 5].min(k), f64::NAN);
        }
        b
    }

    #[test]
    fn long_matches_that_hold_get_long_rounds_and_poor_ones_none() {
        let mut b = budget(7);
        // matches of 3+ tokens: the lookup's drafts accepted but for half of its second
        for _ in 0..200 {
            b.observe_round(7, 7, f64::NAN, Some(1));
            b.observe_round(7, 2, f64::NAN, Some(1));
        }
        // pair-only matches: the lookup's first draft is rejected 4 times in 5
        for i in 0..200 {
            b.observe_round(3, if i % 5 == 0 { 2 } else { 1 }, f64::NAN, Some(0));
        }
        let steady = |b: &mut DraftBudget| {
            while b.rounds() % EXPLORE_EVERY == EXPLORE_EVERY / 2 {
                b.observe(1, 0, f64::NAN);
            }
        };
        steady(&mut b);
        assert_eq!(b.choose_lookup(7, 2, 10, 1), Some(7));
        assert_eq!(
            b.choose_lookup(7, 2, 3, 1),
            Some(4),
            "no more than the lookup has"
        );
        assert_eq!(
            b.choose_lookup(4, 2, 10, 1),
            Some(4),
            "nor more than the cap"
        );
        assert_eq!(b.choose_lookup(7, 2, 10, 0), None, "pair-only matches lose");
        assert_eq!(b.choose_lookup(7, 2, 0, 1), None, "nothing to add");
        // exploration takes the lookup's best count every EXPLORE_EVERY rounds
        while b.rounds() % EXPLORE_EVERY != EXPLORE_EVERY / 2 {
            b.observe(1, 0, f64::NAN);
        }
        assert!(b.choose_lookup(7, 2, 10, 0).is_some());
    }

    #[test]
    fn the_warm_up_takes_every_lookup_draft() {
        let b = DraftBudget::new(7);
        assert_eq!(b.choose_lookup(7, 1, 3, 0), Some(4));
        assert_eq!(b.choose_lookup(7, 1, 30, 1), Some(7));
        assert_eq!(b.choose_lookup(1, 1, 30, 1), None, "a cap of one draft");
    }

    #[test]
    fn lookup_rounds_count_their_first_draft_as_the_drafters() {
        let mut b = DraftBudget::new(4);
        // 10 rounds with the lookup: first draft accepted in all, the lookup's second in half
        for i in 0..10 {
            b.observe_round(4, 1 + usize::from(i % 2 == 0), f64::NAN, Some(1));
        }
        // drafter position 0: 10 of 10 (with the prior's two pseudo-rounds at 1/2)
        assert!((b.accept_rate(0) - 11.0 / 12.0).abs() < 1e-12);
        // the drafter's position 1 saw nothing from these rounds
        assert!((b.accept_rate(1) - b.accept_rate(0)).abs() < 1e-12);
        let r: Vec<f64> = b.lookup.rates(1).collect();
        assert!((r[0] - 6.0 / 12.0).abs() < 1e-12, "{r:?}");
        // position 2 was reached in the 5 rounds that accepted position 1, never accepted
        assert!((r[1] - (2.0 * r[0]) / 7.0).abs() < 1e-12, "{r:?}");
        assert!(
            b.lookup.rates(0).all(|x| x == 0.5),
            "the other bucket is untouched"
        );
    }
}
