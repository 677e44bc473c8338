//! Draft-length policy, in one place: how many drafts a round verifies by default, how long a
//! draft model's block is, and the [`SpecParams`] a launch or a live retune turns into. Pure
//! functions; the launcher, the pipeline and the worker all ask here.

use super::{Mode, SpecParams};
use crate::sampling::SamplingParams;

/// Longest block a draft model proposes in one round.
pub const MAX_DRAFT_MODEL_BLOCK: usize = 16;
/// Most drafts per round of a draft model when none is configured (it adapts below this).
pub const DEFAULT_DRAFT_MODEL_DRAFTS: usize = 8;
/// Drafts in the first round of an adaptive draft model: the full count, shortened by
/// evidence (on the demo, starting at 4 cost 0.4 tokens a round over 128-token answers).
pub const ADAPTIVE_START: usize = 8;
/// Fewest drafts an adaptive draft model proposes.
pub const ADAPTIVE_MIN: usize = 2;

/// How many drafts a draft model proposes per round: a configured fixed count, or (none
/// configured) a count that adapts to how much the last round accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftLen {
    Fixed(usize),
    Adaptive { start: usize, cap: usize },
}

impl From<usize> for DraftLen {
    fn from(n: usize) -> Self {
        DraftLen::Fixed(n)
    }
}

impl DraftLen {
    /// The most drafts a round can hold (the drafter's block).
    pub fn cap(self) -> usize {
        match self {
            DraftLen::Fixed(n) => n.max(1),
            DraftLen::Adaptive { cap, .. } => cap.max(1),
        }
    }
}

/// A draft model's draft length for a launch: adaptive up to
/// [`DEFAULT_DRAFT_MODEL_DRAFTS`] when `max_draft` is not configured, else fixed.
pub fn draft_len(mode: Mode, configured: Option<usize>) -> DraftLen {
    match (mode, configured) {
        (Mode::Draft, None) => DraftLen::Adaptive {
            start: ADAPTIVE_START,
            cap: DEFAULT_DRAFT_MODEL_DRAFTS,
        },
        _ => DraftLen::Fixed(drafter_block(mode, configured)),
    }
}

/// Prior weight, in drafts, of the starting count's acceptance rate in an adaptive draft
/// model's estimate (so one round cannot swing the count from end to end).
const ADAPTIVE_PRIOR: f64 = 4.0;
/// Drafts tallied after which an adaptive draft model's counts are halved, so its estimate
/// follows the recent part of a long answer.
const ADAPTIVE_MEMORY: f64 = 64.0;

/// This sequence's verified drafts, as an adaptive draft model counts them: per draft
/// position, whether it was verified with every earlier draft accepted (`tried`) and whether
/// it was accepted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AcceptanceTally {
    /// The count a fresh sequence starts from.
    start: usize,
    tried: f64,
    accepted: f64,
}

impl AcceptanceTally {
    /// A fresh sequence's tally, whose first count is `start`.
    pub fn new(start: usize) -> Self {
        AcceptanceTally {
            start: start.max(1),
            tried: 0.0,
            accepted: 0.0,
        }
    }

    /// The count a fresh sequence starts from.
    pub fn start(&self) -> usize {
        self.start
    }

    /// A round that proposed `drafted` drafts and had the first `accepted` of them accepted:
    /// every accepted draft was tried, and so was the rejected one after them.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        let accepted = accepted.min(drafted);
        self.accepted += accepted as f64;
        self.tried += (accepted + 1).min(drafted) as f64;
        if self.tried > ADAPTIVE_MEMORY {
            self.tried /= 2.0;
            self.accepted /= 2.0;
        }
    }

    /// Estimated chance that the next draft is accepted, given the earlier ones were: the
    /// tally's rate, pulled towards the starting count's by [`ADAPTIVE_PRIOR`] drafts.
    pub fn rate(&self) -> f64 {
        let s = self.start as f64;
        let prior = s / (s + 1.0);
        (self.accepted + ADAPTIVE_PRIOR * prior) / (self.tried + ADAPTIVE_PRIOR)
    }
}

