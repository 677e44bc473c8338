//! Statistics for the sampling-exactness tests: Pearson's chi-squared statistic and its
//! p-value (regularized upper incomplete gamma), and the test's power against a given shift.

/// `ln Γ(x)` (Lanczos, |error| < 1e-13 for x > 0).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized upper incomplete gamma Q(s, x).
pub fn gamma_q(s: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x < s + 1.0 {
        // series for P, then Q = 1 - P
        let (mut sum, mut term, mut n) = (1.0 / s, 1.0 / s, s);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - (sum.ln() - x + s * x.ln() - ln_gamma(s)).exp()
    } else {
        // continued fraction (Lentz)
        let tiny = 1e-300;
        let mut b = x + 1.0 - s;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - s);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + s * x.ln() - ln_gamma(s)).exp() * h
    }
}

/// Pearson's chi-squared of observed counts against expected probabilities. Categories with
/// expected probability 0 must have no observations (else the statistic is infinite).
/// Returns (statistic, degrees of freedom, p-value).
pub fn chi_squared(counts: &[usize], probs: &[f64]) -> (f64, usize, f64) {
    let n: usize = counts.iter().sum();
    let mut stat = 0.0;
    let mut cats = 0usize;
    for (&c, &p) in counts.iter().zip(probs) {
        if p <= 0.0 {
            if c > 0 {
                return (f64::INFINITY, 0, 0.0);
            }
            continue;
        }
        let e = p * n as f64;
        stat += (c as f64 - e).powi(2) / e;
        cats += 1;
    }
    let df = cats.saturating_sub(1).max(1);
    (stat, df, gamma_q(df as f64 / 2.0, stat / 2.0))
}

/// A lower bound on the noncentrality of the chi-squared test with `n` trials against EVERY
/// alternative at total-variation distance `tv` from `probs`, whatever its shape: moving mass
/// `tv` out of a set A into its complement B gives `sum_i d_i^2 / p_i >= tv^2 (1/p(A) + 1/p(B))`
/// (Cauchy-Schwarz on each side), and `1/a + 1/(1 - a) >= 4`, so `lambda >= 4 n tv^2`.
pub fn worst_case_noncentrality(n: usize, tv: f64) -> f64 {
    4.0 * n as f64 * tv * tv
}

/// Pearson's chi-squared after pooling the categories whose expected count is below 5 (the
/// classical validity rule) into one; a pool still below 5 joins the smallest kept category.
/// Returns (statistic, degrees of freedom, p-value, probability mass that was pooled). A shift
/// that moves mass only inside the pool is invisible to the pooled test, so its power against
/// total-variation distance `tv` is bounded using `tv - pooled`.
pub fn chi_squared_pooled(counts: &[usize], probs: &[f64]) -> (f64, usize, f64, f64) {
    let n: usize = counts.iter().sum();
    let mut kept_c = Vec::new();
    let mut kept_p = Vec::new();
    let (mut pool_c, mut pool_p) = (0usize, 0.0f64);
    for (&c, &p) in counts.iter().zip(probs) {
        if p <= 0.0 && c > 0 {
            return (f64::INFINITY, 0, 0.0, 0.0);
        }
        if p * n as f64 >= 5.0 {
            kept_c.push(c);
            kept_p.push(p);
        } else {
            pool_c += c;
            pool_p += p;
        }
    }
    if pool_p > 0.0 {
        if pool_p * n as f64 >= 5.0 || kept_p.is_empty() {
            kept_c.push(pool_c);
            kept_p.push(pool_p);
        } else {
            let i = (0..kept_p.len())
                .min_by(|&a, &b| kept_p[a].total_cmp(&kept_p[b]))
                .expect("non-empty");
            kept_c[i] += pool_c;
            kept_p[i] += pool_p;
        }
    }
    let (stat, df, p) = chi_squared(&kept_c, &kept_p);
    (stat, df, p, pool_p)
}

/// Power of a level-`alpha` chi-squared test with `df` degrees of freedom at noncentrality
/// `lambda` (Patnaik's approximation: a scaled central chi-squared).
pub fn power(df: usize, lambda: f64, alpha: f64) -> f64 {
    // critical value by bisection on Q
    let k = df as f64;
    let (mut lo, mut hi) = (0.0, 1000.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if gamma_q(k / 2.0, mid / 2.0) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let crit = 0.5 * (lo + hi);
    let c = (k + 2.0 * lambda) / (k + lambda);
    let nu = (k + lambda).powi(2) / (k + 2.0 * lambda);
    gamma_q(nu / 2.0, crit / c / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // chi2 df=1: P(X > 3.841) = 0.05; df=7: P(X > 24.32) ~ 0.001
        assert!((gamma_q(0.5, 3.841 / 2.0) - 0.05).abs() < 1e-3);
        assert!((gamma_q(3.5, 24.32 / 2.0) - 0.001).abs() < 1e-4);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-10);
    }

    #[test]
    fn worst_case_bound_holds_for_shifts_of_every_shape() {
        // brute force over the pairs of categories and proportional splits of a small case
        let p = [0.4, 0.25, 0.2, 0.1, 0.05];
        let tv = 0.02;
        let bound = worst_case_noncentrality(1, tv);
        for a in 0..p.len() {
            for b in 0..p.len() {
                if a != b {
                    let l = tv * tv * (1.0 / p[a] + 1.0 / p[b]);
                    assert!(l >= bound, "{a}->{b}: {l} < {bound}");
                }
            }
        }
        // moving mass from {0, 3} to {1, 2, 4} in proportion to p: tv^2 (1/0.5 + 1/0.5)
        let prop: f64 = [0usize, 3]
            .iter()
            .map(|&i| (tv * p[i] / 0.5).powi(2) / p[i])
            .sum::<f64>()
            + [1usize, 2, 4]
                .iter()
                .map(|&i| (tv * p[i] / 0.5).powi(2) / p[i])
                .sum::<f64>();
        assert!((prop - bound).abs() < 1e-12);
    }

    #[test]
    fn pooling_keeps_small_categories_together() {
        let probs = [0.5, 0.4, 0.06, 0.03, 0.01];
        let counts = [50, 40, 6, 3, 1];
        let (_, df, _, pooled) = chi_squared_pooled(&counts, &probs);
        // expected 50, 40, 6, 3, 1: the last two pool into 4 < 5, which joins the 6
        assert_eq!(df, 2);
        assert!((pooled - 0.04).abs() < 1e-12);
    }

    #[test]
    fn power_grows_with_noncentrality() {
        assert!(power(7, 0.0, 0.001) < 0.01);
        assert!(power(7, 60.0, 0.001) > 0.99);
    }
}
