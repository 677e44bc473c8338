//! Quantized decode GEMV on the CPU for GGUF block formats Q8_0, Q4_0 and Q4_1:
//! `y[m, n] = x[m, k] · W[n, k]ᵀ` with W kept in its 32-element blocks.
//!
//! Each activation row is quantized once per call to 8-bit blocks of 32 (scale = max|x|/127,
//! with the block sum kept for the offset formats), as llama.cpp does. Per block the integer
//! dot is exact; blocks are combined in a fixed order, so a row's result does not depend on
//! how many rows share the call (batch invariance) nor on the SIMD path's availability.

/// Elements per block in every format here.
pub const QK: usize = 32;

/// GGUF block formats with a kernel here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QFormat {
    /// f16 scale + 32 × i8
    Q8_0,
    /// f16 scale + 16 bytes of nibbles, value (q - 8) · d
    Q4_0,
    /// f16 scale, f16 min + 16 bytes of nibbles, value q · d + m
    Q4_1,
}

impl QFormat {
    pub fn block_bytes(self) -> usize {
        match self {
            QFormat::Q8_0 => 34,
            QFormat::Q4_0 => 18,
            QFormat::Q4_1 => 20,
        }
    }
}

/// One activation row quantized to 8 bits: per block a scale, the sum of codes, 32 codes.
pub struct QRow {
    pub d: Vec<f32>,
    /// `d · Σ codes` per block (for Q4_1's offset term)
    pub ds: Vec<f32>,
    pub qs: Vec<i8>,
}

/// Quantizes `x` (length a multiple of [`QK`]) block by block.
pub fn quantize_row(x: &[f32]) -> QRow {
    let nb = x.len() / QK;
    let mut out = QRow {
        d: Vec::with_capacity(nb),
        ds: Vec::with_capacity(nb),
        qs: vec![0; nb * QK],
    };
    for (b, blk) in x.chunks_exact(QK).enumerate() {
        let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut s = 0i32;
        for (q, v) in out.qs[b * QK..(b + 1) * QK].iter_mut().zip(blk) {
            *q = (v * id).round() as i8;
            s += *q as i32;
        }
        out.d.push(d);
        out.ds.push(d * s as f32);
    }
    out
}

/// Rows of activations handled together against one weight row (the block is unpacked once).
const ROW_GROUP: usize = 4;

/// `y[m * n]` from `x[m * k]` and quantized `w` (`n` rows of `k / 32` blocks).
/// Panics on inconsistent lengths or a `k` that is not a multiple of 32 (callers check).
pub fn qgemv(x: &[f32], m: usize, k: usize, w: &[u8], fmt: QFormat, n: usize, y: &mut [f32]) {
    assert!(
        k.is_multiple_of(QK),
        "qgemv: k = {k} is not a multiple of {QK}"
    );
    assert_eq!(x.len(), m * k, "qgemv: x is not m*k");
    assert_eq!(y.len(), m * n, "qgemv: y is not m*n");
    let rb = k / QK * fmt.block_bytes();
    assert_eq!(w.len(), n * rb, "qgemv: w is not n rows of k/32 blocks");
    let rows: Vec<QRow> = x.chunks_exact(k).map(quantize_row).collect();
    let kernel = row_kernel(fmt);
    const COLS_PER_TASK: usize = 32;
    super::column_tasks(y, n, COLS_PER_TASK, n * k * m, |cols| {
        let mut acc = [0f32; ROW_GROUP];
        for j in cols.j0..cols.j1 {
            let wr = &w[j * rb..(j + 1) * rb];
            for (g, group) in rows.chunks(ROW_GROUP).enumerate() {
                // SAFETY: the kernel was chosen for this CPU; `wr` holds k/32 whole blocks and
                // every row k codes.
                unsafe { kernel(wr, group, &mut acc[..group.len()]) };
                for (i, v) in acc[..group.len()].iter().enumerate() {
                    cols.set(g * ROW_GROUP + i, j, *v);
                }
            }
        }
    });
}

/// One weight row against up to [`ROW_GROUP`] activation rows: `out[i] = w · rows[i]`.
type RowKernel = unsafe fn(&[u8], &[QRow], &mut [f32]);

fn row_kernel(fmt: QFormat) -> RowKernel {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return match fmt {
            QFormat::Q8_0 => x86::rows_q8_0,
            QFormat::Q4_0 => x86::rows_q4_0,
            QFormat::Q4_1 => x86::rows_q4_1,
        };
    }
    match fmt {
        QFormat::Q8_0 => portable::rows_q8_0,
        QFormat::Q4_0 => portable::rows_q4_0,
        QFormat::Q4_1 => portable::rows_q4_1,
    }
}

