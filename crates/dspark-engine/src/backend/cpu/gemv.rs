//! Decode GEMV on the CPU: `y[m, n] = x[m, k] · w[n, k]ᵀ` for a few rows `m` (one decode step
//! or one verify block), f32, bf16 or f16 weights streamed once, columns split across threads. The
//! x86 kernels are in [`avx2`] (AVX2 + FMA: one-row decode on every x86 CPU, and several rows
//! where AVX-512 is missing) and [`avx512_rows`] (several rows on AVX-512 CPUs, with the same
//! per-output arithmetic); other CPUs run a portable dot per output.
//!
//! Batch invariance: each `(row, column)` dot product runs the same instruction sequence
//! whatever `m` is and however columns are split, so a verify block of L rows gives the same
//! bits as L one-row decode steps. Greedy speculative output then equals the baseline by
//! construction, not by luck at near-ties.

/// Rows up to which the tile path runs any call on a CPU without AVX-512 (longer prefill
/// chunks go to candle's blocked GEMM there); with AVX-512 the tile path takes every row count
/// (see [`takes_rows`]).
pub const MAX_ROWS: usize = 32;

/// Whether [`gemv_f32`] / [`gemv_narrow`] should run an `m`-row product rather than a blocked
/// GEMM. With AVX-512 the register tile, blocked by rows for the L2, also runs prefill chunks
/// (its wider form measured 840-910 tok/s on the demo's MT-Bench prompts against 690 through
/// candle's GEMM), needs no f32 copy of bf16 weights, and keeps prefill rows batch-invariant too.
pub fn takes_rows(m: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return true;
    }
    m <= MAX_ROWS
}

/// `y[m * n]` (row-major) from `x[m * k]` and f32 weights `w[n * k]` (row-major `[out, in]`).
/// Panics on inconsistent slice lengths (callers check shapes first).
pub fn gemv_f32(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return avx2::gemv(x, m, k, w, n, y);
    }
    drive(x, m, k, w, n, y, portable::dot_f32)
}

/// Weights held narrower than f32 (bf16, f16) that the GEMV widens to f32 in registers,
/// exactly (bf16 by a shift, f16 by F16C), so their products have the bits of an f32 copy's.
#[cfg(target_arch = "x86_64")]
pub(crate) trait Narrow: avx2::Load + Into<f32> {}
/// Weights held narrower than f32 (bf16, f16), widened to f32 exactly.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) trait Narrow: Copy + Sync + Into<f32> {}
impl Narrow for half::bf16 {}
impl Narrow for half::f16 {}

/// As [`gemv_f32`] for bf16 or f16 weights (activations stay f32), at half the bytes.
pub(crate) fn gemv_narrow<T: Narrow>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[T],
    n: usize,
    y: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return avx2::gemv(x, m, k, w, n, y);
    }
    drive(x, m, k, w, n, y, portable::dot_narrow)
}

/// One f32 dot product (AVX2 or portable; the attention kernels' dot, the same bits whatever
/// the caller).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time; equal lengths checked above.
        return unsafe { x86::dot_f32(a, b) };
    }
    portable::dot_f32(a, b)
}

/// `y += alpha * x`: fused multiply-adds 16 lanes at a time where AVX-512 is present, else a
/// plain loop the compiler vectorises. Either way each element's arithmetic is fixed, so the
/// attention rows that use it stay batch-invariant.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: AVX-512F detected at run time; equal lengths checked above.
        return unsafe { avx512::axpy(alpha, x, y) };
    }
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

fn drive<T: Sync>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[T],
    n: usize,
    y: &mut [f32],
    dot: impl Fn(&[f32], &[T]) -> f32 + Sync,
) {
    assert_eq!(x.len(), m * k, "gemv: x is not m*k");
    assert_eq!(w.len(), n * k, "gemv: w is not n*k");
    assert_eq!(y.len(), m * n, "gemv: y is not m*n");
    super::column_tasks(y, n, n * k * m, |cols| {
        for j in cols.j0..cols.j1 {
            let wj = &w[j * k..(j + 1) * k];
            for r in 0..m {
                cols.set(r, j, dot(&x[r * k..(r + 1) * k], wj));
            }
        }
    });
}

/// Fallback for CPUs without AVX2/FMA (and other architectures): 8 independent partial sums,
/// which LLVM keeps in vector registers, combined in a fixed order.
mod portable {
    pub fn dot_f32(x: &[f32], w: &[f32]) -> f32 {
        dot_by(x, w.len(), |i| w[i])
    }

    pub fn dot_narrow<T: super::Narrow>(x: &[f32], w: &[T]) -> f32 {
        dot_by(x, w.len(), |i| w[i].into())
    }

