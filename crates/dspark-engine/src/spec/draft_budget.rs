//! Cost-aware draft count for the parallel drafters (DFlash, DSpark) when none is configured:
//! before each round, pick how many drafts to verify so that the expected committed tokens per
//! second is highest, from this drafter's measured acceptance at each draft position and the
//! measured wall time of rounds at each draft count.
//!
//! A count of 0 is a plain target step (the drafter still reads the new token's features):
//! where no count pays for its verify rows, the speculative mode then runs at the baseline's
//! speed, and every [`EXPLORE_EVERY`]-th round still tries a draft to notice a change.
//!
//! Why: a round verifying k drafts feeds k + 1 rows to the target. On a GPU the extra rows are
//! nearly free, so the full block wins; on a 2-core CPU an f32 verify of 16 rows costs about
//! three decode steps while a small drafter's deep drafts are rarely accepted, so the full
//! block loses to the baseline. Measuring both sides picks the right count on each machine,
//! and follows it when the machine gets busier.
//!
//! Exactness: the count depends only on finished rounds (their sizes, accept counts and
//! times), never on the round being drafted, so greedy output is the target's whatever the
//! count, and speculative sampling stays an exact sample (the acceptance rule is exact for any
//! draft length fixed before drafting).
//!
//! Where the output may not depend on timing (a seeded sampled request must draw the same
//! tokens on every run), [`DraftBudget::with_prior_cost`] makes a budget for one request whose
//! round costs come from a fixed per-backend prior instead of the clock: its counts follow the
//! request's own acceptance alone, so the same request and seed give the same rounds.

use super::lookup_count::LookupRates;

/// Draft counts every budget tries once before it trusts its estimates (capped at the block).
const WARM_UP: [usize; 8] = [1, 2, 3, 4, usize::MAX, 0, 0, 0];
/// One round in this many tries a neighbour of the current best, one draft more and one
/// fewer in turn, so that acceptance deeper in the block and the costs on both sides stay
/// measured (one early, noisy measurement cannot rule a count out for good).
pub(super) const EXPLORE_EVERY: u64 = 8;
/// Every this many explorations re-measures a plain step (0 drafts) instead of a neighbour,
/// when the best count is 2 or more: otherwise the plain step's cost, measured a few times
/// during warm-up, would never be refreshed once drafting looked better (a slow warm-up
/// step then kept a draft model drafting at 0.82x of its baseline).
const PLAIN_EVERY: u64 = 3;
/// Where the best count promises at least this much more than a plain step (tokens per
/// second), plain steps are re-timed only every [`PLAIN_EVERY_CLEAR`] explorations: each
/// re-timing is a run of [`PLAIN_RUN`] steps that commit one token each, about 11% of the
/// rounds at [`PLAIN_EVERY`] (measured on the demo's CPU: 66 of 521 rounds, where a round with
/// drafts gave 2.4 tokens). A plain-step estimate 25% too high would still be corrected within
/// [`EXPLORE_EVERY`] x [`PLAIN_EVERY_CLEAR`] rounds.
const CLEAR_LEAD: f64 = 0.25;
const PLAIN_EVERY_CLEAR: u64 = 9;
/// A count with drafts must promise this much more than a plain step's tokens per second to
/// be chosen over it: within the estimates' noise, plain steps cost the machine less.
const DRAFT_MARGIN: f64 = 0.05;
/// Plain steps come in runs of at least this many, and the first of a run (right after a
/// round with drafts) is not timed: it pays for the switch (caches that the drafter's work
/// just filled), which steady plain steps do not. Timed that way, plain steps looked 20%
/// dearer than the baseline's on the demo (9.6 against 8.0 ms) and lost to drafting that was
/// itself slower than the baseline.
const PLAIN_RUN: u32 = 3;
/// Weight of the newest round in a draft count's mean round time.
const COST_EMA: f64 = 0.2;
/// Acceptance counts are halved once this many rounds were counted at position 0, so the
/// estimates follow a change of prompt domain without forgetting everything.
const COUNT_HALF_LIFE: f64 = 512.0;

