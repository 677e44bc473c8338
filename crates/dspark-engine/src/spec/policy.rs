//! Draft-length policy, in one place: how many drafts a round verifies by default, how long a
//! draft model's block is, and the [`SpecParams`] a launch or a live retune turns into. Pure
//! functions; the launcher, the pipeline and the worker all ask here.

use super::{Mode, SpecParams};
use crate::sampling::SamplingParams;

/// Longest block a draft model proposes in one round.
pub const MAX_DRAFT_MODEL_BLOCK: usize = 16;
/// Most drafts per round of a draft model when none is configured (it adapts below this).
pub const DEFAULT_DRAFT_MODEL_DRAFTS: usize = 8;
/// Drafts in the first round of an adaptive draft model.
pub const ADAPTIVE_START: usize = 4;
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

/// The next round's draft count after a round that drafted `drafted` and accepted
/// `accepted`: two more after a fully accepted round, one past the accepted count after a
/// rejection, within `[ADAPTIVE_MIN, cap]`. It depends only on finished rounds, never on the
/// round being drafted, so greedy output and the exactness of sampling are untouched (any
/// draft count gives the target's own output); only the speed changes. On the demo (a Q4_1
/// copy of the f32 target, ~97% per-token acceptance) a fixed 4 ran x1.24 of baseline and a
/// fixed 8 x1.5-1.67; draft models that agree less stay short and waste fewer verify rows.
pub fn next_draft_len(k: usize, drafted: usize, accepted: usize, cap: usize) -> usize {
    let next = if accepted >= drafted {
        k + 2
    } else {
        accepted + 1
    };
    next.clamp(ADAPTIVE_MIN.min(cap), cap.max(1))
}

/// Drafts verified per round when `max_draft` is not configured: the drafter's full block for
/// DSpark/DFlash (capped later by the checkpoint's block), 4 for a draft model.
pub fn default_max_draft(mode: Mode) -> usize {
    match mode {
        Mode::Baseline => 1,
        Mode::Draft => DEFAULT_DRAFT_MODEL_DRAFTS,
        Mode::Dspark | Mode::Dflash => usize::MAX,
    }
}

/// Whether the speculative loop picks each round's draft count from measured acceptance and
/// round costs ([`super::draft_budget::DraftBudget`]): DFlash and DSpark when no count is
/// configured (their default is then "up to the full block"); a configured count is kept.
pub fn chooses_draft_count(mode: Mode, max_draft: usize) -> bool {
    matches!(mode, Mode::Dspark | Mode::Dflash) && max_draft == default_max_draft(mode)
}

/// Whether a request's output stays the same when its draft count follows measured costs
/// (which differ from run to run): greedy decoding on batch-invariant kernels (a verify row
/// then has a decode step's bits), and sampling without a seed. A seeded sampled request keeps
/// the fixed count, so that the same seed gives the same tokens whatever ran before it.
pub fn count_may_vary(sampling: &SamplingParams, rows_batch_invariant: bool) -> bool {
    if sampling.is_greedy() {
        rows_batch_invariant
    } else {
        sampling.seed.is_none()
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
        Mode::Draft => max_draft(mode, configured).clamp(1, MAX_DRAFT_MODEL_BLOCK),
        _ => MAX_DRAFT_MODEL_BLOCK,
    }
}

/// The speculative loop's knobs. A negative or NaN threshold means off.
pub fn spec_params(mode: Mode, configured: Option<usize>, confidence_threshold: f32) -> SpecParams {
    let t = if confidence_threshold.is_finite() {
        confidence_threshold.clamp(0.0, 1.0)
    } else {
        0.0
    };
    SpecParams {
        max_draft: max_draft(mode, configured),
        confidence_threshold: t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_length_grows_on_full_rounds_and_falls_on_rejections() {
        assert_eq!(next_draft_len(4, 4, 4, 8), 6);
        assert_eq!(next_draft_len(6, 6, 6, 8), 8);
        assert_eq!(next_draft_len(8, 8, 8, 8), 8);
        assert_eq!(next_draft_len(8, 8, 3, 8), 4);
        assert_eq!(next_draft_len(8, 8, 0, 8), 2);
        // a grammar that closed the draft early counts as a full round of what was drafted
        assert_eq!(next_draft_len(8, 3, 3, 8), 8);
        assert_eq!(next_draft_len(4, 4, 4, 1), 1);
    }

    #[test]
    fn defaults_and_caps() {
        assert_eq!(max_draft(Mode::Draft, None), 8);
        assert_eq!(max_draft(Mode::Dspark, None), usize::MAX);
        assert_eq!(max_draft(Mode::Dflash, Some(0)), 1);
        assert_eq!(drafter_block(Mode::Draft, Some(40)), 16);
        assert_eq!(drafter_block(Mode::Draft, None), 8);
        assert_eq!(
            draft_len(Mode::Draft, None),
            DraftLen::Adaptive { start: 4, cap: 8 }
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
        assert!(!chooses_draft_count(
            Mode::Draft,
            max_draft(Mode::Draft, None)
        ));
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
        assert_eq!(draft_len(Mode::Dflash, None), DraftLen::Fixed(16));
        assert_eq!(drafter_block(Mode::Dspark, Some(3)), 16);
        let p = spec_params(Mode::Dspark, Some(3), f32::NAN);
        assert_eq!((p.max_draft, p.confidence_threshold), (3, 0.0));
        assert_eq!(
            spec_params(Mode::Dspark, None, 2.0).confidence_threshold,
            1.0
        );
    }
}
