//! RMSNorm rows on the CPU, alone or after a residual add, with the bits of candle's
//! `candle_nn::ops::rms_norm` (the arithmetic every CPU test and golden was made with): each
//! row's sum of squares is one serial f32 chain in element order, then
//! `y = x / sqrt(sum / n + eps) * w`.
//!
//! Why: that serial chain is bound by the add's latency (about 1 us for a 576-wide row on the
//! 2-core Xeon), and candle runs rows one after the other, so a 16-row verify block paid
//! sixteen chains. Here the chains of up to [`GROUP`] rows advance together, one row per lane:
//! each row still adds its squares in element order, so a row's bits are the same whatever
//! rows share the call (batch invariance), and a verify block costs about what one row does.
//! The add before the norm (`add_rms_norm`) is fused in, saving a pass and a tensor.

/// Rows whose sums advance together.
const GROUP: usize = 16;

/// `x` is `rows` contiguous rows of `w.len()` values; `out` gets their norms. With
/// `add = (a, sum)`, each row is first `x + a` (same shape), written to `sum` (the residual
/// stream), and that is what is normalized.
pub fn rms_norm_rows(
    x: &[f32],
    add: Option<(&[f32], &mut [f32])>,
    w: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let d = w.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d),
        "rms_norm: rows do not fit"
    );
    assert_eq!(out.len(), x.len(), "rms_norm: out length");
    if let Some((a, s)) = &add {
        assert!(
            a.len() == x.len() && s.len() == x.len(),
            "rms_norm: add lengths"
        );
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected; the lengths were checked above.
        unsafe { rows_avx512(x, add, w, eps, out) };
        return;
    }
    rows_body::<false>(x, add, w, eps, out)
}

/// [`rows_body`] compiled for AVX-512 (its element loops on 16 lanes; the same operations).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_avx512(
    x: &[f32],
    add: Option<(&[f32], &mut [f32])>,
    w: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    rows_body::<true>(x, add, w, eps, out)
}

#[inline(always)]
fn rows_body<const AVX512: bool>(
    x: &[f32],
    mut add: Option<(&[f32], &mut [f32])>,
    w: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let d = w.len();
    let rows = x.len() / d;
    let mut r0 = 0;
    while r0 < rows {
        let g = (rows - r0).min(GROUP);
        let span = r0 * d..(r0 + g) * d;
        // the rows to normalize: x itself, or x + a written into `sum`
        let src: &[f32] = match &mut add {
            Some((a, sum)) => {
                let s = &mut sum[span.clone()];
                for ((o, &p), &q) in s.iter_mut().zip(&x[span.clone()]).zip(&a[span.clone()]) {
                    *o = p + q;
                }
                s
            }
            None => &x[span.clone()],
        };
        let mut acc = [0f32; GROUP];
        sums::<AVX512>(src, d, g, &mut acc);
        for (r, (row, o)) in src
            .chunks_exact(d)
            .zip(out[span].chunks_exact_mut(d))
            .enumerate()
        {
            let m = (acc[r] / d as f32 + eps).sqrt();
            for ((o, &v), &wj) in o.iter_mut().zip(row).zip(w) {
                *o = v / m * wj;
            }
        }
        r0 += g;
    }
}

/// `acc[r]` = row `r`'s sum of squares, added in element order (`g` rows of `d` in `src`).
#[inline(always)]
fn sums<const AVX512: bool>(src: &[f32], d: usize, g: usize, acc: &mut [f32; GROUP]) {
    #[cfg(target_arch = "x86_64")]
    if AVX512 && g > 1 {
        // SAFETY: AVX512 is set only under AVX-512F; `src` holds g rows of d values.
        unsafe { sums_avx512(src, d, g, acc) };
        return;
    }
    // rows interleaved in one loop: g independent chains, each in element order
    for j in 0..d {
        for (r, a) in acc.iter_mut().enumerate().take(g) {
            let v = src[r * d + j];
            *a += v * v;
        }
    }
}