/// Acceptance estimates of consecutive draft positions from their counts (`accepted[i]` of
/// `tried[i]`), each with two pseudo-rounds at the previous position's estimate (1/2 before
/// the first): a position seldom tried is taken to be about as good as the one before it.
pub(super) fn chained_rates<'a>(
    accepted: &'a [f64],
    tried: &'a [f64],
) -> impl Iterator<Item = f64> + 'a {
    let mut rate = 0.5;
    accepted.iter().zip(tried).map(move |(a, t)| {
        rate = (a + 2.0 * rate) / (t + 2.0);
        rate
    })
}

/// Halves every count in `v` (the budget's half-life).
pub(super) fn halve(v: &mut [f64]) {
    v.iter_mut().for_each(|x| *x *= 0.5);
}

/// The measured state of one drafter's rounds (kept across requests by the pipeline).
#[derive(Clone, Debug)]
pub struct DraftBudget {
    block: usize,
    /// Per draft position i: rounds that verified it with every earlier draft accepted, and
    /// how many of those accepted it.
    tried: Vec<f64>,
    accepted: Vec<f64>,
    /// Mean wall seconds of a round by drafts verified (index k; 0: a plain target step).
    cost: Vec<Option<f64>>,
    /// Rounds observed by drafts verified (index k).
    by_count: Vec<u64>,
    rounds: u64,
    /// Plain steps observed in a row up to the last round.
    plain_streak: u32,
    /// Round costs from a fixed rule instead of the clock (deterministic choices).
    synthetic: Option<RoundCost>,
    /// Acceptance of prompt-lookup drafts ([`super::lookup_count`]).
    pub(super) lookup: LookupRates,
}

/// A fixed rule for a round's cost by drafts verified, in any unit (a plain step's cost is
/// what the others are compared with).
#[derive(Clone, Copy, Debug)]
enum RoundCost {
    Fn(fn(usize) -> f64),
    /// `1 + row * (k + 1)` for k drafts (the draft rows and their verify rows together), 1 for a
    /// plain step.
    PerRow(f64),
}

impl RoundCost {
    fn of(self, k: usize) -> f64 {
        match self {
            RoundCost::Fn(f) => f(k),
            RoundCost::PerRow(_) if k == 0 => 1.0,
            RoundCost::PerRow(row) => 1.0 + row * (k + 1) as f64,
        }
    }
}

impl DraftBudget {
    /// A budget for a drafter whose block holds `block` drafts.
    pub fn new(block: usize) -> Self {
        let block = block.max(1);
        DraftBudget {
            block,
            tried: vec![0.0; block],
            accepted: vec![0.0; block],
            cost: vec![None; block + 1],
            by_count: vec![0; block + 1],
            rounds: 0,
            plain_streak: 0,
            synthetic: None,
            lookup: LookupRates::new(block),
        }
    }

    /// A budget whose round costs come from `cost(k)` rather than measured time, so that its
    /// choices are a function of acceptance alone (reproducible tests).
    pub fn with_synthetic_cost(block: usize, cost: fn(usize) -> f64) -> Self {
        DraftBudget {
            synthetic: Some(RoundCost::Fn(cost)),
            ..DraftBudget::new(block)
        }
    }

    /// A budget for one request whose output may not depend on timing: a round with k drafts
    /// is taken to cost `1 + row_cost * (k + 1)` plain steps (`Backend::spec_row_cost`), so
    /// its choices follow this request's acceptance alone. It starts from its best guess
    /// instead of the warm-up's visits (which measure costs a prior does not need), and
    /// still explores a neighbour every [`EXPLORE_EVERY`] rounds to learn acceptance.
    pub fn with_prior_cost(block: usize, row_cost: f64) -> Self {
        let row = if row_cost.is_finite() {
            row_cost.max(0.0)
        } else {
            1.0
        };
        let mut b = DraftBudget {
            synthetic: Some(RoundCost::PerRow(row)),
            ..DraftBudget::new(block)
        };
        for k in 0..=b.block {
            b.cost[k] = Some(RoundCost::PerRow(row).of(k));
        }
        b
    }

