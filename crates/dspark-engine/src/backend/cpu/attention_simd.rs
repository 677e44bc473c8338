//! The AVX-512 form of one attention row (see [`super::attention`]): scores for eight keys at
//! a time with the query held in registers, the softmax exponentials of
//! [`super::softmax`], and the weighted sum of values accumulated in registers and written
//! once, instead of a horizontal dot and a read-modify-write of the output per key.
//!
//! Head sizes that are multiples of 16 up to 256 take this path (multiples of 32 on AVX2
//! without AVX-512, [`avx2`]); others keep the portable row. Each row is computed alone with a fixed instruction sequence, so the batch-invariance
//! of the caller holds: a verify row gives the bits of the same row in a decode step.

/// One query row against `n` visible keys, as raw rows: key `j` starts at `k + j * ks`,
/// value `j` at `v + j * vs`, each `d` floats.
pub(super) struct Row {
    pub q: *const f32,
    pub k: *const f32,
    pub ks: usize,
    pub v: *const f32,
    pub vs: usize,
    pub n: usize,
    pub d: usize,
    pub scale: f32,
}

/// Computes the row into `o` (`d` floats) and returns true, or returns false when this CPU
/// or head size has no SIMD form here (the caller then runs the portable row).
///
/// # Safety
/// `q` holds `d` floats, and keys and values `0..n` are readable at their strides; `n >= 1`.
pub(super) unsafe fn row(r: &Row, scores: &mut Vec<f32>, o: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && r.d.is_multiple_of(16) && o.len() == r.d {
        match r.d / 16 {
            4 => avx512::row::<4, 2>(r, scores, o),
            8 => avx512::row::<8, 2>(r, scores, o),
            16 => avx512::row::<16, 1>(r, scores, o),
            2 => avx512::row::<2, 2>(r, scores, o),
            _ => return false,
        }
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() && r.d.is_multiple_of(32) && r.d <= 256 && o.len() == r.d {
        avx2::row(r, scores, o);
        return true;
    }
    let _ = (r, scores, o);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Row;
    use std::arch::x86_64::*;

    /// Keys scored per step: eight independent accumulators hide the multiply-add latency.
    const KEYS: usize = 8;

    /// `V` registers per head row (`d = 16 V`), `S` accumulator sets for the value sum.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn row<const V: usize, const S: usize>(
        r: &Row,
        scores: &mut Vec<f32>,
        o: &mut [f32],
    ) {
        let q: [__m512; V] = std::array::from_fn(|t| _mm512_loadu_ps(r.q.add(16 * t)));
        scores.clear();
        scores.reserve(r.n);
        let sp = scores.as_mut_ptr();
        let mut max = f32::NEG_INFINITY;
        let mut j = 0;
        while j + KEYS <= r.n {
            let mut acc = [_mm512_setzero_ps(); KEYS];
            for (t, qt) in q.iter().enumerate() {
                for (u, a) in acc.iter_mut().enumerate() {
                    let kv = _mm512_loadu_ps(r.k.add((j + u) * r.ks + 16 * t));
                    *a = _mm512_fmadd_ps(*qt, kv, *a);
                }
            }
            for (u, a) in acc.iter().enumerate() {
                let s = _mm512_reduce_add_ps(*a) * r.scale;
                *sp.add(j + u) = s;
                max = max.max(s);
            }
            j += KEYS;
        }
        while j < r.n {
            let mut a = _mm512_setzero_ps();
            for (t, qt) in q.iter().enumerate() {
                a = _mm512_fmadd_ps(*qt, _mm512_loadu_ps(r.k.add(j * r.ks + 16 * t)), a);
            }
            let s = _mm512_reduce_add_ps(a) * r.scale;
            *sp.add(j) = s;
            max = max.max(s);
            j += 1;
        }
        // SAFETY: the n scores were written above.
        scores.set_len(r.n);
        let sum = super::super::softmax::exp_shifted(scores, max);
        let mut acc = [[_mm512_setzero_ps(); V]; S];
        let mut j = 0;
        while j + S <= r.n {
            for (s, set) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(scores[j + s]);
                let vp = r.v.add((j + s) * r.vs);
                for (t, a) in set.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp.add(16 * t)), *a);
                }
            }
            j += S;
        }
        while j < r.n {
            let w = _mm512_set1_ps(scores[j]);
            let vp = r.v.add(j * r.vs);
            for (t, a) in acc[0].iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp.add(16 * t)), *a);
            }
            j += 1;
        }
        let inv = _mm512_set1_ps(1.0 / sum);
        for t in 0..V {
            let mut a = acc[0][t];
            for set in &acc[1..] {
                a = _mm512_add_ps(a, set[t]);
            }
            _mm512_storeu_ps(o.as_mut_ptr().add(16 * t), _mm512_mul_ps(a, inv));
        }
    }
}

/// The AVX2 + FMA form for CPUs without AVX-512: 8-lane registers, four keys scored per step
/// with the query read from L1, and the value sum in passes of up to 64 columns held in
/// registers.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::gemv::hsum8 as hsum;
    use super::Row;
    use std::arch::x86_64::*;

    const KEYS: usize = 4;
    /// Registers of the value sum per pass (64 columns).
    const PASS: usize = 8;

    /// # Safety
    /// As [`super::row`], with AVX2/FMA present and `d` a multiple of 32 up to 256.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn row(r: &Row, scores: &mut Vec<f32>, o: &mut [f32]) {
        let regs = r.d / 8;
        scores.clear();
        scores.reserve(r.n);
        let sp = scores.as_mut_ptr();
        let mut max = f32::NEG_INFINITY;
        let mut j = 0;
        while j < r.n {
            let keys = (r.n - j).min(KEYS);
            let mut acc = [_mm256_setzero_ps(); KEYS];
            for t in 0..regs {
                let qv = _mm256_loadu_ps(r.q.add(8 * t));
                for (u, a) in acc.iter_mut().enumerate().take(keys) {
                    let kv = _mm256_loadu_ps(r.k.add((j + u) * r.ks + 8 * t));
                    *a = _mm256_fmadd_ps(qv, kv, *a);
                }
            }
            for (u, a) in acc.iter().enumerate().take(keys) {
                let s = hsum(*a) * r.scale;
                *sp.add(j + u) = s;
                max = max.max(s);
            }
            j += keys;
        }
        // SAFETY: the n scores were written above.
        scores.set_len(r.n);
        let inv = _mm256_set1_ps(1.0 / super::super::softmax::exp_shifted(scores, max));
        for p0 in (0..regs).step_by(PASS) {
            let np = (regs - p0).min(PASS);
            let mut acc = [_mm256_setzero_ps(); PASS];
            for (jj, w) in scores.iter().enumerate() {
                let w = _mm256_set1_ps(*w);
                let vp = r.v.add(jj * r.vs + 8 * p0);
                for (t, a) in acc.iter_mut().enumerate().take(np) {
                    *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp.add(8 * t)), *a);
                }
            }
            for (t, a) in acc.iter().enumerate().take(np) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * (p0 + t)), _mm256_mul_ps(*a, inv));
            }
        }
    }
}