/// An adaptive draft model's next draft count: the mean run of accepted drafts that the
/// tally's rate `p` predicts, `p / (1 - p)`, within `[ADAPTIVE_MIN, cap]` (a fresh tally gives
/// its starting count). The estimate spans the sequence's finished rounds, so a drafter that
/// agrees ~97% of the time (the demo's Q4_1 copy of its f32 target) keeps its full count
/// through an occasional early rejection, where following the last round alone (the rule this
/// replaces: one past its accepted count) dropped to 1-2 drafts and took rounds to climb back:
/// 6.6 tokens a round against 7.9 at the fixed full count. A drafter that agrees less stays
/// short and wastes fewer verify rows. The count depends only on finished rounds of this
/// sequence, never on the round being drafted or on timing, so greedy output, the exactness
/// of sampling and a seed's reproducibility are untouched; only the speed changes.
pub fn adaptive_draft_len(tally: &AcceptanceTally, cap: usize) -> usize {
    let p = tally.rate().clamp(0.0, 0.999);
    let run = (p / (1.0 - p)).round();
    let cap = cap.max(1);
    (run.min(cap as f64) as usize).clamp(ADAPTIVE_MIN.min(cap), cap)
}

/// Drafts verified per round when `max_draft` is not configured: "up to the drafter's block"
/// for every speculative mode (the checkpoint's block for DSpark/DFlash, a draft model's
/// [`DEFAULT_DRAFT_MODEL_DRAFTS`]), so that no configured count reads as the default.
pub fn default_max_draft(mode: Mode) -> usize {
    match mode {
        Mode::Baseline => 1,
        Mode::Draft | Mode::Dspark | Mode::Dflash => usize::MAX,
    }
}

/// Whether the speculative loop picks each round's draft count from measured acceptance and
/// round costs ([`super::draft_budget::DraftBudget`]), 0 (a plain target step) included: every
/// speculative mode when no count is configured; a configured count is kept. A draft model
/// whose drafts cost about what the target's steps cost (the demo's Q4_1 drafter beside its
/// exact packed f32 target on AVX-512) then runs at the baseline's speed instead of below it.
pub fn chooses_draft_count(mode: Mode, max_draft: usize) -> bool {
    mode != Mode::Baseline && max_draft == default_max_draft(mode)
}

/// Whether a request's output stays the same when its draft count follows measured costs
/// (which differ from run to run): greedy decoding on batch-invariant kernels (a verify row
/// then has a decode step's bits), and sampling without a seed. Elsewhere the pipeline gives
/// DFlash/DSpark a budget of the request's own on prior costs
/// (`DraftBudget::with_prior_cost`), so that the same seed gives the same tokens whatever ran
/// before it; a draft model keeps its per-sequence adaptive length.
pub fn count_may_vary(sampling: &SamplingParams, rows_batch_invariant: bool) -> bool {
    if sampling.is_greedy() {
        rows_batch_invariant
    } else {
        sampling.seed.is_none()
    }
}

/// How a request's rounds get their draft counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountRule {
    /// The configured count (or the drafter's own length) every round.
    Fixed,
    /// Measured acceptance and round times, in a budget kept across requests.
    Measured,
    /// A budget of this request alone on the backend's prior round cost.
    Prior,
}

/// The [`CountRule`] of a request: measured where the count may follow the clock
/// ([`count_may_vary`]), else a prior budget for the parallel drafters, whose rounds cost one
/// pass whatever their count (a draft model's drafts each cost a step, which the prior omits:
/// it keeps its per-sequence adaptive length); fixed where a count is configured.
pub fn count_rule(
    mode: Mode,
    max_draft: usize,
    sampling: &SamplingParams,
    rows_batch_invariant: bool,
) -> CountRule {
    if !chooses_draft_count(mode, max_draft) {
        CountRule::Fixed
    } else if count_may_vary(sampling, rows_batch_invariant) {
        CountRule::Measured
    } else if matches!(mode, Mode::Dspark | Mode::Dflash) {
        CountRule::Prior
    } else {
        CountRule::Fixed
    }
}

/// Drafts per round for a configured `max_draft` (at least one).
pub fn max_draft(mode: Mode, configured: Option<usize>) -> usize {
    configured.unwrap_or_else(|| default_max_draft(mode)).max(1)
}

