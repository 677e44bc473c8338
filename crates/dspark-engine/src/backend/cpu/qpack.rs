//! GGUF block-quantized weights repacked once at load into the layout [`super::qgemv`] streams.
//!
//! Every weight becomes `scale · (code − zp) + min` with an unsigned code (4 or 8 bits), a
//! scale per 16 or 32 elements, an optional `min` per 32-element block and a zero point fixed
//! by the format. Scales and mins are kept as f16 where the format stores them so (Q8_0, Q4_0,
//! Q4_1: 20 bytes per Q4_1 block instead of 24, for a decode that streams weights at memory
//! speed) and as f32 where they are products (Q4_K, Q6_K). Two consecutive 32-element blocks A
//! and B form a *pair* whose codes are ordered `[A0‥15, B0‥15, A16‥31, B16‥31]` (as bytes, or as
//! the low and high nibbles of 32 bytes), so one 512-bit load feeds a u8·i8 dot of 64 lanes
//! whose i32 groups of four each carry one scale.
//!
//! Pairs (codes and scales) are interleaved across each group of [`COL_TILE`] columns: pair `q`
//! of columns `4g‥4g+3` sit side by side ([`QPacked::pair_at`]), so a tile of four columns reads
//! one sequential stream, and so does a single row's decode step.
//!
//! The repacking is exact: scales and mins are the format's f16 fields, or products of them and
//! small integers, which f32 holds exactly, so each weight dequantizes to what GGUF defines.

/// Elements per block (the activation quantization granularity).
pub const QK: usize = 32;
/// Columns are padded to a multiple of this (the kernel's tile width).
pub const COL_TILE: usize = 4;

/// GGUF formats that run packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QFormat {
    /// f16 d, 32 × i8: `d·q` (code `q + 128`, zero point 128)
    Q8_0,
    /// f16 d, 32 nibbles: `d·(q − 8)`
    Q4_0,
    /// f16 d, 32 five-bit codes (their fifth bits in a u32, the rest as nibbles): `d·(q − 16)`,
    /// held as bytes
    Q5_0,
    /// f16 d, f16 m, 32 nibbles: `d·q + m`
    Q4_1,
    /// 256-element super-block: f16 d, f16 dmin, 8 six-bit (scale, min) pairs, 256 nibbles:
    /// `d·sc·q − dmin·m` per 32
    Q4K,
    /// 256-element super-block: 4+2-bit codes, 16 i8 scales, f16 d: `d·sc·(q − 32)` per 16
    Q6K,
}

impl QFormat {
    /// (bytes, elements) of one GGUF block.
    pub fn gguf_block(self) -> (usize, usize) {
        match self {
            QFormat::Q8_0 => (34, 32),
            QFormat::Q4_0 => (18, 32),
            QFormat::Q5_0 => (22, 32),
            QFormat::Q4_1 => (20, 32),
            QFormat::Q4K => (144, 256),
            QFormat::Q6K => (210, 256),
        }
    }

    pub fn nibbles(self) -> bool {
        matches!(self, QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K)
    }

    pub fn zero_point(self) -> i32 {
        match self {
            QFormat::Q8_0 => 128,
            QFormat::Q4_0 => 8,
            QFormat::Q5_0 => 16,
            QFormat::Q6K => 32,
            QFormat::Q4_1 | QFormat::Q4K => 0,
        }
    }

    /// One scale per 16 elements (else per 32).
    pub fn per16(self) -> bool {
        self == QFormat::Q6K
    }

    pub fn has_min(self) -> bool {
        matches!(self, QFormat::Q4_1 | QFormat::Q4K)
    }

    /// Whether every scale and min is one of the block's own f16 fields (so f16 holds them).
    pub fn f16_params(self) -> bool {
        matches!(
            self,
            QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q5_0
        )
    }

    /// Scales stored per pair: 2 (`[A, B]`) or 4 (`[A_lo, B_lo, A_hi, B_hi]`).
    pub fn scales_per_pair(self) -> usize {
        if self.per16() {
            4
        } else {
            2
        }
    }
}

