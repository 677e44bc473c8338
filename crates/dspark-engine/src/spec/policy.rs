//! Draft-length policy, in one place: how many drafts a round verifies by default, how long a
//! draft model's block is, and the [`SpecParams`] a launch or a live retune turns into. Pure
//! functions; the launcher, the pipeline and the worker all ask here.

use super::{Mode, SpecParams};

/// Longest block a draft model proposes in one round.
pub const MAX_DRAFT_MODEL_BLOCK: usize = 16;
/// Drafts per round of a draft model when none is configured.
pub const DEFAULT_DRAFT_MODEL_DRAFTS: usize = 4;

/// Drafts verified per round when `max_draft` is not configured: the drafter's full block for
/// DSpark/DFlash (capped later by the checkpoint's block), 4 for a draft model.
pub fn default_max_draft(mode: Mode) -> usize {
    match mode {
        Mode::Baseline => 1,
        Mode::Draft => DEFAULT_DRAFT_MODEL_DRAFTS,
        Mode::Dspark | Mode::Dflash => usize::MAX,
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
    fn defaults_and_caps() {
        assert_eq!(max_draft(Mode::Draft, None), 4);
        assert_eq!(max_draft(Mode::Dspark, None), usize::MAX);
        assert_eq!(max_draft(Mode::Dflash, Some(0)), 1);
        assert_eq!(drafter_block(Mode::Draft, Some(40)), 16);
        assert_eq!(drafter_block(Mode::Draft, None), 4);
        assert_eq!(drafter_block(Mode::Dspark, Some(3)), 16);
        let p = spec_params(Mode::Dspark, Some(3), f32::NAN);
        assert_eq!((p.max_draft, p.confidence_threshold), (3, 0.0));
        assert_eq!(
            spec_params(Mode::Dspark, None, 2.0).confidence_threshold,
            1.0
        );
    }
}
