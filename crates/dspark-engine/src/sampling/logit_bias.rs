//! `logit_bias` (OpenAI semantics): a fixed amount in [-100, 100] added to the logit of each
//! listed token id, before anything else touches the row (penalties, temperature, truncation).
//! It does not depend on the position, so the baseline, every verified position of a drafted
//! block and the drafters' own rows all receive the same shift; ±100 in practice forces or
//! forbids a token.

use super::SamplingParams;

/// Largest magnitude of one bias (OpenAI's bound).
pub const MAX_BIAS: f32 = 100.0;

/// Whether `s` biases any token.
pub fn active(s: &SamplingParams) -> bool {
    !s.logit_bias.is_empty()
}

/// Adds each `(id, bias)` of `s.logit_bias` to `row[id]`; ids outside the row are ignored
/// (the server refuses them before a request gets here).
pub fn apply(row: &mut [f32], s: &SamplingParams) {
    for &(id, bias) in &s.logit_bias {
        if let Some(v) = row.get_mut(id as usize) {
            *v += bias;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_to_listed_ids_only() {
        let s = SamplingParams {
            logit_bias: vec![(0, 100.0), (2, -1.5), (9, 3.0)],
            ..Default::default()
        };
        let mut row = vec![1.0, 1.0, 1.0];
        apply(&mut row, &s);
        assert_eq!(row, vec![101.0, 1.0, -0.5]);
        assert!(active(&s) && !active(&SamplingParams::default()));
    }
}
