//! Verification of a drafted block against the target's rows. Pure functions: logits or
//! probabilities in, [`Outcome`] out.
//!
//! Greedy: accept the longest prefix with `d[j] == argmax(row j)`, then commit `argmax(row n)`.
//! Sampled (Leviathan et al. / Chen et al.): accept `d[j]` with probability
//! `min(1, p_j(d)/q_j(d))`; on the first rejection sample from `norm(max(0, p_j - q_j))`; if all
//! are accepted sample the bonus token from `p_m`. Each emitted token is then an exact sample of
//! the (truncated) target distribution.

use rand::{Rng, RngCore};

use crate::sampling::sample_index;

/// Result of verifying one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Drafts accepted (a prefix of the block).
    pub accepted: usize,
    /// The correction (on rejection) or bonus (all accepted) token.
    pub next: u32,
}

/// `argmax_rows[j]` is the target's choice after `[pending, d_1..d_j]`; `m + 1` rows for `m` drafts.
pub fn verify_greedy(argmax_rows: &[u32], drafts: &[u32]) -> Outcome {
    debug_assert_eq!(argmax_rows.len(), drafts.len() + 1);
    let accepted = drafts
        .iter()
        .zip(argmax_rows)
        .take_while(|(d, t)| d == t)
        .count();
    Outcome {
        accepted,
        next: argmax_rows[accepted],
    }
}

/// `p[j]`: truncated target distributions (`m + 1` rows); `q[j]`: the draft distribution each
/// draft was sampled from (`m` rows).
pub fn verify_sampled(
    p: &[Vec<f32>],
    q: &[Vec<f32>],
    drafts: &[u32],
    rng: &mut dyn RngCore,
) -> Outcome {
    debug_assert_eq!(p.len(), drafts.len() + 1);
    debug_assert_eq!(q.len(), drafts.len());
    for (j, &d) in drafts.iter().enumerate() {
        let pd = p[j][d as usize] as f64;
        let qd = (q[j][d as usize] as f64).max(1e-9);
        let u: f64 = rng.random::<f64>();
        if u < (pd / qd).min(1.0) {
            continue;
        }
        let residual: Vec<f32> = p[j]
            .iter()
            .zip(&q[j])
            .map(|(&a, &b)| (a - b).max(0.0))
            .collect();
        let next = if residual.iter().any(|&r| r > 0.0) {
            sample_index(&residual, rng)
        } else {
            sample_index(&p[j], rng)
        };
        return Outcome { accepted: j, next };
    }
    Outcome {
        accepted: drafts.len(),
        next: sample_index(&p[drafts.len()], rng),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::rng_for;

    #[test]
    fn greedy_accepts_matching_prefix() {
        assert_eq!(
            verify_greedy(&[5, 6, 9, 1], &[5, 6, 7]),
            Outcome {
                accepted: 2,
                next: 9
            }
        );
        assert_eq!(
            verify_greedy(&[5, 6, 7, 1], &[5, 6, 7]),
            Outcome {
                accepted: 3,
                next: 1
            }
        );
        assert_eq!(
            verify_greedy(&[4, 6, 7, 1], &[5, 6, 7]),
            Outcome {
                accepted: 0,
                next: 4
            }
        );
        assert_eq!(
            verify_greedy(&[3], &[]),
            Outcome {
                accepted: 0,
                next: 3
            }
        );
    }

    #[test]
    fn sampled_with_equal_p_and_q_accepts_everything() {
        let p = vec![vec![0.5, 0.5], vec![0.5, 0.5], vec![0.2, 0.8]];
        let q = vec![vec![0.5, 0.5], vec![0.5, 0.5]];
        let mut r = rng_for(Some(3));
        for _ in 0..100 {
            assert_eq!(verify_sampled(&p, &q, &[0, 1], &mut r).accepted, 2);
        }
    }

    #[test]
    fn sampled_rejects_impossible_draft_and_corrects_from_residual() {
        // target never produces token 0; draft proposed it
        let p = vec![vec![0.0, 0.3, 0.7], vec![1.0, 0.0, 0.0]];
        let q = vec![vec![1.0, 0.0, 0.0]];
        let mut r = rng_for(Some(4));
        for _ in 0..100 {
            let o = verify_sampled(&p, &q, &[0], &mut r);
            assert_eq!(o.accepted, 0);
            assert_ne!(o.next, 0);
        }
    }

    #[test]
    fn single_step_marginal_is_target() {
        // one draft from a skewed q; the emitted first token must follow p
        let p = vec![vec![0.1, 0.2, 0.3, 0.4], vec![0.25; 4]];
        let q = vec![vec![0.7, 0.1, 0.1, 0.1]];
        let mut r = rng_for(Some(9));
        let n = 40_000;
        let mut c = [0usize; 4];
        for _ in 0..n {
            let d = sample_index(&q[0], &mut r);
            let o = verify_sampled(&p, &q, &[d], &mut r);
            let first = if o.accepted >= 1 { d } else { o.next };
            c[first as usize] += 1;
        }
        for i in 0..4 {
            let f = c[i] as f32 / n as f32;
            assert!((f - p[0][i]).abs() < 0.012, "{i}: {f} vs {}", p[0][i]);
        }
    }
}
