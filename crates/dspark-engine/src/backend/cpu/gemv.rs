//! Decode GEMV on the CPU: `y[m, n] = x[m, k] · w[n, k]ᵀ` for a few rows `m` (one decode step
//! or one verify block), f32 or bf16 weights streamed once, columns split across threads.
//!
//! Batch invariance: each `(row, column)` dot product runs the same instruction sequence
//! whatever `m` is and however columns are split, so a verify block of L rows gives the same
//! bits as L one-row decode steps. Greedy speculative output then equals the baseline by
//! construction, not by luck at near-ties.

/// Rows up to which the one-column dot path is used for any row count; with AVX-512 the tile
/// path takes every row count (see [`takes_rows`]).
pub const MAX_ROWS: usize = 32;

/// Whether [`gemv_f32`] / [`gemv_bf16`] should run an `m`-row product rather than a blocked
/// GEMM. With AVX-512 the register tile, blocked by rows for the L2, also runs prefill chunks:
/// on the demo's MT-Bench prompts it prefills at 840-910 tok/s against 690 through candle's
/// GEMM (and as fast on a 1,500-token prompt), needs no f32 copy of bf16 weights, and keeps
/// prefill rows batch-invariant too.
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
    if m >= avx512::TILE_ROWS && avx512::available() {
        return avx512::gemv(x, m, k, w, n, y);
    }
    #[cfg(target_arch = "x86_64")]
    if m >= avx2::TILE_ROWS && x86::available() {
        return avx2::gemv(x, m, k, w, n, y);
    }
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return drive(x, m, k, w, n, y, |a, b| unsafe { x86::dot_f32(a, b) });
    }
    drive(x, m, k, w, n, y, portable::dot_f32)
}

/// As [`gemv_f32`] for bf16 weights (widened to f32 in registers; activations stay f32).
pub fn gemv_bf16(x: &[f32], m: usize, k: usize, w: &[half::bf16], n: usize, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if m >= avx512::TILE_ROWS && avx512::available() {
        return avx512::gemv(x, m, k, w, n, y);
    }
    #[cfg(target_arch = "x86_64")]
    if m >= avx2::TILE_ROWS && x86::available() {
        return avx2::gemv(x, m, k, w, n, y);
    }
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return drive(x, m, k, w, n, y, |a, b| unsafe { x86::dot_bf16(a, b) });
    }
    drive(x, m, k, w, n, y, portable::dot_bf16)
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

    pub fn dot_bf16(x: &[f32], w: &[half::bf16]) -> f32 {
        dot_by(x, w.len(), |i| w[i].to_f32())
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
mod avx2;
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

    /// The end of [`dot_f32`] / [`dot_bf16`] from its four accumulators: their sum in the
    /// dot's order, then the scalar tail `from..k` of row `xr` against column `wc`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn finish<T: super::avx512::Load>(
        a: &[__m256; 4],
        xr: *const f32,
        wc: *const T,
        from: usize,
        k: usize,
    ) -> f32 {
        let mut s = hsum(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ));
        for t in from..k {
            s = (*xr.add(t)).mul_add((*wc.add(t)).one(), s);
        }
        s
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

    /// bf16 -> f32 is a 16-bit left shift of the bits.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_bf16(p: *const half::bf16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_bf16(x: &[f32], w: &[half::bf16]) -> f32 {
        let k = x.len();
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= k {
            for (j, acc) in a.iter_mut().enumerate() {
                let o = i + 8 * j;
                *acc = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(o)), load_bf16(wp.add(o)), *acc);
            }
            i += 32;
        }
        while i + 8 <= k {
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), load_bf16(wp.add(i)), a[0]);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ));
        while i < k {
            s = x[i].mul_add(w[i].to_f32(), s);
            i += 1;
        }
        s
    }
}

