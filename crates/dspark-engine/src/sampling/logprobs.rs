//! Log-probabilities of emitted tokens, for the API's `logprobs` / `top_logprobs`.
//!
//! The distribution reported is `log_softmax` of the target's logits row after `logit_bias`
//! and the penalties, and before temperature, min-p, top-k and top-p: the model's own
//! distribution under the request's logit processors, independent of how it was then
//! sampled (so greedy and sampled requests report the same numbers for the same token, as
//! OpenAI's do). Under speculation the row is the verify row of that position, which the
//! baseline computes for the same prefix; the two agree to float rounding.

use super::SamplingParams;

/// One emitted token with its log-probability and, when asked, the likeliest alternatives.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// The `k` likeliest tokens of the same row, likeliest first (ties: lower id first).
    pub top: Vec<(u32, f32)>,
}

/// A token with its text (the tokenizer's decoding of that id alone, special tokens kept)
/// and a log-probability.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Scored {
    pub id: u32,
    pub text: String,
    pub logprob: f32,
}

/// A [`TokenLogprob`] with token texts, as the API reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Rendered {
    pub chosen: Scored,
    pub top: Vec<Scored>,
}

impl TokenLogprob {
    /// Attaches texts: `text(id)` decodes one token.
    pub fn render(&self, text: &dyn Fn(u32) -> String) -> Rendered {
        let scored = |id: u32, logprob: f32| Scored {
            id,
            text: text(id),
            logprob,
        };
        Rendered {
            chosen: scored(self.id, self.logprob),
            top: self.top.iter().map(|&(t, lp)| scored(t, lp)).collect(),
        }
    }
}

/// Whether `s` asks for log-probabilities.
pub fn wanted(s: &SamplingParams) -> bool {
    s.logprobs.is_some()
}

/// `log_softmax(row)` in f64 (computed once per row, returned as f32).
pub fn log_softmax(row: &[f32]) -> Vec<f32> {
    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
    row.iter().map(|&x| (x as f64 - lse) as f32).collect()
}

/// The entry for token `id` chosen from the (adjusted) row `row`, with `k` alternatives.
pub fn of_row(row: &[f32], id: u32, k: usize) -> TokenLogprob {
    let lp = log_softmax(row);
    let mut top = Vec::new();
    if k > 0 {
        let mut order: Vec<u32> = (0..lp.len() as u32).collect();
        let k = k.min(order.len());
        let by = |a: &u32, b: &u32| lp[*b as usize].total_cmp(&lp[*a as usize]).then(a.cmp(b));
        order.select_nth_unstable_by(k - 1, by);
        order.truncate(k);
        order.sort_unstable_by(by);
        top = order.into_iter().map(|t| (t, lp[t as usize])).collect();
    }
    TokenLogprob {
        id,
        logprob: lp.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY),
        top,
    }
}

/// [`of_row`] when `s` asks for log-probabilities.
pub fn for_pick(row: &[f32], id: u32, s: &SamplingParams) -> Option<TokenLogprob> {
    s.logprobs.map(|k| of_row(row, id, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_normalises_and_ranks() {
        let row = [0.0f32, 1.0, 2.0, 2.0];
        let lp = log_softmax(&row);
        let total: f64 = lp.iter().map(|&x| (x as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        let e = of_row(&row, 1, 3);
        assert!(
            (e.logprob - (1.0 - (1f64 + 1f64.exp() + 2.0 * 2f64.exp()).ln()) as f32).abs() < 1e-6
        );
        let ids: Vec<u32> = e.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![2, 3, 1]);
        assert!(of_row(&row, 0, 0).top.is_empty());
        assert_eq!(of_row(&row, 0, 99).top.len(), 4);
    }
}
