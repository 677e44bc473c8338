//! Token choice from one row of logits, on the host: greedy argmax, and temperature sampling
//! with min-p, top-k and top-p truncation. The same truncation is applied to draft and target
//! distributions during speculative verification. Repetition, frequency and presence
//! penalties, which depend on what came before a position, are in [`penalties`]; `logit_bias`
//! in [`logit_bias`]; both are applied to a row by [`adjust`]. Log-probabilities of the chosen
//! tokens are in [`logprobs`].

use rand::Rng;

pub mod logit_bias;
pub mod logprobs;
pub mod penalties;

/// Sampling settings of one request. `temperature <= 0` means greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// 0 = off.
    pub top_k: usize,
    pub seed: Option<u64>,
    /// Drops tokens below `min_p` times the likeliest one's probability (0 = off).
    pub min_p: f32,
    /// Penalties over earlier tokens ([`penalties`]); 0, 0 and 1 are off.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: f32,
    /// `(token id, bias)` added to the logits before anything else ([`logit_bias`]).
    pub logit_bias: Vec<(u32, f32)>,
    /// Report log-probabilities of the emitted tokens with this many alternatives each
    /// ([`logprobs`]); `None` = off.
    pub logprobs: Option<usize>,
    /// A grammar the output must match (`response_format`, `tool_choice`): rows are masked
    /// by [`crate::constrain`] after [`adjust`]; `None` = free text.
    pub constraint: Option<crate::constrain::Shared>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            logprobs: None,
            constraint: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self::default()
    }
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

/// Whether [`adjust`] changes rows at all.
pub fn adjusts(s: &SamplingParams) -> bool {
    logit_bias::active(s) || penalties::active(s)
}

/// Greedy with nothing that reads or changes whole rows (no logit bias, penalties, grammar or
/// log-probabilities): the chosen token is the row's argmax and nothing else, so a backend may
/// compute it where the logits are ([`crate::backend::Backend::device_argmax`]).
pub fn plain_greedy(s: &SamplingParams) -> bool {
    s.is_greedy() && !adjusts(s) && s.logprobs.is_none() && s.constraint.is_none()
}

/// The logit processors of `s` on the row of a position preceded by `prompt` then
/// `generated`: `logit_bias` first, then the penalties. Every loop (baseline, speculative
/// verification) chooses tokens from rows adjusted by this and nothing else.
pub fn adjust(row: &mut [f32], s: &SamplingParams, prompt: &[u32], generated: &[u32]) {
    logit_bias::apply(row, s);
    penalties::apply(row, s, prompt, generated);
}

/// Index of the largest value; the first one on ties (-0 and +0 tie). NaNs are never chosen;
/// a row with no value above -inf gives 0.
///
/// Two passes that the compiler vectorizes (a logits row of 49,152 took about 40 us as one
/// compare-and-branch loop): the largest value by lanes, NaNs skipped as the loop skips them,
/// then the first index that equals it. The result is that of one compare-and-branch pass
/// (`argmax_scan`, kept for the tests).
pub fn argmax(row: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut m = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (ml, &v) in m.iter_mut().zip(c) {
            *ml = if v > *ml { v } else { *ml };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for v in m.into_iter().chain(tail.iter().copied()) {
        if v > max {
            max = v;
        }
    }
    if max == f32::NEG_INFINITY {
        return 0;
    }
    row.iter().position(|&v| v == max).unwrap_or(0) as u32
}

/// The definition [`argmax`] keeps: one compare-and-branch pass.
#[cfg(test)]
fn argmax_scan(row: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

/// `softmax(row / temperature)` in f64 for stability, returned as f32 probabilities.
pub fn softmax_t(row: &[f32], temperature: f32) -> Vec<f32> {
    let t = temperature.max(1e-6) as f64;
    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let ex: Vec<f64> = row.iter().map(|&x| ((x as f64 - m) / t).exp()).collect();
    let s: f64 = ex.iter().sum();
    ex.into_iter().map(|e| (e / s) as f32).collect()
}

/// Top-k then nucleus truncation, renormalised. Identity when `top_p >= 1` and `top_k == 0`.
/// Top-k keeps every value >= the k-th largest (ties kept). Nucleus keeps tokens whose mass
/// before them (descending order) is < `top_p`, then every value >= the smallest kept one.
pub fn truncate(probs: &mut [f32], top_p: f32, top_k: usize) {
    if top_p >= 1.0 && top_k == 0 {
        return;
    }
    let mut sorted: Vec<f32> = probs.to_vec();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    if top_k > 0 && top_k < sorted.len() {
        let kth = sorted[top_k - 1];
        for p in probs.iter_mut() {
            if *p < kth {
                *p = 0.0;
            }
        }
        sorted.retain(|&p| p >= kth);
    }
    if top_p < 1.0 {
        let total: f64 = sorted.iter().map(|&p| p as f64).sum();
        let mut before = 0.0f64;
        let mut cutoff = sorted[0];
        for &p in &sorted {
            if before / total.max(1e-30) < top_p as f64 {
                cutoff = p;
                before += p as f64;
            } else {
                break;
            }
        }
        for p in probs.iter_mut() {
            if *p < cutoff {
                *p = 0.0;
            }
        }
    }
    let s: f32 = probs.iter().sum::<f32>().max(1e-12);
    for p in probs.iter_mut() {
        *p /= s;
    }
}

/// The truncated sampling distribution of one logits row: `softmax(row / T)`, then min-p
/// (tokens below `min_p · max p` dropped), then top-k and top-p ([`truncate`]).
pub fn distribution(row: &[f32], params: &SamplingParams) -> Vec<f32> {
    let mut p = softmax_t(row, params.temperature);
    if params.min_p > 0.0 {
        let floor = params.min_p * p.iter().cloned().fold(0.0, f32::max);
        p.iter_mut().filter(|v| **v < floor).for_each(|v| *v = 0.0);
    }
    truncate(&mut p, params.top_p, params.top_k);
    p
}

/// Draws an index from `probs` (not necessarily normalised) by inverse CDF.
pub fn sample_index<R: Rng + ?Sized>(probs: &[f32], rng: &mut R) -> u32 {
    let total: f64 = probs.iter().map(|&p| p as f64).sum();
    let u: f64 = rng.random::<f64>() * total;
    let mut acc = 0.0f64;
    let mut last_nonzero = 0;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            acc += p as f64;
            last_nonzero = i;
            if u < acc {
                return i as u32;
            }
        }
    }
    last_nonzero as u32
}