/// The chains as the 16 lanes of one register: lane `r` gathers row `r`'s element `j`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sums_avx512(src: &[f32], d: usize, g: usize, acc: &mut [f32; GROUP]) {
    use std::arch::x86_64::*;
    debug_assert!(src.len() >= g * d && g <= GROUP);
    let mask: __mmask16 = if g == GROUP { 0xffff } else { (1u16 << g) - 1 };
    let idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(d as i32),
    );
    let mut s = _mm512_setzero_ps();
    let p = src.as_ptr();
    for j in 0..d {
        let v = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, idx, p.add(j));
        s = _mm512_add_ps(s, _mm512_mul_ps(v, v));
    }
    _mm512_storeu_ps(acc.as_mut_ptr(), s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Values in [-3, 3).
    fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
        let v = crate::backend::cpu::qpack::testing::rand_vec(n, seed);
        v.into_iter().map(|x| x * 6.0).collect()
    }

    /// Every row count from 1 to 40 (groups of 16, a partial last group), several widths: the
    /// bits of candle's rms_norm, with and without the fused add.
    #[test]
    fn rows_give_candles_bits() {
        let mut seed = 11;
        for d in [1, 7, 64, 576, 1000] {
            for rows in [1, 2, 3, 15, 16, 17, 33, 40] {
                let x = rand_vec(rows * d, &mut seed);
                let a = rand_vec(rows * d, &mut seed);
                let w = rand_vec(d, &mut seed);
                let eps = 1e-5;
                let want = |x: &[f32]| -> Vec<f32> {
                    let xt = Tensor::from_slice(x, (rows, d), &Device::Cpu).unwrap();
                    let wt = Tensor::from_slice(&w, d, &Device::Cpu).unwrap();
                    let y = candle_nn::ops::rms_norm(&xt, &wt, eps).unwrap();
                    y.flatten_all().unwrap().to_vec1().unwrap()
                };
                let mut out = vec![0f32; rows * d];
                rms_norm_rows(&x, None, &w, eps, &mut out);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want(&x)), "d {d} rows {rows}");
                let s: Vec<f32> = x.iter().zip(&a).map(|(p, q)| p + q).collect();
                let mut sum = vec![0f32; rows * d];
                rms_norm_rows(&x, Some((&a, &mut sum)), &w, eps, &mut out);
                assert_eq!(bits(&sum), bits(&s), "sum d {d} rows {rows}");
                assert_eq!(bits(&out), bits(&want(&s)), "add d {d} rows {rows}");
            }
        }
    }

    /// A row's bits do not depend on its neighbours or its place in the call.
    #[test]
    fn a_rows_bits_do_not_depend_on_the_others() {
        let mut seed = 5;
        let d = 576;
        let rows = 20;
        let x = rand_vec(rows * d, &mut seed);
        let w = rand_vec(d, &mut seed);
        let mut all = vec![0f32; rows * d];
        rms_norm_rows(&x, None, &w, 1e-6, &mut all);
        for r in 0..rows {
            let mut one = vec![0f32; d];
            rms_norm_rows(&x[r * d..(r + 1) * d], None, &w, 1e-6, &mut one);
            assert_eq!(one, all[r * d..(r + 1) * d].to_vec(), "row {r}");
        }
    }

    /// NaN and infinities go where candle's arithmetic takes them (NaN rows stay NaN).
    #[test]
    fn non_finite_rows_follow_candle() {
        let d = 32;
        let mut x = vec![0.5f32; 3 * d];
        x[3] = f32::NAN;
        x[d + 4] = f32::INFINITY;
        let w = vec![1.0f32; d];
        let mut out = vec![0f32; 3 * d];
        rms_norm_rows(&x, None, &w, 1e-6, &mut out);
        let xt = Tensor::from_slice(&x, (3, d), &Device::Cpu).unwrap();
        let wt = Tensor::from_slice(&w, d, &Device::Cpu).unwrap();
        let want: Vec<f32> = candle_nn::ops::rms_norm(&xt, &wt, 1e-6)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&want));
    }

    /// ns per call by rows (576 wide, the demo's), against candle's rms_norm and add.
    #[test]
    #[ignore]
    fn rms_norm_timing() {
        let mut seed = 3;
        let d = 576;
        for rows in [1, 4, 8, 16] {
            let x = rand_vec(rows * d, &mut seed);
            let a = rand_vec(rows * d, &mut seed);
            let w = rand_vec(d, &mut seed);
            let (mut out, mut sum) = (vec![0f32; rows * d], vec![0f32; rows * d]);
            let reps = 20000;
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                rms_norm_rows(&x, Some((&a, &mut sum)), &w, 1e-5, &mut out);
            }
            let ours = t0.elapsed().as_nanos() as f64 / reps as f64;
            let xt = Tensor::from_slice(&x, (rows, d), &Device::Cpu).unwrap();
            let at = Tensor::from_slice(&a, (rows, d), &Device::Cpu).unwrap();
            let wt = Tensor::from_slice(&w, d, &Device::Cpu).unwrap();
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                let s = (&xt + &at).unwrap();
                std::hint::black_box(candle_nn::ops::rms_norm(&s, &wt, 1e-5).unwrap());
            }
            let theirs = t0.elapsed().as_nanos() as f64 / reps as f64;
            println!("rows {rows}: ours {ours:.0} ns, candle add + rms_norm {theirs:.0} ns");
        }
    }
}