    fn dot_by(x: &[f32], k: usize, w: impl Fn(usize) -> f32) -> f32 {
        let mut acc = [0f32; 8];
        let mut i = 0;
        while i + 8 <= k {
            for (l, a) in acc.iter_mut().enumerate() {
                *a += x[i + l] * w(i + l);
            }
            i += 8;
        }
        let mut s =
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        while i < k {
            s += x[i] * w(i);
            i += 1;
        }
        s
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512_rows;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::{f32_tile, with_scratch, TileOut};
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum as hsum8;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        crate::backend::cpu::avx2_fma()
    }

    /// Horizontal sum of 8 lanes in a fixed order (every AVX2 kernel's reduction).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0b01));
        _mm_cvtss_f32(s)
    }

    /// Four 8-lane accumulators over 32-wide steps, then 8-wide steps, then scalar FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_f32(x: &[f32], w: &[f32]) -> f32 {
        let k = x.len();
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= k {
            for (j, acc) in a.iter_mut().enumerate() {
                let o = i + 8 * j;
                *acc =
                    _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(o)), _mm256_loadu_ps(wp.add(o)), *acc);
            }
            i += 32;
        }
        while i + 8 <= k {
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(wp.add(i)), a[0]);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ));
        while i < k {
            s = x[i].mul_add(w[i], s);
            i += 1;
        }
        s
    }
}