/// Verify blocks (3 or more rows) with AVX-512's 32 vector registers: a tile of up to 4 rows
/// × 3 columns shares each load, and every output runs exactly the arithmetic of
/// [`x86::dot_f32`] / [`x86::dot_bf16`]. That dot keeps four 8-lane accumulators over 32-wide
/// steps; here each pair of them is one 16-lane register (lanes 0-7 are the first accumulator,
/// 8-15 the second), and a fused multiply-add is per lane, so every lane sees the same
/// operations in the same order. The halves are split back out for the same horizontal sum,
/// then the same 8-wide and scalar tails. A verify row therefore gives the bits of a one-row
/// decode step, which streams one column at a time (the fastest way to read the weights at
/// m = 1: measured 15-20% faster than 16-lane code there), while the tile does twice the work
/// per instruction of the 8-lane tile it replaces.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        super::x86::available()
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
    }

    /// Weights from `p`, widened to f32: 16 (`load16`), 8 (`load8`) or one (the scalar tail).
    pub trait Load: Copy + Sync {
        /// # Safety
        /// AVX-512F available; 16 elements readable at `p`.
        unsafe fn load16(p: *const Self) -> __m512;
        /// # Safety
        /// AVX2 available; 8 elements readable at `p`.
        unsafe fn load8(p: *const Self) -> __m256;
        fn one(self) -> f32;
    }

    impl Load for f32 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load8(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        fn one(self) -> f32 {
            self
        }
    }

    impl Load for half::bf16 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const half::bf16) -> __m512 {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load8(p: *const half::bf16) -> __m256 {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        }
        fn one(self) -> f32 {
            self.to_f32()
        }
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

    const ROWS: usize = 4;
    const COLS: usize = 3;
    /// Prefetch distance in columns (two column tiles). Every row tile prefetches an equal
    /// share, so the stream keeps flowing: the demo's weights with 9 rows took 22 ms with no
    /// prefetch, 16.5 ms when only the first row tile prefetched, 13 ms spread (one row: 8.2).
    const PREFETCH_COLS: usize = 2 * COLS;
    /// Rows per block in a prefill chunk: 64 rows of k = 1536 f32 activations are 384 KiB,
    /// inside the 1 MiB L2 with the weight tiles.
    const ROW_BLOCK: usize = 64;

    /// Rows below this go through the one-column dot (the decode path).
    pub const TILE_ROWS: usize = 3;

    /// Cache lines `first..end` after `base` for one tile to prefetch, `per_step` per 32-wide
    /// step of its loop.
    #[derive(Clone, Copy)]
    pub(super) struct Prefetch {
        pub(super) base: *const i8,
        pub(super) first: usize,
        pub(super) end: usize,
        pub(super) per_step: usize,
    }

    impl Prefetch {
        pub(super) const NONE: Prefetch = Prefetch {
            base: std::ptr::null(),
            first: 0,
            end: 0,
            per_step: 0,
        };
    }

    pub fn gemv<T: Load>(x: &[f32], m: usize, k: usize, w: &[T], n: usize, y: &mut [f32]) {
        assert_eq!(x.len(), m * k, "gemv: x is not m*k");
        assert_eq!(w.len(), n * k, "gemv: w is not n*k");
        assert_eq!(y.len(), m * n, "gemv: y is not m*n");
        super::super::column_tasks(y, n, n * k * m, |cols| {
            let mut out = [[0f32; COLS]; ROWS];
            // balanced row tiles (9 rows: 3 + 3 + 3, not 4 + 4 + 1)
            let per = m.min(ROW_BLOCK).div_ceil(m.min(ROW_BLOCK).div_ceil(ROWS));
            // prefill: blocks of rows small enough for L2, each streaming the columns once
            // cache lines of one column tile, and each row tile's share of them (fixed per block)
            let lines = (COLS * k * std::mem::size_of::<T>()).div_ceil(64);
            for b0 in (0..m).step_by(ROW_BLOCK) {
                let b1 = (b0 + ROW_BLOCK).min(m);
                let share = lines.div_ceil((b1 - b0).div_ceil(per));
                let per_step = share.div_ceil((k / 32).max(1));
                for j in (cols.j0..cols.j1).step_by(COLS) {
                    let nc = (cols.j1 - j).min(COLS);
                    for r0 in (b0..b1).step_by(per) {
                        let nr = (b1 - r0).min(per);
                        // every row tile prefetches its share of the column tile
                        // PREFETCH_COLS ahead, so the weight stream keeps flowing while the
                        // later row tiles compute from L1
                        let pf = if j + PREFETCH_COLS + COLS <= cols.j1 {
                            let t = (r0 - b0) / per;
                            // SAFETY: column j + PREFETCH_COLS + COLS - 1 < n exists; a
                            // prefetch never faults, and lines stay inside that column tile.
                            let base = unsafe { w.as_ptr().add((j + PREFETCH_COLS) * k) };
                            Prefetch {
                                base: base as *const i8,
                                first: t * share,
                                end: ((t + 1) * share).min(lines),
                                per_step,
                            }
                        } else {
                            Prefetch::NONE
                        };
                        // SAFETY: AVX-512F/VL, AVX2 and FMA detected; rows r0..r0+nr of x and
                        // columns j..j+nc of w exist (lengths asserted above).
                        unsafe { dispatch(x, r0, nr, w, j, nc, k, pf, &mut out) };
                        for (i, row) in out[..nr].iter().enumerate() {
                            for (c, v) in row[..nc].iter().enumerate() {
                                cols.set(r0 + i, j + c, *v);
                            }
                        }
                    }
                }
            }
        });
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
    unsafe fn dispatch<T: Load>(
        x: &[f32],
        r0: usize,
        nr: usize,
        w: &[T],
        j: usize,
        nc: usize,
        k: usize,
        pf: Prefetch,
        out: &mut [[f32; COLS]; ROWS],
    ) {
        let (xp, wp) = (x.as_ptr().add(r0 * k), w.as_ptr().add(j * k));
        macro_rules! go {
            ($($r:literal, $c:literal);*) => {
                match (nr, nc) {
                    $(($r, $c) => tile::<$r, $c, T>(xp, wp, k, pf, out),)*
                    _ => unreachable!("tile {nr}x{nc}"),
                }
            };
        }
        go!(1, 1; 1, 2; 1, 3; 2, 1; 2, 2; 2, 3; 3, 1; 3, 2; 3, 3; 4, 1; 4, 2; 4, 3)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
    unsafe fn tile<const R: usize, const C: usize, T: Load>(
        xp: *const f32,
        wp: *const T,
        k: usize,
        pf: Prefetch,
        out: &mut [[f32; COLS]; ROWS],
    ) {
        // z[r][c][h]: lanes 0-7 = the dot's accumulator 2h, lanes 8-15 = accumulator 2h+1
        let mut z = [[[_mm512_setzero_ps(); 2]; C]; R];
        let mut i = 0;
        let mut line = pf.first;
        while i + 32 <= k {
            for _ in 0..pf.per_step {
                if line < pf.end {
                    _mm_prefetch::<_MM_HINT_T0>(pf.base.add(64 * line));
                    line += 1;
                }
            }
            for h in 0..2 {
                let o = i + 16 * h;
                let wv: [__m512; C] = std::array::from_fn(|c| T::load16(wp.add(c * k + o)));
                for (r, zr) in z.iter_mut().enumerate() {
                    let xv = _mm512_loadu_ps(xp.add(r * k + o));
                    for (acc, wc) in zr.iter_mut().zip(&wv) {
                        acc[h] = _mm512_fmadd_ps(xv, *wc, acc[h]);
                    }
                }
            }
            i += 32;
        }
        // back to the dot's four 8-lane accumulators for its 8-wide tail
        let mut a = [[[_mm256_setzero_ps(); 4]; C]; R];
        for (ar, zr) in a.iter_mut().zip(&z) {
            for (ac, zc) in ar.iter_mut().zip(zr) {
                for h in 0..2 {
                    ac[2 * h] = _mm512_castps512_ps256(zc[h]);
                    ac[2 * h + 1] =
                        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(zc[h])));
                }
            }
        }
        while i + 8 <= k {
            let wv: [__m256; C] = std::array::from_fn(|c| T::load8(wp.add(c * k + i)));
            for (r, ar) in a.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(xp.add(r * k + i));
                for (acc, wc) in ar.iter_mut().zip(&wv) {
                    acc[0] = _mm256_fmadd_ps(xv, *wc, acc[0]);
                }
            }
            i += 8;
        }
        for (r, ar) in a.iter().enumerate() {
            for (c, acc) in ar.iter().enumerate() {
                out[r][c] = super::x86::finish(acc, xp.add(r * k), wp.add(c * k), i, k);
            }
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
            gemv_bf16(&x, m, k, &wb, n, &mut yb);
            assert!(max_err(&yb, &reference(&x, m, k, &wbf, n)) < bound);
            for r in 0..m {
                let mut one = vec![0f32; n];
                gemv_f32(&x[r * k..(r + 1) * k], 1, k, &w, n, &mut one);
                assert_eq!(
                    one[..],
                    y[r * n..(r + 1) * n],
                    "row {r} of {m} differs from alone"
                );
                gemv_bf16(&x[r * k..(r + 1) * k], 1, k, &wb, n, &mut one);
                assert_eq!(
                    one[..],
                    yb[r * n..(r + 1) * n],
                    "bf16: row {r} of {m} differs from alone"
                );
            }
        }
    }
}

#[cfg(test)]
mod timing;