/// The block a draft-model drafter is built with (DSpark/DFlash read theirs from the
/// checkpoint and ignore this).
pub fn drafter_block(mode: Mode, configured: Option<usize>) -> usize {
    match mode {
        Mode::Draft => configured
            .unwrap_or(DEFAULT_DRAFT_MODEL_DRAFTS)
            .clamp(1, MAX_DRAFT_MODEL_BLOCK),
        _ => MAX_DRAFT_MODEL_BLOCK,
    }
}

/// Whether prompt lookup fills each round's drafts after the first where the context has a
/// match ([`super::prompt_lookup`]): as configured, else where the backend's rows are
/// batch-invariant (`invariant`: our CPU and CUDA kernels), since a lookup round may verify
/// fewer rows than the drafter's and greedy identity then rests on rows whose bits do not
/// depend on the block. GPUs verify full blocks at little cost; on CPUs the draft-count budget
/// gives lookup rounds counts of their own ([`super::lookup_count`]): with them the demo's
/// drafters were faster in 11 of 12 alternated pairs on a 2-core Zen 4 (HumanEval +3-14%,
/// MT-Bench -3 to +17%; `bench-results/lookup-count-cpu-zen4.json`).
pub fn lookup(configured: Option<bool>, invariant: bool) -> bool {
    configured.unwrap_or(invariant)
}

