//! Gated MLP activations on the CPU, in one vectorized pass over strided views (the two halves
//! of a fused gate/up projection), instead of two elementwise ops on non-contiguous narrows:
//! - SwiGLU, `silu(gate) · up = gate / (1 + e^(-gate)) · up`;
//! - GeGLU with the tanh form of GELU (Gemma), `gelu(x) = x/2 · (1 + tanh(z))` with
//!   `z = √(2/π) · (x + 0.044715 x³)`; since `1 + tanh(z) = 2 / (1 + e^(-2z))` it is
//!   `x / (1 + e^(-2z))`, SwiGLU's form with `2z` in place of `x` in the exponent. candle's
//!   scalar `gelu` (a libm `tanh` per value) took about 35 ns a value on the 2-core Xeon.

/// Values below which a call runs inline: about 8 us of work on one thread, past a hand-off's
/// cost (a verify block of 8 rows of the demo's 1536-wide MLP is 12,288).
const FAN_OUT: usize = 1 << 13;

/// A strided view whose last axis is contiguous: `rows` rows of `len` elements, row `r`
/// starting at `offset + Σ_d idx_d(r) · strides[d]` over the leading axes.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub lead_dims: &'a [usize],
    pub lead_strides: &'a [usize],
    pub len: usize,
}

impl Rows<'_> {
    fn count(&self) -> usize {
        self.lead_dims.iter().product()
    }

    fn row(&self, mut r: usize) -> &[f32] {
        let mut start = self.offset;
        for (d, s) in self.lead_dims.iter().zip(self.lead_strides).rev() {
            start += (r % d) * s;
            r /= d;
        }
        &self.data[start..start + self.len]
    }
}

/// `e^t` for `t` in [-87, 88] (callers clamp): `t = n · ln 2 + r` with `|r| ≤ ln 2 / 2` (ln 2
/// split in two for an exact `n · ln 2_hi`), `e^r` by its Taylor series to `r^7` (the next
/// term is below 2^-27 of the sum), times `2^n` built in the exponent bits. Within 2 ulp of the
/// true value. Written without branches or calls, so LLVM vectorizes the loop around it; `FMA`
/// picks fused multiply-adds (the AVX2 + FMA build) or separate ones (elsewhere).
#[inline(always)]
fn exp_clamped<const FMA: bool>(t: f32) -> f32 {
    #[inline(always)]
    fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    // round to nearest by the 1.5 · 2^23 shifter (exact for |t · log2 e| < 2^22): the sum's
    // low mantissa bits then hold n + 2^22
    let shifter = 12_582_912.0f32;
    let k = fma::<FMA>(t, std::f32::consts::LOG2_E, shifter);
    let n = k - shifter;
    let r = fma::<FMA>(n, -0.693_145_75, t);
    let r = fma::<FMA>(n, -1.428_606_8e-6, r);
    let mut p = 1.0 / 5040.0;
    p = fma::<FMA>(p, r, 1.0 / 720.0);
    p = fma::<FMA>(p, r, 1.0 / 120.0);
    p = fma::<FMA>(p, r, 1.0 / 24.0);
    p = fma::<FMA>(p, r, 1.0 / 6.0);
    p = fma::<FMA>(p, r, 0.5);
    p = fma::<FMA>(p, r, 1.0);
    p = fma::<FMA>(p, r, 1.0);
    // 2^n from the bits: n + 127 into the exponent field
    let two_n = f32::from_bits(
        k.to_bits()
            .wrapping_sub(shifter.to_bits())
            .wrapping_add(127)
            << 23,
    );
    p * two_n
}

/// √(2/π), as candle and PyTorch's `gelu(approximate="tanh")` write it.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const CUBIC: f32 = 0.044_715;