    /// Costs come from a prior ([`DraftBudget::with_prior_cost`]): no warm-up, and no plain
    /// steps run only to time them.
    fn costs_known(&self) -> bool {
        matches!(self.synthetic, Some(RoundCost::PerRow(_)))
    }

    /// The block this budget was made for.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Drafts to verify in the next round, at most `cap` (and the block); 0 for a plain
    /// target step.
    pub fn choose(&self, cap: usize) -> usize {
        let cap = cap.clamp(1, self.block);
        let r = self.rounds as usize;
        if r < WARM_UP.len() && !self.costs_known() {
            return WARM_UP[r].min(cap);
        }
        if (1..PLAIN_RUN).contains(&self.plain_streak) && !self.costs_known() {
            return 0;
        }
        let (best, lead) = self.best_and_lead(cap);
        let exploration = self.rounds / EXPLORE_EVERY;
        let plain_every = if lead >= 1.0 + CLEAR_LEAD {
            PLAIN_EVERY_CLEAR
        } else {
            PLAIN_EVERY
        };
        if !self.rounds.is_multiple_of(EXPLORE_EVERY) {
            best
        } else if best >= 2 && exploration.is_multiple_of(plain_every) && !self.costs_known() {
            0
        } else if exploration % 2 == 1 || best == 0 {
            (best + 1).min(cap)
        } else {
            best - 1
        }
    }

    /// Records a finished round: `drafted` drafts verified, `accepted` of them accepted, in
    /// `secs` of wall time (drafting and verifying; not finite: a round not to be timed, whose
    /// acceptance still counts).
    pub fn observe(&mut self, drafted: usize, accepted: usize, secs: f64) {
        self.observe_round(drafted, accepted, secs, None);
    }

    /// [`DraftBudget::observe`] for a round whose drafts after the first came from prompt
    /// lookup with a match of bucket `lookup` ([`super::lookup_count::bucket`]): its first
    /// draft counts as the drafter's, the rest as the lookup's.
    pub fn observe_round(
        &mut self,
        drafted: usize,
        accepted: usize,
        secs: f64,
        lookup: Option<usize>,
    ) {
        let drafted = drafted.min(self.block);
        let accepted = accepted.min(drafted);
        if self.tried[0] >= COUNT_HALF_LIFE {
            halve(&mut self.tried);
            halve(&mut self.accepted);
            self.lookup.halve();
        }
        let own = if lookup.is_some() {
            drafted.min(1)
        } else {
            drafted
        };
        for i in 0..(accepted + 1).min(own) {
            self.tried[i] += 1.0;
        }
        for a in &mut self.accepted[..accepted.min(own)] {
            *a += 1.0;
        }
        if let Some(b) = lookup {
            self.lookup.observe(b, drafted, accepted);
        }
        let secs = match self.synthetic {
            Some(rule) => rule.of(drafted),
            None => secs,
        };
        // the first plain step after drafting pays for the switch: not a steady step's cost
        let switch = drafted == 0 && self.plain_streak == 0 && self.rounds > 0;
        self.plain_streak = if drafted == 0 {
            self.plain_streak.saturating_add(1)
        } else {
            0
        };
        if secs.is_finite() && secs > 0.0 && !switch {
            let c = &mut self.cost[drafted];
            *c = Some(match *c {
                Some(old) => old + COST_EMA * (secs - old),
                None => secs,
            });
        }
        self.by_count[drafted] += 1;
        self.rounds += 1;
    }

    /// Rounds observed so far by drafts verified (index k; 0: plain target steps).
    pub fn rounds_by_count(&self) -> &[u64] {
        &self.by_count
    }

    /// Rounds observed so far (every kind).
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Estimated probability that draft `i` is accepted given that every earlier one was:
    /// the counts with two pseudo-rounds at the previous position's estimate (1/2 for the
    /// first), so a position seldom tried is taken to be about as good as the one before it
    /// (deep acceptance is learned in a few rounds, not one neighbour at a time).
    pub fn accept_rate(&self, i: usize) -> f64 {
        self.rates()
            .nth(i.min(self.block - 1))
            .expect("one rate per position")
    }