/// One token from a logits row: argmax when greedy, else a sample of the truncated distribution.
pub fn pick<R: Rng + ?Sized>(row: &[f32], params: &SamplingParams, rng: &mut R) -> u32 {
    if params.is_greedy() {
        argmax(row)
    } else {
        sample_index(&distribution(row, params), rng)
    }
}

/// A reproducible generator: seeded when a seed is given, else from the OS.
pub fn rng_for(seed: Option<u64>) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    match seed {
        Some(s) => rand_chacha::ChaCha8Rng::seed_from_u64(s),
        None => rand_chacha::ChaCha8Rng::from_os_rng(),
    }
}

#[cfg(test)]
mod tests {
    /// The two-pass argmax equals the one-pass definition on rows with ties, NaNs, infinities,
    /// signed zeros and every length past a lane multiple.
    #[test]
    fn argmax_equals_the_scan() {
        let mut seed = 17u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
        ];
        for len in (0..70).chain([49152, 49153]) {
            for _ in 0..40 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 8 {
                        0 => specials[(next() % 7) as usize],
                        1..=3 => (next() % 5) as f32, // many ties
                        _ => (next() % 1000) as f32 / 37.0 - 13.0,
                    })
                    .collect();
                assert_eq!(super::argmax(&row), super::argmax_scan(&row), "{row:?}");
                let neg = vec![f32::NEG_INFINITY; len];
                assert_eq!(super::argmax(&neg), 0);
                let nan = vec![f32::NAN; len];
                assert_eq!(super::argmax(&nan), 0);
            }
        }
    }

    use super::*;

    #[test]
    fn argmax_first_on_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5]), 1);
    }

    #[test]
    fn top_k_keeps_ties() {
        let mut p = vec![0.4, 0.2, 0.2, 0.1, 0.1];
        truncate(&mut p, 1.0, 2);
        assert_eq!(p.iter().filter(|&&x| x > 0.0).count(), 3);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn top_p_keeps_mass_before_threshold() {
        // cumulative before: 0, .5, .8, .95 -> with p=0.75 keep first two only
        let mut p = vec![0.5, 0.3, 0.15, 0.05];
        truncate(&mut p, 0.75, 0);
        assert!(
            p[0] > 0.0 && p[1] > 0.0 && p[2] == 0.0 && p[3] == 0.0,
            "{p:?}"
        );
        // top-1 always survives
        let mut q = vec![0.9, 0.1];
        truncate(&mut q, 0.01, 0);
        assert_eq!(q, vec![1.0, 0.0]);
    }

    #[test]
    fn same_seed_same_samples() {
        let row: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 0.9,
            top_k: 20,
            seed: Some(7),
            ..Default::default()
        };
        let a: Vec<u32> = {
            let mut r = rng_for(Some(7));
            (0..20).map(|_| pick(&row, &params, &mut r)).collect()
        };
        let b: Vec<u32> = {
            let mut r = rng_for(Some(7));
            (0..20).map(|_| pick(&row, &params, &mut r)).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn sampled_frequencies_follow_distribution() {
        let row = [0.0f32, 1.0, 2.0];
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            ..Default::default()
        };
        let p = distribution(&row, &params);
        let mut r = rng_for(Some(1));
        let n = 30_000;
        let mut c = [0usize; 3];
        for _ in 0..n {
            c[pick(&row, &params, &mut r) as usize] += 1;
        }
        for i in 0..3 {
            let f = c[i] as f32 / n as f32;
            assert!((f - p[i]).abs() < 0.015, "{i}: {f} vs {}", p[i]);
        }
    }
}
