//! SwiGLU on the CPU: `silu(gate) · up` in one pass over strided views (the two halves of the
//! fused gate/up projection), instead of two elementwise ops on non-contiguous narrows.

use rayon::prelude::*;

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
    pub(super) fn count(&self) -> usize {
        self.lead_dims.iter().product()
    }

    pub(super) fn row(&self, mut r: usize) -> &[f32] {
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
pub(super) fn exp_clamped<const FMA: bool>(t: f32) -> f32 {
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

/// `y = silu(g) · u = g / (1 + e^-g) · u` over equal-length slices.
#[inline(always)]
fn silu_mul<const FMA: bool>(y: &mut [f32], g: &[f32], u: &[f32]) {
    for ((y, g), u) in y.iter_mut().zip(g).zip(u) {
        // max/min rather than clamp: the form measured to vectorize (a NaN g stays NaN in y)
        #[allow(clippy::manual_clamp)]
        let e = exp_clamped::<FMA>((-g).max(-87.0).min(88.0));
        *y = g / (1.0 + e) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(y: &mut [f32], g: &[f32], u: &[f32]) {
    silu_mul::<true>(y, g, u)
}

/// One row of `silu(gate) · up` with the widest form this CPU runs (the same bits on one
/// machine whatever the row count).
fn silu_mul_row(y: &mut [f32], g: &[f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { silu_mul_avx2(y, g, u) };
    }
    silu_mul::<false>(y, g, u)
}

/// Contiguous `silu(gate) · up`, row-major over the leading axes.
pub fn swiglu(gate: Rows<'_>, up: Rows<'_>) -> Vec<f32> {
    assert_eq!(gate.count(), up.count(), "swiglu: row counts differ");
    assert_eq!(gate.len, up.len, "swiglu: row lengths differ");
    let mut out = vec![0f32; gate.count() * gate.len];
    let row = |(r, o): (usize, &mut [f32])| silu_mul_row(o, gate.row(r), up.row(r));
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
        let got = swiglu(view(0), view(5));
        for r in 0..2 {
            for i in 0..5 {
                let (g, u) = (data[r * 10 + i], data[r * 10 + 5 + i]);
                let mut one = [0f32];
                silu_mul_row(&mut one, &[g], &[u]);
                assert_eq!(
                    got[r * 5 + i].to_bits(),
                    one[0].to_bits(),
                    "row {r} lane {i}"
                );
            }
        }
    }

    /// Within 4 ulp of `g / (1 + e^-g) · u` computed in f64, from -120 to 120 (both forms:
    /// fused and separate multiply-adds). Below g = -88 the true value is under 1e-36 and ours
    /// `g · e^-88`-sized, so an absolute 1e-35 is allowed there.
    #[test]
    fn silu_is_within_4_ulp_of_f64() {
        let g: Vec<f32> = (-240_000..=240_000).map(|i| i as f32 * 5e-4).collect();
        let u: Vec<f32> = g.iter().map(|v| 1.0 + v.abs().sin()).collect();
        let mut forms: Vec<Vec<f32>> = vec![vec![0f32; g.len()]];
        silu_mul::<false>(&mut forms[0], &g, &u);
        forms.push(vec![0f32; g.len()]);
        silu_mul_row(&mut forms[1], &g, &u);
        for y in &forms {
            for ((&y, &g), &u) in y.iter().zip(&g).zip(&u) {
                let want = (g as f64 / (1.0 + (-(g as f64)).exp()) * u as f64) as f32;
                let ulp = (want.abs().max(f32::MIN_POSITIVE) * f32::EPSILON) as f64;
                assert!(
                    ((y - want) as f64).abs() <= 4.0 * ulp + 1e-35,
                    "silu({g}) * {u}: {y} against {want}"
                );
            }
        }
    }
}
