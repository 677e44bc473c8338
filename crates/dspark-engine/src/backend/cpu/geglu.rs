//! GeGLU on the CPU: `gelu(gate) · up` with the tanh form of GELU (Gemma's MLP), in one
//! vectorized pass over strided views, instead of candle's scalar `gelu` (a libm `tanh` per
//! value, about 35 ns each on the 2-core Xeon) followed by a separate multiply.
//!
//! `gelu(x) = x/2 · (1 + tanh(z))`, `z = √(2/π) · (x + 0.044715 x³)`, and `1 + tanh(z) =
//! 2 / (1 + e^(-2z))`, so `gelu(x) = x / (1 + e^(-2z))`: the sigmoid form SwiGLU already runs,
//! with the branch-free exponential of [`super::swiglu`].

use rayon::prelude::*;

use super::swiglu::{exp_clamped, Rows};

/// √(2/π), as candle and PyTorch's `gelu(approximate="tanh")` write it.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const CUBIC: f32 = 0.044_715;

/// `y = gelu_tanh(g) · u` over equal-length slices.
#[inline(always)]
fn gelu_mul<const FMA: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(g).zip(u) {
        let z = SQRT_2_OVER_PI * g * (1.0 + CUBIC * g * g);
        // max/min rather than clamp: the form that vectorizes (a NaN g stays NaN in y)
        #[allow(clippy::manual_clamp)]
        let e = exp_clamped::<FMA>((-2.0 * z).max(-87.0).min(88.0));
        *y = g / (1.0 + e) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_mul_avx2(y: &mut [f32], g: &[f32], u: &[f32]) {
    gelu_mul::<true>(y, g, u)
}

/// One row with the widest form this CPU runs (the same bits on one machine whatever the row
/// count).
fn gelu_mul_row(y: &mut [f32], g: &[f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { gelu_mul_avx2(y, g, u) };
    }
    gelu_mul::<false>(y, g, u)
}

/// Contiguous `gelu_tanh(gate) · up`, row-major over the leading axes.
pub fn geglu(gate: Rows<'_>, up: Rows<'_>) -> Vec<f32> {
    assert_eq!(gate.count(), up.count(), "geglu: row counts differ");
    assert_eq!(gate.len, up.len, "geglu: row lengths differ");
    let mut out = vec![0f32; gate.count() * gate.len];
    let row = |(r, o): (usize, &mut [f32])| gelu_mul_row(o, gate.row(r), up.row(r));
    if out.len() < 1 << 16 || !super::contention::fan_out() {
        out.chunks_mut(gate.len.max(1)).enumerate().for_each(row);
    } else {
        out.par_chunks_mut(gate.len.max(1))
            .enumerate()
            .for_each(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within `8 + 8·|z|` ulp (plus 1e-30 absolute, where the true value is below 1e-30) of
    /// `x/2 · (1 + tanh(z)) · u` computed in f64 (as `x / (1 + e^(-2z)) · u`), from -60 to 60,
    /// in both forms (fused and separate multiply-adds); rows of a strided view give the
    /// one-row bits. The `|z|` term: for x < 0 the value is about `x · e^(2z)`, whose relative
    /// error is `2|z|` times that of `z` in f32 (a few ulp). candle's `tanh` form loses more
    /// there: `1 + tanh(z)` cancels (about 25 ulp of the result at z = -2.5, 110 at z = -3.4, and 0 from z = -9 on).
    #[test]
    fn gelu_tanh_times_up_is_close_to_f64() {
        let g: Vec<f32> = (-120_000..=120_000).map(|i| i as f32 * 5e-4).collect();
        let u: Vec<f32> = g.iter().map(|v| 1.0 + v.abs().sin()).collect();
        let mut forms: Vec<Vec<f32>> = vec![vec![0f32; g.len()]];
        gelu_mul::<false>(&mut forms[0], &g, &u);
        forms.push(vec![0f32; g.len()]);
        gelu_mul_row(&mut forms[1], &g, &u);
        for y in &forms {
            for ((&y, &g), &u) in y.iter().zip(&g).zip(&u) {
                let x = g as f64;
                let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                // 1 + tanh(z) = 2 / (1 + e^(-2z)), free of f64's cancellation for z << 0
                let want = (x / (1.0 + (-2.0 * z).exp()) * u as f64) as f32;
                let ulp = (want.abs().max(f32::MIN_POSITIVE) * f32::EPSILON) as f64;
                assert!(
                    ((y - want) as f64).abs() <= (8.0 + 8.0 * z.abs()) * ulp + 1e-30,
                    "gelu({g}) * {u}: {y} against {want}"
                );
            }
        }
        // two rows of a [2, 2 * 5] tensor: gate = first 5, up = last 5 of each row
        let data: Vec<f32> = (0..20).map(|i| i as f32 * 0.61 - 5.0).collect();
        let view = |offset| Rows {
            data: &data,
            offset,
            lead_dims: &[2],
            lead_strides: &[10],
            len: 5,
        };
        let got = geglu(view(0), view(5));
        for r in 0..2 {
            let mut one = [0f32; 5];
            gelu_mul_row(
                &mut one,
                &data[r * 10..r * 10 + 5],
                &data[r * 10 + 5..r * 10 + 10],
            );
            assert_eq!(&got[r * 5..r * 5 + 5], &one, "row {r}");
        }
    }
}