/// `y = act(g) · u = g / (1 + e^-t) · u` over equal-length slices, with `t = g` (SwiGLU) or
/// `t = 2z(g)` (`GELU`: GeGLU).
#[inline(always)]
fn gated_mul<const FMA: bool, const GELU: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(g).zip(u) {
        let t = if GELU {
            2.0 * (SQRT_2_OVER_PI * g * (1.0 + CUBIC * g * g))
        } else {
            g
        };
        // max/min rather than clamp: the form measured to vectorize (a NaN g stays NaN in y)
        #[allow(clippy::manual_clamp)]
        let e = exp_clamped::<FMA>((-t).max(-87.0).min(88.0));
        *y = g / (1.0 + e) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gated_mul_avx2<const GELU: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    gated_mul::<true, GELU>(y, g, u)
}

/// The same loop on 16 lanes: each value's operations are those of the AVX2 form (fused
/// multiply-adds in the same places), so the bits are too; only the width differs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn gated_mul_avx512<const GELU: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    gated_mul::<true, GELU>(y, g, u)
}

/// One row with the widest form this CPU runs (the same bits on one machine whatever the row
/// count).
fn gated_mul_row<const GELU: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() && std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F, AVX2 and FMA were detected at run time.
        return unsafe { gated_mul_avx512::<GELU>(y, g, u) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { gated_mul_avx2::<GELU>(y, g, u) };
    }
    gated_mul::<false, GELU>(y, g, u)
}