/// AVX-512 detection and the attention rows' `axpy`; the GEMV itself runs [`avx2`]'s tiles
/// on these CPUs too.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        super::x86::available()
            && crate::backend::cpu::gemv_avx512_allowed()
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        let a = _mm512_set1_ps(alpha);
        let n = x.len();
        let mut i = 0;
        while i + 16 <= n {
            let yv = _mm512_loadu_ps(y.as_ptr().add(i));
            let r = _mm512_fmadd_ps(a, _mm512_loadu_ps(x.as_ptr().add(i)), yv);
            _mm512_storeu_ps(y.as_mut_ptr().add(i), r);
            i += 16;
        }
        for t in i..n {
            y[t] = alpha.mul_add(x[t], y[t]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        let mut y = vec![0f32; m * n];
        for r in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|i| x[r * k + i] as f64 * w[j * k + i] as f64)
                    .sum();
                y[r * n + j] = s as f32;
            }
        }
        y
    }

    /// Max |a - b|; any NaN fails.
    fn max_err(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).fold(0f32, |m, (x, y)| {
            assert!(!x.is_nan() && !y.is_nan(), "NaN");
            m.max((x - y).abs())
        })
    }

    #[test]
    fn f32_and_bf16_match_f64_reference_and_rows_are_invariant() {
        let mut seed = 3;
        // k: multiples of 32, of 8 only, and odd; n: below and above one task; m from one row
        // to a prefill chunk that spans two row blocks
        for &(m, k, n) in &[
            (1, 576, 1536),
            (5, 576, 200),
            (3, 1536, 70),
            (7, 77, 33),
            (32, 40, 9),
            (131, 96, 50),
        ] {
            let x = rand_vec(m * k, &mut seed);
            let w = rand_vec(n * k, &mut seed);
            let mut y = vec![0f32; m * n];
            gemv_f32(&x, m, k, &w, n, &mut y);
            // |x|,|w| <= 0.5: |y| <= k/4, and f32 rounding of k terms stays far below 1e-5 * k
            let bound = 2e-6 * k as f32;
            assert!(max_err(&y, &reference(&x, m, k, &w, n)) < bound);
            let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let wbf: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
            let mut yb = vec![0f32; m * n];
            gemv_narrow(&x, m, k, &wb, n, &mut yb);
            assert!(max_err(&yb, &reference(&x, m, k, &wbf, n)) < bound);
            for r in 0..m {
                let mut one = vec![0f32; n];
                gemv_f32(&x[r * k..(r + 1) * k], 1, k, &w, n, &mut one);
                assert_eq!(
                    one[..],
                    y[r * n..(r + 1) * n],
                    "row {r} of {m} differs from alone"
                );
                gemv_narrow(&x[r * k..(r + 1) * k], 1, k, &wb, n, &mut one);
                assert_eq!(
                    one[..],
                    yb[r * n..(r + 1) * n],
                    "bf16: row {r} of {m} differs from alone"
                );
            }
        }
    }

    /// f16 weights give exactly the bits of the same product over their f32 copy (the widening
    /// is exact and the tiles are the same), on every path: one row, AVX2 and AVX-512 row tiles,
    /// odd k, and weights with f16 subnormals and the largest f16 values.
    #[test]
    fn f16_weights_give_the_f32_copys_bits() {
        let mut seed = 11;
        for &(m, k, n) in &[(1, 576, 1536), (9, 576, 70), (4, 77, 33), (70, 96, 21)] {
            let x = rand_vec(m * k, &mut seed);
            let mut wh: Vec<half::f16> = rand_vec(n * k, &mut seed)
                .iter()
                .map(|&v| half::f16::from_f32(v))
                .collect();
            wh[0] = half::f16::from_bits(0x0001); // the smallest subnormal
            wh[k + 1] = half::f16::MAX;
            wh[2 * k - 1] = half::f16::from_bits(0x83ff); // a negative subnormal
            let wf: Vec<f32> = wh.iter().map(|v| v.to_f32()).collect();
            let (mut yh, mut yf) = (vec![0f32; m * n], vec![0f32; m * n]);
            gemv_narrow(&x, m, k, &wh, n, &mut yh);
            gemv_f32(&x, m, k, &wf, n, &mut yf);
            assert_eq!(yh, yf, "m{m} k{k} n{n}");
            #[cfg(target_arch = "x86_64")]
            if x86::available() {
                for wide in [false, avx512_rows::available()] {
                    avx2::gemv_tiles(&x, m, k, &wh, n, &mut yh, wide);
                    assert_eq!(yh, yf, "tiles (wide {wide}) m{m} k{k} n{n}");
                }
            }
            let mut port = vec![0f32; m * n];
            drive(&x, m, k, &wh, n, &mut port, portable::dot_narrow);
            let mut port_f = vec![0f32; m * n];
            drive(&x, m, k, &wf, n, &mut port_f, portable::dot_f32);
            assert_eq!(port, port_f, "portable m{m} k{k} n{n}");
        }
    }

    /// Both decode walks (one column at a time, and column pairs with prefetch) give the same
    /// bits as each other and as the row tiles, for f32, bf16 and f16 weights, odd column
    /// counts (a pair's second column missing), k with a tail, and matrices large enough to
    /// fan out over threads and to end inside a pair's prefetch window.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn decode_walks_give_the_same_bits() {
        use avx2::{decode_on, Walk};
        if !x86::available() {
            eprintln!("skipped: this CPU lacks AVX2/FMA");
            return;
        }
        let mut seed = 13u64;
        for &(k, n) in &[(576, 1537), (77, 33), (1536, 576), (8, 3), (576, 4096)] {
            let x = rand_vec(k, &mut seed);
            let w = rand_vec(n * k, &mut seed);
            let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let wh: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            let mut rows = vec![0f32; 2 * n];
            let x2: Vec<f32> = x.iter().chain(&x).copied().collect();
            gemv_f32(&x2, 2, k, &w, n, &mut rows);
            for walk in [Walk::OneColumn, Walk::Pairs] {
                let (mut y, mut yb, mut yh) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
                decode_on(&x, k, &w, n, &mut y, walk);
                decode_on(&x, k, &wb, n, &mut yb, walk);
                decode_on(&x, k, &wh, n, &mut yh, walk);
                assert_eq!(y[..], rows[..n], "{walk:?} k{k} n{n}: f32 vs the row tiles");
                let mut want = vec![0f32; n];
                gemv_narrow(&x2[..k], 1, k, &wb, n, &mut want);
                assert_eq!(yb, want, "{walk:?} k{k} n{n}: bf16");
                gemv_narrow(&x2[..k], 1, k, &wh, n, &mut want);
                assert_eq!(yh, want, "{walk:?} k{k} n{n}: f16");
            }
        }
    }

    /// The AVX-512 row tiles against the AVX2 ones: the same per-output arithmetic, so the same
    /// bits for every row count, k (with and without a tail) and column count (odd ones leave a
    /// pair half empty).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_rows_give_the_avx2_bits() {
        if !(x86::available() && avx512_rows::available()) {
            eprintln!("skipped: this CPU lacks AVX-512F/VL");
            return;
        }
        let mut seed = 7u64;
        for &(m, k, n) in &[
            (2, 576, 64),
            (9, 576, 1537),
            (5, 83, 33),
            (13, 1536, 50),
            (17, 64, 7),
            (70, 96, 21),
        ] {
            let (x, w) = (rand_vec(m * k, &mut seed), rand_vec(n * k, &mut seed));
            let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let mut y = [vec![0f32; m * n], vec![0f32; m * n]];
            let mut yb = y.clone();
            for (wide, (yf, ybf)) in [false, true].into_iter().zip(y.iter_mut().zip(&mut yb)) {
                avx2::gemv_tiles(&x, m, k, &w, n, yf, wide);
                avx2::gemv_tiles(&x, m, k, &wb, n, ybf, wide);
            }
            assert_eq!(y[0], y[1], "f32 m{m} k{k} n{n}");
            assert_eq!(yb[0], yb[1], "bf16 m{m} k{k} n{n}");
            assert!(y[0].iter().any(|v| *v != 0.0), "m{m} k{k} n{n}: all zero");
        }
    }
}

#[cfg(test)]
mod timing;
