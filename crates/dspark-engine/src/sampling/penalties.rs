//! Penalties on tokens that came earlier, applied to a logits row before the token is chosen
//! (greedy or sampled), with the semantics of vLLM and HF transformers:
//!
//! 1. `repetition_penalty` r over every distinct token of the prompt and the generated text:
//!    a positive logit is divided by r, a negative one multiplied by r (1 = off);
//! 2. `frequency_penalty` f and `presence_penalty` p over the generated tokens only: a token
//!    generated c times loses `f · c + p · [c > 0]` (OpenAI's definition; 0 = off).
//!
//! Speculative verification applies them to the row of each drafted position with the
//! generated text plus the drafts before that position, which is exactly what the baseline
//! sees at that position if those drafts are accepted; so greedy output and sampled
//! distributions stay those of the baseline under the same penalties.

use std::collections::HashMap;

use super::SamplingParams;

/// Whether `s` penalizes anything.
pub fn active(s: &SamplingParams) -> bool {
    s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 || s.repetition_penalty != 1.0
}

/// Applies the penalties of `s` to `row` for a position preceded by `prompt` and then
/// `generated`.
pub fn apply(row: &mut [f32], s: &SamplingParams, prompt: &[u32], generated: &[u32]) {
    if !active(s) {
        return;
    }
    let n = row.len();
    let in_range = |t: u32| (t as usize) < n;
    if s.repetition_penalty != 1.0 {
        let r = s.repetition_penalty;
        let mut seen = vec![false; n];
        for &t in prompt.iter().chain(generated).filter(|&&t| in_range(t)) {
            seen[t as usize] = true;
        }
        for (v, &hit) in row.iter_mut().zip(&seen) {
            if hit {
                *v = if *v > 0.0 { *v / r } else { *v * r };
            }
        }
    }
    if s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in generated.iter().filter(|&&t| in_range(t)) {
            *counts.entry(t).or_default() += 1;
        }
        for (t, c) in counts {
            row[t as usize] -= s.frequency_penalty * c as f32 + s.presence_penalty;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(presence: f32, frequency: f32, repetition: f32) -> SamplingParams {
        SamplingParams {
            presence_penalty: presence,
            frequency_penalty: frequency,
            repetition_penalty: repetition,
            ..Default::default()
        }
    }

    #[test]
    fn off_by_default() {
        let mut row = vec![1.0, -2.0, 3.0];
        apply(&mut row, &SamplingParams::default(), &[0, 1], &[2, 2]);
        assert_eq!(row, vec![1.0, -2.0, 3.0]);
    }

    #[test]
    fn frequency_and_presence_count_generated_tokens_only() {
        let mut row = vec![1.0, 1.0, 1.0, 1.0];
        // token 0 only in the prompt; token 2 generated twice, token 3 once
        apply(&mut row, &params(0.5, 0.25, 1.0), &[0], &[2, 3, 2]);
        assert_eq!(row, vec![1.0, 1.0, 1.0 - 0.5 - 0.5, 1.0 - 0.25 - 0.5]);
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits_once() {
        let mut row = vec![2.0, -2.0, 2.0, -1.0];
        apply(&mut row, &params(0.0, 0.0, 2.0), &[0, 0, 1], &[1]);
        assert_eq!(row, vec![1.0, -4.0, 2.0, -1.0]);
    }

    #[test]
    fn out_of_vocabulary_ids_are_ignored() {
        let mut row = vec![0.0, 0.0];
        apply(&mut row, &params(1.0, 1.0, 2.0), &[9], &[7, 1]);
        assert_eq!(row, vec![0.0, -2.0]);
    }
}