fn f16(lo: u8, hi: u8) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Plain Rust: per block an exact integer dot, scaled and summed into 8 lanes as the AVX2
/// path does (lane = block index mod 8), so both paths agree closely (not bit for bit).
mod portable {
    use super::{f16, QRow, QK};

    fn rows_by(
        w: &[u8],
        rows: &[QRow],
        out: &mut [f32],
        bb: usize,
        block: impl Fn(&[u8], &[i8]) -> (f32, i32),
    ) {
        for (o, x) in out.iter_mut().zip(rows) {
            let mut acc = 0f32;
            let mut off = 0f32;
            for (b, blk) in w.chunks_exact(bb).enumerate() {
                let (dw, s) = block(blk, &x.qs[b * QK..(b + 1) * QK]);
                acc += dw * x.d[b] * s as f32;
                if bb == 20 {
                    off += f16(blk[2], blk[3]) * x.ds[b];
                }
            }
            *o = acc + off;
        }
    }

    fn nib(q: &[u8], i: usize) -> i32 {
        (if i < 16 { q[i] & 0x0f } else { q[i - 16] >> 4 }) as i32
    }

    pub unsafe fn rows_q8_0(w: &[u8], rows: &[QRow], out: &mut [f32]) {
        rows_by(w, rows, out, 34, |blk, x| {
            let s = (0..QK).map(|i| blk[2 + i] as i8 as i32 * x[i] as i32).sum();
            (f16(blk[0], blk[1]), s)
        })
    }

    pub unsafe fn rows_q4_0(w: &[u8], rows: &[QRow], out: &mut [f32]) {
        rows_by(w, rows, out, 18, |blk, x| {
            let s = (0..QK).map(|i| (nib(&blk[2..], i) - 8) * x[i] as i32).sum();
            (f16(blk[0], blk[1]), s)
        })
    }

    pub unsafe fn rows_q4_1(w: &[u8], rows: &[QRow], out: &mut [f32]) {
        rows_by(w, rows, out, 20, |blk, x| {
            let s = (0..QK).map(|i| nib(&blk[4..], i) * x[i] as i32).sum();
            (f16(blk[0], blk[1]), s)
        })
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{QRow, QK, ROW_GROUP};

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }

    /// An f16 stored little-endian at `p`, widened by the F16C instruction.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f16_at(p: *const u8) -> f32 {
        let h = _mm_cvtsi32_si128(u16::from_le_bytes([*p, *p.add(1)]) as i32);
        _mm_cvtss_f32(_mm_cvtph_ps(h))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 0b01)))
    }

    /// 32 nibbles (low halves then high halves of 16 bytes) as u8 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let b = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(b, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    /// Σ u·s over 32 lanes as 8 i32 lanes, as f32 (maddubs pairs stay in i16: |u| ≤ 128,
    /// |s| ≤ 127).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_lanes(u: __m256i, s: __m256i) -> __m256 {
        let p16 = _mm256_maddubs_epi16(u, s);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }

    /// Shared driver: `signed` blocks give i8 codes (sign trick), others u8 nibbles.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &[u8], rows: &[QRow], out: &mut [f32], bb: usize, fmt: u8) {
        let n = rows.len();
        debug_assert!(n <= ROW_GROUP && out.len() == n);
        let mut acc = [_mm256_setzero_ps(); ROW_GROUP];
        let mut off = [0f32; ROW_GROUP];
        for (b, blk) in w.chunks_exact(bb).enumerate() {
            let p = blk.as_ptr();
            let dw = f16_at(p);
            let mw = if fmt == 2 { f16_at(p.add(2)) } else { 0.0 };
            // unpack once for all rows
            let (u, sgn) = match fmt {
                0 => {
                    let q = _mm256_loadu_si256(p.add(2) as *const __m256i);
                    (_mm256_sign_epi8(q, q), Some(q))
                }
                1 => {
                    let q = _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8));
                    (_mm256_sign_epi8(q, q), Some(q))
                }
                _ => (nibbles(p.add(4)), None),
            };
            for i in 0..n {
                let x = &rows[i];
                let xv = _mm256_loadu_si256(x.qs.as_ptr().add(b * QK) as *const __m256i);
                let s = match sgn {
                    Some(q) => _mm256_sign_epi8(xv, q),
                    None => xv,
                };
                let scale = _mm256_set1_ps(dw * x.d[b]);
                acc[i] = _mm256_fmadd_ps(scale, dot_lanes(u, s), acc[i]);
                if fmt == 2 {
                    off[i] += mw * x.ds[b];
                }
            }
        }
        for i in 0..n {
            out[i] = hsum(acc[i]) + off[i];
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows_q8_0(w: &[u8], r: &[QRow], out: &mut [f32]) {
        rows(w, r, out, 34, 0)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows_q4_0(w: &[u8], r: &[QRow], out: &mut [f32]) {
        rows(w, r, out, 18, 1)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows_q4_1(w: &[u8], r: &[QRow], out: &mut [f32]) {
        rows(w, r, out, 20, 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Random blocks of `fmt` and their values dequantized from the format's definition.
    fn random_weights(fmt: QFormat, n: usize, k: usize, seed: &mut u64) -> (Vec<u8>, Vec<f32>) {
        let (nb, bb) = (k / QK, fmt.block_bytes());
        let mut w = vec![0u8; n * nb * bb];
        let mut deq = vec![0f32; n * k];
        for j in 0..n {
            for b in 0..nb {
                let blk = &mut w[(j * nb + b) * bb..(j * nb + b + 1) * bb];
                let d = half::f16::from_f32(0.001 + (rng(seed) % 1000) as f32 * 1e-5);
                let m = half::f16::from_f32(-((rng(seed) % 1000) as f32) * 1e-4);
                blk[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
                let codes = if fmt == QFormat::Q4_1 {
                    blk[2..4].copy_from_slice(&m.to_bits().to_le_bytes());
                    4
                } else {
                    2
                };
                for byte in &mut blk[codes..] {
                    *byte = rng(seed) as u8;
                }
                let nib = |i: usize| {
                    let q = &blk[codes..];
                    (if i < 16 { q[i] & 0x0f } else { q[i - 16] >> 4 }) as f32
                };
                for i in 0..QK {
                    deq[j * k + b * QK + i] = match fmt {
                        QFormat::Q8_0 => blk[2 + i] as i8 as f32 * d.to_f32(),
                        QFormat::Q4_0 => (nib(i) - 8.0) * d.to_f32(),
                        QFormat::Q4_1 => nib(i) * d.to_f32() + m.to_f32(),
                    };
                }
            }
        }
        (w, deq)
    }

    /// Each output is within the error that 8-bit activation rounding can cause:
    /// Σ_i |w_i| · amax(block of i) / 254 (plus f32 slop), and rows are batch-invariant.
    #[test]
    fn quantized_matmul_equals_dequantized_within_the_activation_rounding_bound() {
        let mut seed = 11;
        for fmt in [QFormat::Q8_0, QFormat::Q4_0, QFormat::Q4_1] {
            for &(m, k, n) in &[(1, 576, 300), (5, 1536, 97), (3, 64, 5), (9, 32, 40)] {
                let (w, deq) = random_weights(fmt, n, k, &mut seed);
                let x: Vec<f32> = (0..m * k)
                    .map(|_| (rng(&mut seed) % 2000) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut y = vec![0f32; m * n];
                qgemv(&x, m, k, &w, fmt, n, &mut y);
                for r in 0..m {
                    let xr = &x[r * k..(r + 1) * k];
                    let mut alone = vec![0f32; n];
                    qgemv(xr, 1, k, &w, fmt, n, &mut alone);
                    assert_eq!(
                        alone[..],
                        y[r * n..(r + 1) * n],
                        "{fmt:?}: row {r} not invariant"
                    );
                    for j in 0..n {
                        let wj = &deq[j * k..(j + 1) * k];
                        let exact: f64 =
                            xr.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
                        let bound: f64 = xr
                            .chunks(QK)
                            .zip(wj.chunks(QK))
                            .map(|(xb, wb)| {
                                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                                wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
                            })
                            .sum::<f64>()
                            + 1e-5 * (1.0 + exact.abs());
                        let got = y[r * n + j] as f64;
                        assert!(!got.is_nan(), "{fmt:?}: NaN");
                        assert!(
                            (got - exact).abs() <= bound,
                            "{fmt:?} m{m} k{k} n{n} [{r},{j}]: {got} vs {exact} (bound {bound})"
                        );
                    }
                }
            }
        }
    }
}
