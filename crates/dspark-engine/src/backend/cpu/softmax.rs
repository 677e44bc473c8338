//! The exponentials of an attention row's softmax, 16 lanes at a time (AVX-512, or AVX2 as two
//! halves).
//!
//! `s_j <- exp(s_j - max)` and their sum. A decode row over a few hundred keys spent most of
//! its time in the scalar `f32::exp` calls; here a range reduction `x = n·ln2 + r` and a
//! degree-6 polynomial for `exp(r)` (the classic Cephes coefficients, |r| <= ln2/2, within
//! 2 ulp of `exp` over the softmax's range) run in vector registers, with `2^n` applied by
//! `scalef`. Arguments below about -87.3 give 0 (their true value is below 1e-38, far under
//! what a probability row can resolve against its maximum, which is exp(0) = 1).
//!
//! The portable path runs the same polynomial per element with fused multiply-adds, so both
//! paths agree to the last bit; the sum is accumulated in 16 lanes and reduced in a fixed
//! order, so a row's result never depends on who calls it (batch invariance).

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const MIN_ARG: f32 = -87.336_55;
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

/// `exp` of one argument by the vector path's arithmetic (0 below [`MIN_ARG`]).
fn exp1(x: f32) -> f32 {
    if x < MIN_ARG {
        return 0.0;
    }
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = P[0];
    for c in &P[1..] {
        p = p.mul_add(r, *c);
    }
    let p = p.mul_add(r * r, r) + 1.0;
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Replaces each `s` by `exp(s - max)` and returns their sum.
pub fn exp_shifted(scores: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: AVX-512F detected at run time.
        return unsafe { avx512::exp_shifted(scores, max) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        // SAFETY: AVX2 and FMA detected at run time.
        return unsafe { avx2::exp_shifted(scores, max) };
    }
    let mut lanes = [0f32; 16];
    for chunk in scores.chunks_mut(16) {
        for (l, s) in chunk.iter_mut().enumerate() {
            *s = exp1(*s - max);
            lanes[l] += *s;
        }
    }
    reduce16(&lanes)
}

/// The fixed reduction order of 16 lane sums (halving, as the vector path does).
fn reduce16(l: &[f32; 16]) -> f32 {
    let mut v = *l;
    let mut w = 8;
    while w > 0 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn exp16(x: __m512) -> __m512 {
        let small = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(MIN_ARG));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let mut p = _mm512_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
        }
        let p = _mm512_add_ps(
            _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
            _mm512_set1_ps(1.0),
        );
        // 2^n by building the exponent bits, exactly as the scalar path does
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        let y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
        _mm512_maskz_mov_ps(!small, y)
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn exp_shifted(scores: &mut [f32], max: f32) -> f32 {
        let m = _mm512_set1_ps(max);
        let mut acc = _mm512_setzero_ps();
        let mut chunks = scores.chunks_exact_mut(16);
        for c in &mut chunks {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m));
            _mm512_storeu_ps(c.as_mut_ptr(), e);
            acc = _mm512_add_ps(acc, e);
        }
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), acc);
        for (l, s) in chunks.into_remainder().iter_mut().enumerate() {
            *s = exp1(*s - max);
            lanes[l] += *s;
        }
        reduce16(&lanes)
    }
}

/// The AVX2 form: the 16 lanes as two 8-lane halves, each element's arithmetic that of
/// [`exp1`] (same bits), the sums in the same 16 lanes and order.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let keep = _mm256_cmp_ps::<_CMP_NLT_UQ>(x, _mm256_set1_ps(MIN_ARG));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let p = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted(scores: &mut [f32], max: f32) -> f32 {
        let m = _mm256_set1_ps(max);
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut chunks = scores.chunks_exact_mut(16);
        for c in &mut chunks {
            let p = c.as_mut_ptr();
            let a = exp8(_mm256_sub_ps(_mm256_loadu_ps(p), m));
            let b = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(8)), m));
            _mm256_storeu_ps(p, a);
            _mm256_storeu_ps(p.add(8), b);
            lo = _mm256_add_ps(lo, a);
            hi = _mm256_add_ps(hi, b);
        }
        let mut lanes = [0f32; 16];
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
        for (l, s) in chunks.into_remainder().iter_mut().enumerate() {
            *s = exp1(*s - max);
            lanes[l] += *s;
        }
        reduce16(&lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_to_exp_over_the_softmax_range() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            let (got, want) = (exp1(x) as f64, (x as f64).exp());
            worst = worst.max((got - want).abs() / want);
            x += 0.001_37;
        }
        assert!(worst < 3.0 * f32::EPSILON as f64, "rel err {worst:e}");
        assert_eq!(exp1(0.0), 1.0);
        assert_eq!(exp1(-100.0), 0.0);
    }

    #[test]
    fn vector_and_portable_paths_agree_bit_for_bit() {
        let mut seed = 7u64;
        for len in [0usize, 1, 5, 16, 17, 63, 300, 1025] {
            let scores: Vec<f32> = (0..len)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 40) as f32 / (1u64 << 24) as f32) * 110.0 - 100.0
                })
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut a = scores.clone();
            let sa = exp_shifted(&mut a, max);
            let mut lanes = [0f32; 16];
            let mut b = scores.clone();
            for chunk in b.chunks_mut(16) {
                for (l, s) in chunk.iter_mut().enumerate() {
                    *s = exp1(*s - max);
                    lanes[l] += *s;
                }
            }
            let sb = reduce16(&lanes);
            assert_eq!(sa.to_bits(), sb.to_bits(), "sum, len {len}");
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.to_bits(), y.to_bits(), "len {len}");
            }
            let want: f64 = scores.iter().map(|s| ((s - max) as f64).exp()).sum();
            assert!(
                (sa as f64 - want).abs() <= 1e-5 * want.max(1e-30),
                "len {len}"
            );
        }
    }
}