/// A weight matrix `[n, k]` in the packed layout (columns padded to [`COL_TILE`], blocks to
/// whole pairs, mins to multiples of 16 blocks; padding dequantizes to zero).
pub struct QPacked {
    pub fmt: QFormat,
    /// Output features (rows of W) and input features.
    pub n: usize,
    pub k: usize,
    /// `n` rounded up to [`COL_TILE`].
    pub n_pad: usize,
    /// Pairs of blocks per row.
    pub np: usize,
    /// Mins per row (a multiple of 16, ≥ 2·np).
    pub nm: usize,
    pub codes: Vec<u8>,
    /// Scales and mins as little-endian f16 (`half`) or f32 values; read them through
    /// [`QPacked::scale`] / [`QPacked::min`], or as raw bytes in the SIMD tiles.
    pub scales: Vec<u8>,
    pub mins: Vec<u8>,
    pub half: bool,
    /// The panel layout ([`super::qpanel`]): `codes` holds panels of 16 columns with their
    /// scales and mins, `scales` and `mins` are empty, `np`/`nm` are unused.
    pub panels: bool,
}

/// One 32-element block decoded from GGUF: unsigned codes, scales of its two halves, min.
pub(super) struct Block {
    pub(super) codes: [u8; QK],
    pub(super) scale: [f32; 2],
    pub(super) min: f32,
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// The 32-element blocks of one GGUF block of `fmt`, in order.
pub(super) fn decode_block(fmt: QFormat, b: &[u8], out: &mut Vec<Block>) {
    let nib = |q: &[u8], i: usize| if i < 16 { q[i] & 15 } else { q[i - 16] >> 4 };
    match fmt {
        QFormat::Q8_0 => {
            let d = f16_at(b, 0);
            let codes = std::array::from_fn(|i| (b[2 + i] as i8 as i16 + 128) as u8);
            out.push(Block {
                codes,
                scale: [d; 2],
                min: 0.0,
            });
        }
        QFormat::Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            // element i: its nibble (i < 16 low, else high of byte i − 16) and bit i of qh
            let codes = std::array::from_fn(|i| nib(&b[6..], i) | (((qh >> i) & 1) << 4) as u8);
            out.push(Block {
                codes,
                scale: [d; 2],
                min: 0.0,
            });
        }
        QFormat::Q4_0 | QFormat::Q4_1 => {
            let d = f16_at(b, 0);
            let (min, q) = if fmt == QFormat::Q4_1 {
                (f16_at(b, 2), &b[4..])
            } else {
                (0.0, &b[2..])
            };
            out.push(Block {
                codes: std::array::from_fn(|i| nib(q, i)),
                scale: [d; 2],
                min,
            });
        }
        QFormat::Q4K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let sc = &b[4..16];
            let qs = &b[16..144];
            for j in 0..8 {
                let (s, m) = if j < 4 {
                    (sc[j] & 63, sc[j + 4] & 63)
                } else {
                    (
                        (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4),
                        (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                    )
                };
                // 64 elements per 32 bytes: sub-block 2c in the low nibbles, 2c+1 in the high
                let chunk = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
                let codes = std::array::from_fn(|i| {
                    if j % 2 == 0 {
                        chunk[i] & 15
                    } else {
                        chunk[i] >> 4
                    }
                });
                let s = d * s as f32;
                out.push(Block {
                    codes,
                    scale: [s; 2],
                    min: -(dmin * m as f32),
                });
            }
        }
        QFormat::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            let mut q = [0u8; 256];
            for half in 0..2 {
                let (ql, qh, y) = (&ql[64 * half..], &qh[32 * half..], 128 * half);
                for l in 0..32 {
                    q[y + l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                    q[y + l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                    q[y + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    q[y + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
            for j in 0..8 {
                let s = |h: usize| d * sc[2 * j + h] as i8 as f32;
                let codes = std::array::from_fn(|i| q[32 * j + i]);
                out.push(Block {
                    codes,
                    scale: [s(0), s(1)],
                    min: 0.0,
                });
            }
        }
    }
}

impl QPacked {
    /// Repacks `n` rows of `k` elements stored as GGUF blocks of `fmt`, with f16 scales where
    /// the format has them. Errors name what does not fit (a `k` that is
    /// not a whole number of blocks, a byte count that is not `n` rows).
    pub fn from_gguf(fmt: QFormat, bytes: &[u8], n: usize, k: usize) -> Result<Self, String> {
        Self::from_gguf_as(fmt, bytes, n, k, fmt.f16_params())
    }

    /// As [`QPacked::from_gguf`], with f16 (`half`, only for [`QFormat::f16_params`] formats)
    /// or f32 scales and mins.
    pub fn from_gguf_as(
        fmt: QFormat,
        bytes: &[u8],
        n: usize,
        k: usize,
        half: bool,
    ) -> Result<Self, String> {
        assert!(!half || fmt.f16_params(), "{fmt:?} has no f16 scales");
        let (bb, row_bytes) = (fmt.gguf_block().0, row_bytes(fmt, bytes.len(), n, k)?);
        let nb = k / QK;
        let np = nb.div_ceil(2);
        let nm = (2 * np).div_ceil(16) * 16;
        let n_pad = n.div_ceil(COL_TILE) * COL_TILE;
        let cpp = if fmt.nibbles() { 32 } else { 64 };
        let spp = fmt.scales_per_pair();
        let width = if half { 2 } else { 4 };
        let mut p = QPacked {
            fmt,
            n,
            k,
            n_pad,
            np,
            nm,
            codes: vec![0; n_pad * np * cpp],
            scales: vec![0; (n_pad * np * spp + 4) * width],
            mins: if fmt.has_min() {
                vec![0; n_pad * nm * width]
            } else {
                Vec::new()
            },
            half,
            panels: false,
        };
        // padding codes dequantize to zero through a zero scale; 8-bit padding sits at the
        // zero point so that the integer dot stays small
        if !fmt.nibbles() {
            p.codes.iter_mut().for_each(|c| *c = fmt.zero_point() as u8);
        }
        let mut blocks = Vec::with_capacity(nb);
        for j in 0..n {
            blocks.clear();
            for gb in bytes[j * row_bytes..(j + 1) * row_bytes].chunks_exact(bb) {
                decode_block(fmt, gb, &mut blocks);
            }
            for (b, blk) in blocks.iter().enumerate() {
                let (pair, second) = (b / 2, b % 2);
                let at = p.pair_at(j, pair);
                let c = &mut p.codes[at * cpp..(at + 1) * cpp];
                if fmt.nibbles() {
                    for i in 0..16 {
                        c[16 * second + i] = blk.codes[i] | (blk.codes[i + 16] << 4);
                    }
                } else {
                    c[16 * second..16 * second + 16].copy_from_slice(&blk.codes[..16]);
                    c[32 + 16 * second..48 + 16 * second].copy_from_slice(&blk.codes[16..]);
                }
                let s = at * spp;
                if spp == 4 {
                    put(&mut p.scales, half, s + second, blk.scale[0]);
                    put(&mut p.scales, half, s + 2 + second, blk.scale[1]);
                } else {
                    put(&mut p.scales, half, s + second, blk.scale[0]);
                }
                if fmt.has_min() {
                    put(&mut p.mins, half, j * nm + b, blk.min);
                }
            }
        }
        Ok(p)
    }

    /// A weight in the panel layout ([`super::qpanel::pack`]).
    pub(super) fn panels(fmt: QFormat, n: usize, k: usize, n_pad: usize, codes: Vec<u8>) -> Self {
        QPacked {
            fmt,
            n,
            k,
            n_pad,
            np: 0,
            nm: 0,
            codes,
            scales: Vec::new(),
            mins: Vec::new(),
            half: fmt.f16_params(),
            panels: true,
        }
    }

    /// Row `j` dequantized to f32 (tests, checks, and embedding rows of a tied table).
    pub fn dequantize_row(&self, j: usize) -> Vec<f32> {
        if self.panels {
            return super::qpanel::dequantize_row(self, j);
        }
        let (cpp, spp) = (self.codes_per_pair(), self.fmt.scales_per_pair());
        let zp = self.fmt.zero_point();
        (0..self.k)
            .map(|e| {
                let (b, i) = (e / QK, e % QK);
                let (pair, second, hi) = (b / 2, b % 2, i / 16);
                let at = self.pair_at(j, pair);
                let c = &self.codes[at * cpp..];
                let code = if self.fmt.nibbles() {
                    let byte = c[16 * second + i % 16];
                    if hi == 1 {
                        byte >> 4
                    } else {
                        byte & 15
                    }
                } else {
                    c[32 * hi + 16 * second + i % 16]
                };
                let s = at * spp;
                let scale = if spp == 4 {
                    self.scale(s + 2 * hi + second)
                } else {
                    self.scale(s + second)
                };
                let min = if self.fmt.has_min() {
                    self.min(j * self.nm + b)
                } else {
                    0.0
                };
                scale * (code as i32 - zp) as f32 + min
            })
            .collect()
    }

    /// Code bytes per pair: 32 (nibbles) or 64.
    pub fn codes_per_pair(&self) -> usize {
        if self.fmt.nibbles() {
            32
        } else {
            64
        }
    }

    /// The codes and scales (`sw` bytes per pair) of the interleaved group of columns
    /// `j..j+4` (`j` a multiple of 4): pair `q` of column `j + c` is entry `q · 4 + c`.
    #[inline]
    pub fn group(&self, j: usize, sw: usize) -> (*const u8, *const u8) {
        debug_assert_eq!(j % COL_TILE, 0);
        (
            self.codes[j * self.np * self.codes_per_pair()..].as_ptr(),
            self.scales[j * self.np * sw..].as_ptr(),
        )
    }

    /// Index of pair `q` of column `j` among all pairs: the codes start at `pair_at · 32` (or
    /// 64) bytes, the scales at scale `pair_at · scales_per_pair`. Columns interleave in groups
    /// of [`COL_TILE`]: `((j / 4) · np + q) · 4 + j % 4`.
    #[inline]
    pub fn pair_at(&self, j: usize, q: usize) -> usize {
        ((j / COL_TILE) * self.np + q) * COL_TILE + j % COL_TILE
    }

    /// Scale `i` (pair `q` of column `j` starts at `pair_at(j, q) · scales_per_pair`).
    #[inline]
    pub fn scale(&self, i: usize) -> f32 {
        get(&self.scales, self.half, i)
    }

    /// Min `i` (column `j`'s block `b` is `j · nm + b`).
    #[inline]
    pub fn min(&self, i: usize) -> f32 {
        get(&self.mins, self.half, i)
    }

    /// Bytes held (what the loaded weight costs in memory).
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.len() + self.mins.len()
    }
}

/// Bytes per row of `n` rows of `k` elements held as `len` bytes of GGUF blocks of `fmt`, or
/// an error naming what does not fit (`k` not a whole number of blocks, `len` not `n` rows).
pub(super) fn row_bytes(fmt: QFormat, len: usize, n: usize, k: usize) -> Result<usize, String> {
    let (bb, be) = fmt.gguf_block();
    if k == 0 || !k.is_multiple_of(be) {
        return Err(format!(
            "{fmt:?}: {k} input features are not a multiple of {be}"
        ));
    }
    let row_bytes = k / be * bb;
    if len != n * row_bytes {
        return Err(format!(
            "{fmt:?}: {len} bytes are not {n} rows of {row_bytes}"
        ));
    }
    Ok(row_bytes)
}

/// Random GGUF bytes for the quantized kernels' tests.
#[cfg(test)]
pub(super) mod testing {
    use super::QFormat;

    pub fn rng(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// `n` values uniform in [-0.5, 0.5).
    pub fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| (rng(seed) >> 7) as f32 / (1u64 << 24) as f32 - 0.5)
            .collect()
    }

    /// `got` (one output of an 8-bit-activation matmul of row `xr` by weight row `wj`) is
    /// within what rounding the activations to 8 bits per block of 32 can cause,
    /// `Σ_i |w_i| · amax(block of i) / 254`, plus f32 slop; `what` names it on failure.
    pub fn assert_within_rounding(xr: &[f32], wj: &[f32], got: f32, what: &str) {
        let exact: f64 = xr.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
        let bound: f64 = xr
            .chunks(super::QK)
            .zip(wj.chunks(super::QK))
            .map(|(xb, wb)| {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
            })
            .sum::<f64>()
            + 1e-5 * (1.0 + exact.abs());
        let got = got as f64;
        assert!(!got.is_nan(), "{what}: NaN");
        assert!(
            (got - exact).abs() <= bound,
            "{what}: {got} vs {exact} (bound {bound})"
        );
    }

    /// `n` rows of `k` elements of `fmt` with random codes and small, valid f16 scales.
    pub fn random_gguf(fmt: QFormat, n: usize, k: usize, seed: &mut u64) -> Vec<u8> {
        let (bb, be) = fmt.gguf_block();
        let mut w: Vec<u8> = (0..n * k / be * bb).map(|_| rng(seed) as u8).collect();
        let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
        for blk in w.chunks_exact_mut(bb) {
            let d = f16(0.001 + (rng(seed) % 1000) as f32 * 1e-5);
            let m = f16((rng(seed) % 1000) as f32 * 1e-4 - 0.05);
            match fmt {
                QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q5_0 => blk[0..2].copy_from_slice(&d),
                QFormat::Q4_1 | QFormat::Q4K => {
                    blk[0..2].copy_from_slice(&d);
                    blk[2..4].copy_from_slice(&m);
                }
                QFormat::Q6K => blk[208..210].copy_from_slice(&d),
            }
        }
        w
    }
}

/// Stores `v` as value `i` of `buf` (f16 when `half`: exact for the formats that allow it).
fn put(buf: &mut [u8], half: bool, i: usize, v: f32) {
    if half {
        let h = half::f16::from_f32(v);
        debug_assert!(h.to_f32() == v || v.is_nan(), "{v}: not an f16 value");
        buf[2 * i..2 * i + 2].copy_from_slice(&h.to_le_bytes());
    } else {
        buf[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
}

#[inline]
fn get(buf: &[u8], half: bool, i: usize) -> f32 {
    if half {
        half::f16::from_le_bytes([buf[2 * i], buf[2 * i + 1]]).to_f32()
    } else {
        f32::from_le_bytes([buf[4 * i], buf[4 * i + 1], buf[4 * i + 2], buf[4 * i + 3]])
    }
}

/// Bytes of codes ahead of a tile's reads that [`prefetch_group`] fetches into the L2 (Zen 4,
/// `qgemv_decode_like` over the demo's weights, one row: 5.4-6.0 ms without, 4.8-5.3 ms at
/// 8 KiB; 2 and 4 KiB gain less).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 8192;

/// Prefetches into the L2 the codes [`PREFETCH`] bytes past group `p`'s (one line per 64 bytes;
/// `wc`, `ws` from [`QPacked::group`], `cpp` code bytes per pair) and the scales of the group
/// as far ahead (`sw` bytes per pair, a line at a time): each weight is read once per call,
/// and without it a tile computes, then waits. A prefetch never faults, so the addresses may
/// run past the matrix.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn prefetch_group(wc: *const u8, ws: *const u8, p: usize, cpp: usize, sw: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let a = wc.wrapping_add(p * COL_TILE * cpp + PREFETCH) as *const i8;
    // SAFETY: prefetches read nothing and never fault; SSE is baseline on x86_64.
    unsafe {
        for l in 0..COL_TILE * cpp / 64 {
            _mm_prefetch::<_MM_HINT_T1>(a.wrapping_add(64 * l));
        }
        if p.is_multiple_of((64 / (COL_TILE * sw)).max(1)) {
            let s = ws.wrapping_add((p * COL_TILE + PREFETCH / cpp) * sw);
            _mm_prefetch::<_MM_HINT_T1>(s as *const i8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};

    fn rng(seed: &mut u64) -> u8 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u8
    }

    /// Our decoding of every format gives exactly candle's dequantization (GGUF's definition)
    /// on random bytes, scales included (f16 fields set to finite values).
    #[test]
    fn repacked_weights_dequantize_exactly_as_gguf_defines() {
        let mut seed = 7;
        for (fmt, dt) in [
            (QFormat::Q8_0, GgmlDType::Q8_0),
            (QFormat::Q4_0, GgmlDType::Q4_0),
            (QFormat::Q4_1, GgmlDType::Q4_1),
            (QFormat::Q5_0, GgmlDType::Q5_0),
            (QFormat::Q4K, GgmlDType::Q4K),
            (QFormat::Q6K, GgmlDType::Q6K),
        ] {
            let (bb, be) = fmt.gguf_block();
            // odd block counts too (a pair half-filled), and n not a multiple of COL_TILE
            for (n, k) in [(5, be), (3, 3 * be), (8, 2 * be)] {
                let mut bytes: Vec<u8> = (0..n * k / be * bb).map(|_| rng(&mut seed)).collect();
                for blk in bytes.chunks_exact_mut(bb) {
                    let f16s: &[usize] = match fmt {
                        QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q5_0 => &[0],
                        QFormat::Q4_1 | QFormat::Q4K => &[0, 2],
                        QFormat::Q6K => &[208],
                    };
                    for &o in f16s {
                        let v = (rng(&mut seed) as f32 - 128.0) * 1e-3;
                        blk[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                    }
                }
                let want = qtensor_from_ggml(dt, &bytes, vec![n, k], &candle_core::Device::Cpu)
                    .and_then(|q| q.dequantize(&candle_core::Device::Cpu))
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1::<f32>())
                    .unwrap();
                for half in [false, true].into_iter().filter(|h| !h || fmt.f16_params()) {
                    let p = QPacked::from_gguf_as(fmt, &bytes, n, k, half).unwrap();
                    for j in 0..n {
                        assert_eq!(
                            p.dequantize_row(j),
                            want[j * k..(j + 1) * k],
                            "{fmt:?} (f16 scales: {half}) row {j}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        assert!(QPacked::from_gguf(QFormat::Q4K, &[0; 144], 1, 128).is_err());
        assert!(QPacked::from_gguf(QFormat::Q8_0, &[0; 33], 1, 32).is_err());
        assert!(QPacked::from_gguf(QFormat::Q8_0, &[0; 34], 1, 32).is_ok());
    }
}