/// Contiguous `silu(gate) · up` (or `gelu_tanh(gate) · up` with `gelu`), row-major over the
/// leading axes.
pub fn glu(gate: Rows<'_>, up: Rows<'_>, gelu: bool) -> Vec<f32> {
    assert_eq!(gate.count(), up.count(), "glu: row counts differ");
    assert_eq!(gate.len, up.len, "glu: row lengths differ");
    let mut out = vec![0f32; gate.count() * gate.len];
    let row = |(r, o): (usize, &mut [f32])| {
        if gelu {
            gated_mul_row::<true>(o, gate.row(r), up.row(r))
        } else {
            gated_mul_row::<false>(o, gate.row(r), up.row(r))
        }
    };
    let len = gate.len.max(1);
    let fan_out = out.len() >= FAN_OUT && super::contention::fan_out();
    super::row_runs(&mut out, len, fan_out, |r0, o| {
        o.chunks_mut(len)
            .enumerate()
            .for_each(|(i, o)| row((r0 + i, o)))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of a strided view (the halves of a fused gate/up row) give the bits of one-value
    /// calls, for SwiGLU and GeGLU.
    #[test]
    fn halves_of_a_fused_row_match_the_two_op_definition() {
        // [2 rows, 2 * 5]: gate = first 5, up = last 5 of each row
        let data: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
        let view = |offset| Rows {
            data: &data,
            offset,
            lead_dims: &[2],
            lead_strides: &[10],
            len: 5,
        };
        for gelu in [false, true] {
            let got = glu(view(0), view(5), gelu);
            for r in 0..2 {
                for i in 0..5 {
                    let (g, u) = (data[r * 10 + i], data[r * 10 + 5 + i]);
                    let mut one = [0f32];
                    if gelu {
                        gated_mul_row::<true>(&mut one, &[g], &[u]);
                    } else {
                        gated_mul_row::<false>(&mut one, &[g], &[u]);
                    }
                    let (a, b) = (got[r * 5 + i], one[0]);
                    assert_eq!(a.to_bits(), b.to_bits(), "gelu {gelu} row {r} lane {i}");
                }
            }
        }
    }

    /// Both forms (fused and separate multiply-adds) of `act(g) · u` over `g` in `±span`
    /// against `act` computed in f64: within `ulps(g)` ulp, plus `abs` absolute.
    fn assert_near_f64<const GELU: bool>(
        span: f32,
        act: impl Fn(f64) -> f64,
        ulps: impl Fn(f64) -> f64,
        abs: f64,
    ) {
        let n = (span / 5e-4) as i32;
        let g: Vec<f32> = (-n..=n).map(|i| i as f32 * 5e-4).collect();
        let u: Vec<f32> = g.iter().map(|v| 1.0 + v.abs().sin()).collect();
        let mut forms: Vec<Vec<f32>> = vec![vec![0f32; g.len()]; 2];
        gated_mul::<false, GELU>(&mut forms[0], &g, &u);
        gated_mul_row::<GELU>(&mut forms[1], &g, &u);
        for y in &forms {
            for ((&y, &g), &u) in y.iter().zip(&g).zip(&u) {
                let want = (act(g as f64) * u as f64) as f32;
                let ulp = (want.abs().max(f32::MIN_POSITIVE) * f32::EPSILON) as f64;
                assert!(
                    ((y - want) as f64).abs() <= ulps(g as f64) * ulp + abs,
                    "act({g}) * {u}: {y} against {want} (gelu: {GELU})"
                );
            }
        }
    }

    /// Within 4 ulp of `g / (1 + e^-g) · u` computed in f64, from -120 to 120. Below g = -88
    /// the true value is under 1e-36 and ours `g · e^-88`-sized, so an absolute 1e-35 is
    /// allowed there.
    #[test]
    fn silu_is_within_4_ulp_of_f64() {
        assert_near_f64::<false>(120.0, |x| x / (1.0 + (-x).exp()), |_| 4.0, 1e-35);
    }

    /// Within `8 + 8·|z|` ulp (plus 1e-30 absolute, where the true value is below 1e-30) of
    /// `x/2 · (1 + tanh(z)) · u` computed in f64 (as `x / (1 + e^(-2z)) · u`, free of f64's
    /// cancellation for z << 0), from -60 to 60.
    /// The `|z|` term: for x < 0 the value is about `x · e^(2z)`, whose relative error is
    /// `2|z|` times that of `z` in f32 (a few ulp). candle's `tanh` form loses more there:
    /// `1 + tanh(z)` cancels (about 25 ulp of the result at z = -2.5, 110 at z = -3.4, and 0
    /// from z = -9 on).
    #[test]
    fn gelu_tanh_times_up_is_close_to_f64() {
        let z = |x: f64| (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        let act = |x: f64| x / (1.0 + (-2.0 * z(x)).exp());
        assert_near_f64::<true>(60.0, act, |x| 8.0 + 8.0 * z(x).abs(), 1e-30);
    }

    /// The AVX-512 form gives the AVX2 form's bits (values spread over the exponent's clamp,
    /// NaN and infinities included), for SwiGLU and GeGLU; and rows fanned out over the pool
    /// give the bits of one-row calls.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_and_fanned_out_rows_give_the_same_bits() {
        if !(super::super::avx2_fma() && std::is_x86_feature_detected!("avx512f")) {
            return;
        }
        let mut seed = 7u64;
        let mut g: Vec<f32> = (0..4099)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 240.0
            })
            .collect();
        g[5] = f32::NAN;
        g[6] = f32::INFINITY;
        g[7] = f32::NEG_INFINITY;
        let u: Vec<f32> = g.iter().map(|v| 1.0 - v * 0.01).collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let (mut a, mut b) = (vec![0f32; g.len()], vec![0f32; g.len()]);
        // SAFETY: AVX-512F, AVX2 and FMA were detected above.
        unsafe {
            gated_mul_avx2::<false>(&mut a, &g, &u);
            gated_mul_avx512::<false>(&mut b, &g, &u);
        }
        assert_eq!(bits(&a), bits(&b), "swiglu");
        unsafe {
            gated_mul_avx2::<true>(&mut a, &g, &u);
            gated_mul_avx512::<true>(&mut b, &g, &u);
        }
        assert_eq!(bits(&a), bits(&b), "geglu");
        // 24 rows of 1536 (fanned out) against each row alone
        let (len, rows) = (1536, 24);
        let data: Vec<f32> = g.iter().cycle().take(2 * len * rows).copied().collect();
        fn view<'a>(data: &'a [f32], offset: usize, lead: &'a [usize]) -> Rows<'a> {
            Rows {
                data,
                offset,
                lead_dims: lead,
                lead_strides: &[2 * 1536],
                len: 1536,
            }
        }
        let (many, one) = ([rows], [1]);
        let all = glu(view(&data, 0, &many), view(&data, len, &many), false);
        for r in 0..rows {
            let at = 2 * len * r;
            let alone = glu(view(&data, at, &one), view(&data, at + len, &one), false);
            assert_eq!(bits(&alone), bits(&all[r * len..(r + 1) * len]), "row {r}");
        }
    }
}
