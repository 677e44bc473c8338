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

/// Noncentrality of the chi-squared test with `n` trials against the least detectable shift of
/// `delta` probability mass between two categories of `probs` (the two largest).
pub fn min_noncentrality(n: usize, probs: &[f64], delta: f64) -> f64 {
    let mut p: Vec<f64> = probs.iter().cloned().filter(|&x| x > 0.0).collect();
    p.sort_by(|a, b| b.total_cmp(a));
    let (a, b) = (p[0], *p.get(1).unwrap_or(&p[0]));
    n as f64 * delta * delta * (1.0 / a + 1.0 / b)
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
    fn power_grows_with_noncentrality() {
        assert!(power(7, 0.0, 0.001) < 0.01);
        assert!(power(7, 60.0, 0.001) > 0.99);
    }
}