    /// [`DraftBudget::accept_rate`] of positions 0, 1, .. in turn, each built on the last.
    fn rates(&self) -> impl Iterator<Item = f64> + '_ {
        chained_rates(&self.accepted, &self.tried)
    }

    /// Expected tokens a round with `k` drafts commits (accepted drafts + 1).
    pub fn expected_tokens(&self, k: usize) -> f64 {
        let mut run = 1.0;
        let mut total = 1.0;
        for rate in self.rates().take(k) {
            run *= rate;
            total += run;
        }
        total
    }

    /// Whether round costs come from the clock and the warm-up's visits are not over yet.
    pub(super) fn warming_up(&self) -> bool {
        (self.rounds as usize) < WARM_UP.len() && !self.costs_known()
    }

    /// Estimated wall seconds of a round with `k` drafts: measured where it was, else
    /// interpolated between the nearest measured counts (extrapolated along the last two
    /// beyond them). `None` before any round was timed.
    pub fn round_cost(&self, k: usize) -> Option<f64> {
        if let Some(c) = self.cost.get(k).copied().flatten() {
            return Some(c);
        }
        let measured = |j: usize| self.cost[j].map(|c| (j, c));
        let below = (0..k.min(self.block + 1)).rev().find_map(measured);
        let above = (k + 1..=self.block).find_map(measured);
        let line = |(x0, y0): (usize, f64), (x1, y1): (usize, f64)| {
            let slope = (y1 - y0) / (x1 as f64 - x0 as f64);
            y0 + slope * (k as f64 - x0 as f64)
        };
        match (below, above) {
            (Some(lo), Some(hi)) => Some(line(lo, hi)),
            (Some(lo), None) => match (0..lo.0).rev().find_map(measured) {
                // never cheaper than the longest measured round
                Some(prev) => Some(line(prev, lo).max(lo.1)),
                None => Some(lo.1),
            },
            (None, Some(hi)) => Some(hi.1),
            (None, None) => None,
        }
    }

    /// The draft count with the most expected tokens per second of round time; 0 unless a
    /// count with drafts beats it by [`DRAFT_MARGIN`].
    #[cfg(test)]
    fn best(&self, cap: usize) -> usize {
        self.best_and_lead(cap).0
    }

    /// The best count (`DraftBudget::best`), and how many times a plain step's tokens per second the best
    /// count with drafts promises (1 where either is unknown).
    fn best_and_lead(&self, cap: usize) -> (usize, f64) {
        let mut best = (cap, f64::MIN);
        let mut plain = f64::MIN;
        // expected_tokens(k), built up as k grows (the same sums in the same order)
        let (mut run, mut tokens) = (1.0, 1.0);
        let mut rates = self.rates();
        for k in 0..=cap {
            let Some(c) = self.round_cost(k) else {
                return (cap, 1.0);
            };
            if k > 0 {
                run *= rates.next().expect("cap is within the block");
                tokens += run;
            }
            let score = tokens / c.max(1e-9);
            if k == 0 {
                plain = score;
            } else if score > best.1 {
                best = (k, score);
            }
        }
        let lead = if plain > 0.0 { best.1 / plain } else { 1.0 };
        if best.1 > plain * (1.0 + DRAFT_MARGIN) {
            (best.0, lead)
        } else {
            (0, lead)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds whose acceptance follows per-position rates `p` (deterministically: draft i is
    /// accepted in round r when the running fraction stays below p_i).
    fn drive(b: &mut DraftBudget, rounds: usize, p: &[f64], cost: impl Fn(usize) -> f64) {
        let mut counts = vec![(0usize, 0usize); p.len()];
        for _ in 0..rounds {
            let k = b.choose(usize::MAX);
            let mut acc = 0;
            while acc < k {
                let (t, a) = counts[acc];
                let take = ((a + 1) as f64) <= p[acc] * (t + 1) as f64;
                counts[acc] = (t + 1, a + usize::from(take));
                if !take {
                    break;
                }
                acc += 1;
            }
            b.observe(k, acc, cost(k));
        }
    }

    #[test]
    fn warm_up_visits_short_counts_and_the_full_block() {
        let mut b = DraftBudget::new(15);
        let mut seen = vec![];
        for _ in 0..8 {
            let k = b.choose(usize::MAX);
            seen.push(k);
            b.observe(k, 0, 1.0);
        }
        assert_eq!(seen, vec![1, 2, 3, 4, 15, 0, 0, 0]);
        // a cap below the block clamps every choice
        let mut b = DraftBudget::new(15);
        for k in [1, 2, 3, 4] {
            b.observe(k, 0, 1.0);
        }
        assert_eq!(b.choose(3), 3);
        assert_eq!(DraftBudget::new(2).choose(usize::MAX), 1);
    }

    #[test]
    fn steep_verify_cost_and_shallow_acceptance_choose_short_rounds() {
        // CPU-like: each verified draft adds 25% of a plain step; acceptance 0.45, 0.35, 0.1
        let mut b = DraftBudget::new(15);
        let p = [
            0.45, 0.35, 0.1, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ];
        drive(&mut b, 400, &p, |k| 1.0 + 0.25 * k as f64);
        let picks: Vec<usize> = (0..8).map(|_| b.best(15)).collect();
        assert!(picks.iter().all(|&k| (1..=2).contains(&k)), "{picks:?}");
        assert!(b.accept_rate(0) > 0.4 && b.accept_rate(0) < 0.5);
    }

    #[test]
    fn where_no_draft_count_pays_rounds_become_plain_steps_that_still_explore() {
        // one verified draft costs 1.6 plain steps and is accepted 30% of the time
        let mut b = DraftBudget::new(7);
        drive(&mut b, 400, &[0.3; 7], |k| {
            if k == 0 {
                1.0
            } else {
                1.4 + 0.3 * k as f64
            }
        });
        assert_eq!(b.best(7), 0);
        let mut ks = vec![];
        for r in 0..16 {
            let k = b.choose(usize::MAX);
            ks.push(k);
            b.observe(
                k,
                usize::from(r % 3 == 0).min(k),
                if k == 0 { 1.0 } else { 1.7 },
            );
        }
        let plain = ks.iter().filter(|&&k| k == 0).count();
        assert!((12..16).contains(&plain), "{ks:?}");
        assert!(ks.contains(&1), "still explores: {ks:?}");
        assert_eq!(b.expected_tokens(0), 1.0);
    }

    #[test]
    fn a_slow_first_plain_step_is_measured_again_and_wins_back() {
        // drafts accepted 95% of the time, but a round with drafts costs 3 plain steps plus
        // 0.6 per draft: the full block's 7.6 tokens in 7.8 steps lose to plain steps. The
        // warm-up's one plain step ran 3x slow; neighbours of the best (the full block) never
        // include 0, so only the periodic plain re-measurement can correct it.
        let first = std::cell::Cell::new(true);
        let mut b = DraftBudget::new(8);
        drive(&mut b, 1000, &[0.95; 8], |k| match k {
            0 if first.replace(false) => 3.0,
            0 => 1.0,
            k => 3.0 + 0.6 * k as f64,
        });
        assert_eq!(b.best(8), 0, "{:?}", b.rounds_by_count());
        assert!((b.round_cost(0).unwrap() - 1.0).abs() < 0.05);
    }

    #[test]
    fn plain_steps_are_timed_in_runs_without_the_switch() {
        // the first plain step after drafting costs 1.5 steps (cold caches), steady ones 1.0;
        // drafts accepted 90%, a round with k drafts costs 1.6 + 0.55 k: drafting gives
        // 0.85-0.88 tokens per step, below steady plain steps but above plain steps timed
        // with their switch. Plain steps must win, and come in runs.
        let last = std::cell::Cell::new(1usize);
        let mut b = DraftBudget::new(8);
        drive(&mut b, 2000, &[0.9; 8], |k| {
            let c = match k {
                0 if last.get() > 0 => 1.5,
                0 => 1.0,
                k => 1.6 + 0.55 * k as f64,
            };
            last.set(k);
            c
        });
        assert_eq!(b.best(8), 0, "{:?}", b.rounds_by_count());
        assert!((b.round_cost(0).unwrap() - 1.0).abs() < 1e-9);
        // where drafting wins, the periodic plain re-measurements are runs of PLAIN_RUN
        let mut b = DraftBudget::with_synthetic_cost(8, |k| if k == 0 { 1.0 } else { 1.2 });
        let mut ks = vec![];
        for _ in 0..800 {
            let k = b.choose(8);
            ks.push(k);
            b.observe(k, k, 1.0);
        }
        assert_eq!(b.best(8), 8);
        let mut runs = vec![];
        for i in 9..ks.len() {
            if ks[i - 1] > 0 && ks[i] == 0 {
                runs.push(ks[i..].iter().take_while(|&&k| k == 0).count());
            }
        }
        assert!(runs.len() >= 5, "{ks:?}");
        assert!(runs.iter().all(|&r| r == PLAIN_RUN as usize), "{runs:?}");
    }

    #[test]
    fn a_clear_lead_re_times_plain_steps_less_often() {
        // every round costs 1.2 plain steps, whatever its drafts. Acceptance 1.0: 9 tokens a
        // round (lead 7.5), plain runs PLAIN_EVERY_CLEAR explorations apart; acceptance 0.3:
        // about 1.43 tokens (lead 1.19 < 1.25), PLAIN_EVERY apart. The full block is the best
        // count in both.
        for (p, every) in [(1.0, PLAIN_EVERY_CLEAR), (0.3, PLAIN_EVERY)] {
            let mut b = DraftBudget::with_synthetic_cost(8, |k| if k == 0 { 1.0 } else { 1.2 });
            drive(&mut b, 3000, &[p; 8], |_| 1.0);
            let n = b.rounds_by_count()[0] as usize;
            assert_eq!(b.best(8), 8, "p {p}");
            // each re-timing is a run of PLAIN_RUN plain steps
            let want = 3000 / (EXPLORE_EVERY * every) as usize * PLAIN_RUN as usize;
            assert!(
                n + 8 >= want && n <= want + 8,
                "p {p}: {n} plain steps, want about {want}: {:?}",
                b.rounds_by_count()
            );
        }
    }

    #[test]
    fn drafting_must_beat_plain_steps_by_a_margin() {
        // every count with drafts is 2% better than plain steps: within the margin
        let mut b = DraftBudget::with_synthetic_cost(4, |_| 1.0);
        for _ in 0..50 {
            b.observe(0, 0, 1.0);
        }
        // one draft accepted 2% of the time: 1.02 tokens per round at a plain step's cost
        for r in 0..400 {
            b.observe(1, usize::from(r % 50 == 0), 1.0);
        }
        assert!(b.expected_tokens(1) > 1.0 && b.expected_tokens(1) < 1.05);
        assert_eq!(b.best(4), 0);
        // 20% acceptance is a clear gain
        for r in 0..400 {
            b.observe(1, usize::from(r % 5 == 0), 1.0);
        }
        assert!(b.best(4) > 0);
    }

    #[test]
    fn flat_verify_cost_and_deep_acceptance_choose_the_full_block() {
        // GPU-like: 16 rows cost 1.1x one row; drafts accepted 90% at every depth
        let mut b = DraftBudget::new(15);
        drive(&mut b, 400, &[0.9; 15], |k| 1.0 + 0.1 * k as f64 / 15.0);
        assert_eq!(b.best(15), 15);
        assert!(b.expected_tokens(15) > 6.0);
    }

    #[test]
    fn costs_interpolate_between_and_extrapolate_beyond_measured_counts() {
        let mut b = DraftBudget::new(16);
        assert_eq!(b.round_cost(3), None);
        b.observe(2, 0, 2.0);
        assert_eq!(b.round_cost(0), Some(2.0));
        assert_eq!(b.round_cost(8), Some(2.0));
        b.observe(6, 0, 4.0);
        assert_eq!(b.round_cost(4), Some(3.0));
        assert_eq!(b.round_cost(1), Some(2.0));
        assert_eq!(b.round_cost(10), Some(6.0));
        // a mean, not the last value
        b.observe(2, 0, 3.0);
        assert!((b.round_cost(2).unwrap() - 2.2).abs() < 1e-12);
        // nonsense times are ignored, truncated rounds count what was verified
        b.observe(3, 5, f64::NAN);
        assert_eq!(b.tried[..4], [4.0, 1.0, 1.0, 0.0]);
        assert_eq!(b.accepted[..4], [1.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn synthetic_costs_make_choices_reproducible() {
        fn cost(k: usize) -> f64 {
            1.0 + k as f64
        }
        let run = || {
            let mut b = DraftBudget::with_synthetic_cost(7, cost);
            let mut ks = vec![];
            for r in 0..64 {
                let k = b.choose(usize::MAX);
                ks.push(k);
                b.observe(k, (r * 7 % 5).min(k), 123.0 * r as f64);
            }
            ks
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.iter().all(|&k| k <= 7));
    }

    #[test]
    fn prior_costs_choose_by_the_requests_acceptance_alone() {
        // CPU-like prior: a round with k drafts costs 1 + 0.35 (k + 1) steps. Drafts accepted
        // 60% of the time do not pay: plain steps, with one draft every 8th round to learn
        let mut b = DraftBudget::with_prior_cost(7, 0.35);
        assert_eq!(b.round_cost(0), Some(1.0));
        assert!((b.round_cost(2).unwrap() - 2.05).abs() < 1e-12);
        let mut ks = vec![];
        let mut wall = 0.0;
        for r in 0..64 {
            let k = b.choose(usize::MAX);
            ks.push(k);
            // the clock is ignored: any times give the same choices
            wall += 0.37 * r as f64;
            b.observe(k, usize::from(r % 5 < 3).min(k), wall);
        }
        assert_eq!(ks.iter().filter(|&&k| k == 0).count(), 56, "{ks:?}");
        assert!(ks.iter().all(|&k| k <= 1), "{ks:?}");
        // drafts accepted 95% of the time pay even there
        let mut b = DraftBudget::with_prior_cost(7, 0.35);
        drive(&mut b, 200, &[0.95; 7], |_| 9.0);
        assert!(b.best(7) >= 4, "{:?}", b.rounds_by_count());
        // GPU-like prior: drafting from the first round on (4 drafts while every acceptance is
        // the prior's 1/2), then the full block once drafts are seen accepted deep
        let mut b = DraftBudget::with_prior_cost(15, 0.023);
        assert_eq!(b.best(15), 4);
        drive(&mut b, 200, &[0.9; 15], |_| 9.0);
        assert_eq!(b.best(15), 15, "{:?}", b.rounds_by_count());
        // the same request gives the same counts whatever the clock said
        let run = |t: f64| {
            let mut b = DraftBudget::with_prior_cost(7, 0.35);
            (0..100)
                .map(|r| {
                    let k = b.choose(7);
                    b.observe(k, (r * 3 % 4).min(k), t * r as f64);
                    k
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(0.001), run(5.0));
        // a nonsense prior is a dear one, never a free one
        assert_eq!(DraftBudget::with_prior_cost(7, f64::NAN).best(7), 0);
    }

    #[test]
    fn counts_halve_so_estimates_follow_a_change() {
        let mut b = DraftBudget::new(4);
        for _ in 0..600 {
            b.observe(1, 1, 1.0);
        }
        assert!(b.accept_rate(0) > 0.99);
        for _ in 0..600 {
            b.observe(1, 0, 1.0);
        }
        assert!(b.accept_rate(0) < 0.5, "{}", b.accept_rate(0));
    }
}