/// The speculative loop's knobs. A negative or NaN threshold means off.
pub fn spec_params(
    mode: Mode,
    configured: Option<usize>,
    confidence_threshold: f32,
    lookup: bool,
) -> SpecParams {
    let t = if confidence_threshold.is_finite() {
        confidence_threshold.clamp(0.0, 1.0)
    } else {
        0.0
    };
    SpecParams {
        max_draft: max_draft(mode, configured),
        confidence_threshold: t,
        lookup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts after a run of rounds, each `(drafted, accepted)`.
    fn after(rounds: &[(usize, usize)], cap: usize) -> Vec<usize> {
        let mut t = AcceptanceTally::new(4);
        let mut out = vec![adaptive_draft_len(&t, cap)];
        for &(d, a) in rounds {
            t.record(d, a);
            out.push(adaptive_draft_len(&t, cap));
        }
        out
    }

    #[test]
    fn adaptive_length_follows_the_sequences_acceptance() {
        // a fresh sequence starts at its starting count, full rounds reach the cap at once
        assert_eq!(after(&[(4, 4), (8, 8)], 8), vec![4, 8, 8]);
        assert_eq!(
            adaptive_draft_len(&AcceptanceTally::new(ADAPTIVE_START), 8),
            8
        );
        // a drafter that nearly always agrees keeps its full count through rare rejections
        let good = [
            (4, 4),
            (8, 8),
            (8, 8),
            (8, 0),
            (8, 8),
            (8, 2),
            (8, 8),
            (8, 8),
        ];
        assert!(
            after(&good, 8)[2..].iter().all(|&k| k == 8),
            "{:?}",
            after(&good, 8)
        );
        // an early rejection before any evidence shortens the next round
        assert_eq!(after(&[(4, 0)], 8), vec![4, 2]);
        // a drafter that rarely agrees goes to the fewest drafts and stays there
        let poor = [(4, 1), (3, 0), (2, 1), (2, 0), (2, 0), (2, 1)];
        assert_eq!(*after(&poor, 8).last().unwrap(), ADAPTIVE_MIN);
        // about 80% agreement: around four drafts
        let mid: Vec<(usize, usize)> = (0..40).map(|i| (5, [4, 5, 3, 5, 2][i % 5])).collect();
        let k = *after(&mid, 8).last().unwrap();
        assert!((3..=6).contains(&k), "{k}");
        // a grammar that closed the draft early counts only what was drafted
        assert_eq!(after(&[(3, 3), (3, 3), (3, 3)], 8).last(), Some(&8));
        // the cap holds, and a cap of 1 gives 1
        assert_eq!(after(&[(1, 1)], 1), vec![1, 1]);
    }

    #[test]
    fn adaptive_tally_forgets_old_rounds() {
        assert_eq!(adaptive_draft_len(&AcceptanceTally::new(6), 8), 6);
        let mut t = AcceptanceTally::new(ADAPTIVE_START);
        for _ in 0..40 {
            t.record(8, 8);
        }
        assert_eq!(adaptive_draft_len(&t, 8), 8);
        // the answer turns to text the drafter predicts badly: the count falls within rounds
        let mut rounds = 0;
        while adaptive_draft_len(&t, 8) > ADAPTIVE_MIN {
            t.record(8, 0);
            rounds += 1;
            assert!(
                rounds < 40,
                "still at {} after 40 rejected rounds",
                adaptive_draft_len(&t, 8)
            );
        }
    }

    #[test]
    fn defaults_and_caps() {
        assert_eq!(max_draft(Mode::Draft, None), usize::MAX);
        assert_eq!(max_draft(Mode::Draft, Some(8)), 8);
        assert_eq!(drafter_block(Mode::Draft, Some(0)), 1);
        assert_eq!(max_draft(Mode::Dspark, None), usize::MAX);
        assert_eq!(max_draft(Mode::Dflash, Some(0)), 1);
        assert_eq!(drafter_block(Mode::Draft, Some(40)), 16);
        assert_eq!(drafter_block(Mode::Draft, None), 8);
        assert_eq!(
            draft_len(Mode::Draft, None),
            DraftLen::Adaptive { start: 8, cap: 8 }
        );
        assert_eq!(draft_len(Mode::Draft, Some(5)), DraftLen::Fixed(5));
        assert!(chooses_draft_count(
            Mode::Dflash,
            max_draft(Mode::Dflash, None)
        ));
        assert!(chooses_draft_count(
            Mode::Dspark,
            max_draft(Mode::Dspark, None)
        ));
        assert!(!chooses_draft_count(
            Mode::Dflash,
            max_draft(Mode::Dflash, Some(16))
        ));
        assert!(chooses_draft_count(
            Mode::Draft,
            max_draft(Mode::Draft, None)
        ));
        // a configured count is kept, even one equal to the default block
        assert!(!chooses_draft_count(
            Mode::Draft,
            max_draft(Mode::Draft, Some(DEFAULT_DRAFT_MODEL_DRAFTS))
        ));
        assert!(!chooses_draft_count(Mode::Baseline, 1));
        let seeded = SamplingParams {
            temperature: 0.7,
            seed: Some(3),
            ..SamplingParams::default()
        };
        let unseeded = SamplingParams {
            seed: None,
            ..seeded.clone()
        };
        assert!(count_may_vary(&SamplingParams::greedy(), true));
        assert!(!count_may_vary(&SamplingParams::greedy(), false));
        assert!(!count_may_vary(&seeded, true));
        assert!(count_may_vary(&unseeded, false));
        let greedy = SamplingParams::greedy();
        use CountRule::{Fixed, Measured, Prior};
        // (mode, configured count, sampling, batch-invariant rows) -> rule
        let cases = [
            (Mode::Dflash, usize::MAX, &greedy, true, Measured),
            (Mode::Dflash, usize::MAX, &seeded, true, Prior),
            (Mode::Dspark, usize::MAX, &greedy, false, Prior),
            (Mode::Dspark, usize::MAX, &unseeded, false, Measured),
            (Mode::Draft, usize::MAX, &seeded, true, Fixed),
            (Mode::Draft, usize::MAX, &greedy, true, Measured),
            (Mode::Dflash, 3, &seeded, true, Fixed),
            (Mode::Dflash, 3, &greedy, true, Fixed),
        ];
        for (mode, max, sampling, invariant, rule) in cases {
            assert_eq!(count_rule(mode, max, sampling, invariant), rule, "{mode:?}");
        }
        assert_eq!(draft_len(Mode::Dflash, None), DraftLen::Fixed(16));
        assert_eq!(drafter_block(Mode::Dspark, Some(3)), 16);
        let p = spec_params(Mode::Dspark, Some(3), f32::NAN, false);
        assert_eq!((p.max_draft, p.confidence_threshold), (3, 0.0));
        assert_eq!(
            spec_params(Mode::Dspark, None, 2.0, false).confidence_threshold,
            1.0
        );
    }
}
