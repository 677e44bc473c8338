//! Decode GEMV on the CPU: `y[m, n] = x[m, k] · w[n, k]ᵀ` for a few rows `m` (one decode step
//! or one verify block), f32 or bf16 weights streamed once, columns split across threads.
//!
//! Batch invariance: each `(row, column)` dot product runs the same instruction sequence
//! whatever `m` is and however columns are split, so a verify block of L rows gives the same
//! bits as L one-row decode steps. Greedy speculative output then equals the baseline by
//! construction, not by luck at near-ties.

/// Rows up to which [`gemv`] is used (above it, a blocked GEMM wins).
pub const MAX_ROWS: usize = 32;

/// Columns per parallel task: large enough to amortise scheduling, small enough to balance.
const COLS_PER_TASK: usize = 64;

/// `y[m * n]` (row-major) from `x[m * k]` and f32 weights `w[n * k]` (row-major `[out, in]`).
/// Panics on inconsistent slice lengths (callers check shapes first).
pub fn gemv_f32(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, y: &mut [f32]) {
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
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return drive(x, m, k, w, n, y, |a, b| unsafe { x86::dot_bf16(a, b) });
    }
    drive(x, m, k, w, n, y, portable::dot_bf16)
}

/// One f32 dot product with the kernel [`gemv_f32`] uses (same bits for the same inputs).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time; equal lengths checked above.
        return unsafe { x86::dot_f32(a, b) };
    }
    portable::dot_f32(a, b)
}

/// `y += alpha * x` (a plain loop the compiler vectorises).
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
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
    super::column_tasks(y, n, COLS_PER_TASK, n * k * m, |cols| {
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
mod x86 {
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
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
        // k: multiples of 32, of 8 only, and odd; n: below and above one task; m up to MAX_ROWS
        for &(m, k, n) in &[
            (1, 576, 1536),
            (5, 576, 200),
            (3, 1536, 70),
            (7, 77, 33),
            (32, 40, 9),
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
                for j in 0..n {
                    assert_eq!(one[j], dot(&x[r * k..(r + 1) * k], &w[j * k..(j + 1) * k]));
                }
            }
        }
    }
}
