//! GGUF Q8_0 / Q4_0 / Q4_1 / Q4_K weights held packed under `--matmul bf16`, rebuilt into
//! [`super::bf16_tiles`]' B tiles for each call: each weight becomes the bf16 rounding of its
//! f32 dequantized value (`d·(q − z) + m`, exact in f32, as the loader computes it), so the
//! products are those of the dequantized weights held as bf16 tiles, at the quantized file's
//! memory traffic. Rebuilding costs about 9 vector instructions per tile row of 32 weights;
//! the tile multiplies after it take every row of a verify block at once. Without AMX, calls of
//! up to 6 rows multiply each rebuilt tile row in registers ([`QTiles::dots_in_registers`]).
//!
//! Layout ([`QTiles`]): for panel `p` (16 columns) and block `c` (32 weights, one GGUF
//! sub-block), at `(p · chunks + c) · stride`: the codes of the 16 tile rows, then the 16
//! columns' scales, then their mins (f16 where GGUF stores them so, f32 for Q4_K's products).
//! Tile row `r` holds weights `2r` and `2r + 1` of each column; its first 16 lanes are columns
//! 0-7 and its last 16 columns 8-15, lane `l` of a half being column `l / 2`, weight
//! `2r + l % 2`. Nibble formats store byte `l` of a row as (first-half lane `l`) |
//! (second-half lane `l`) << 4; Q8_0 stores the two halves' 16 codes one after the other.

use super::bf16_tiles::{line_start, TileSource, KC, PANEL, TILE};
use super::qpack::{decode_block, row_bytes, Block, QFormat};

/// Whether `fmt` can be rebuilt into bf16 tiles.
pub fn takes(fmt: QFormat) -> bool {
    matches!(
        fmt,
        QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K
    )
}

/// A `[n, k]` GGUF weight in the rebuild layout (see the module docs).
pub struct QTiles {
    pub fmt: QFormat,
    pub n: usize,
    pub k: usize,
    chunks: usize,
    stride: usize,
    /// The records, 64-byte aligned from `start`.
    codes: Vec<u8>,
    start: usize,
}

fn code_bytes(fmt: QFormat) -> usize {
    if fmt.nibbles() {
        PANEL * KC / 2
    } else {
        PANEL * KC
    }
}

/// Bytes of one scale or min.
fn param_bytes(fmt: QFormat) -> usize {
    if fmt.f16_params() {
        2
    } else {
        4
    }
}

impl QTiles {
    /// Repacks `n` rows of `k` weights stored as GGUF blocks of `fmt`; errors name what does
    /// not fit.
    pub fn from_gguf(fmt: QFormat, bytes: &[u8], n: usize, k: usize) -> Result<QTiles, String> {
        if !takes(fmt) {
            return Err(format!("{fmt:?} has no bf16 rebuild"));
        }
        let rb = row_bytes(fmt, bytes.len(), n, k)?;
        let chunks = k / KC;
        let stride = code_bytes(fmt) + 2 * PANEL * param_bytes(fmt);
        let mut codes = vec![0u8; n.div_ceil(PANEL) * chunks * stride + 64];
        let start = line_start(&codes);
        let mut blocks: Vec<Block> = Vec::with_capacity(chunks);
        let (gb, ge) = fmt.gguf_block();
        for j in 0..n {
            blocks.clear();
            for b in bytes[j * rb..(j + 1) * rb].chunks_exact(gb) {
                decode_block(fmt, b, &mut blocks);
            }
            debug_assert_eq!(blocks.len() * KC, k.div_ceil(ge) * ge);
            let (p, col) = (j / PANEL, j % PANEL);
            for (c, blk) in blocks.iter().enumerate() {
                let at = start + (p * chunks + c) * stride;
                let rec = &mut codes[at..at + stride];
                put_codes(fmt, rec, col, &blk.codes);
                let pb = param_bytes(fmt);
                let at = code_bytes(fmt) + col * pb;
                put_param(&mut rec[at..at + pb], blk.scale[0]);
                let at = code_bytes(fmt) + (PANEL + col) * pb;
                put_param(&mut rec[at..at + pb], blk.min);
            }
        }
        Ok(QTiles {
            fmt,
            n,
            k,
            chunks,
            stride,
            codes,
            start,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.codes.len()
    }

    fn records(&self) -> &[u8] {
        &self.codes[self.start..]
    }

    /// The record of panel `p`, chunk `c`, with the panel's records a few chunks ahead
    /// prefetched (each panel is one sequential stream).
    ///
    /// # Safety
    /// Panel `p` and chunk `c` exist.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn record_ahead(&self, p: usize, c: usize) -> *const u8 {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let rec = self
            .records()
            .as_ptr()
            .add((p * self.chunks + c) * self.stride);
        let ahead = rec.wrapping_add(4 * self.stride);
        for l in (0..self.stride).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l) as *const i8);
        }
        rec
    }

    /// Row `j` of the weight as its f32 dequantized values (a tied embedding's lookup).
    pub fn dequantize_row(&self, j: usize) -> Vec<f32> {
        let (p, col) = (j / PANEL, j % PANEL);
        let pb = param_bytes(self.fmt);
        let param = |b: &[u8]| match pb {
            2 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            _ => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        };
        let (half, lane) = (col / 8, 2 * (col % 8));
        let z = self.fmt.zero_point() as f32;
        let mut out = Vec::with_capacity(self.k);
        for c in 0..self.chunks {
            let rec = &self.records()[(p * self.chunks + c) * self.stride..];
            let cb = code_bytes(self.fmt);
            let d = param(&rec[cb + col * pb..]);
            let m = param(&rec[cb + (PANEL + col) * pb..]);
            for i in 0..KC {
                let (r, l) = (i / 2, lane + i % 2);
                let q = if self.fmt.nibbles() {
                    rec[16 * r + l] >> (4 * half) & 15
                } else {
                    rec[32 * r + 16 * half + l]
                };
                // the loader's arithmetic: the product is exact, so one rounding
                out.push(if self.fmt.has_min() {
                    d.mul_add(q as f32 - z, m)
                } else {
                    d * (q as f32 - z)
                });
            }
        }
        out
    }
}

/// Column `col`'s 32 codes into a record's tile rows.
fn put_codes(fmt: QFormat, rec: &mut [u8], col: usize, codes: &[u8; KC]) {
    let (half, lane) = (col / 8, 2 * (col % 8));
    for (i, &q) in codes.iter().enumerate() {
        let (r, l) = (i / 2, lane + i % 2);
        if fmt.nibbles() {
            rec[16 * r + l] |= (q & 15) << (4 * half);
        } else {
            rec[32 * r + 16 * half + l] = q;
        }
    }
}

fn put_param(at: &mut [u8], v: f32) {
    if at.len() == 2 {
        at.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
    } else {
        at.copy_from_slice(&v.to_le_bytes());
    }
}

impl TileSource for QTiles {
    const REBUILT: bool = true;
    const FUSED: bool = true;

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_chunk<const R: usize, const G: usize>(
        &self,
        p: usize,
        c: usize,
        x: &[*const u16; R],
        acc: &mut [[std::arch::x86_64::__m512; G]; R],
    ) {
        self.dots_in_registers::<R, G>(p, c, x, acc)
    }

    fn dims(&self) -> (usize, usize, usize) {
        (self.n, self.k, self.chunks)
    }

    unsafe fn chunk(&self, p: usize, g: usize, c: usize, buf: *mut u16) -> (*const u16, usize) {
        #[cfg(target_arch = "x86_64")]
        for i in 0..g {
            let rec = self.record_ahead(p + i, c);
            let out = buf.add(i * TILE);
            match self.fmt {
                QFormat::Q8_0 => tile::<false, false, 128>(rec, self.fmt, out),
                QFormat::Q4_0 => tile::<true, false, 8>(rec, self.fmt, out),
                _ => tile::<true, true, 0>(rec, self.fmt, out),
            }
        }
        (buf, TILE)
    }
}

/// One record rebuilt as a bf16 B tile at `out` (`NIB`: nibble codes; `MIN`: a min to add;
/// `Z`: the zero point subtracted from each code).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,f16c")]
unsafe fn tile<const NIB: bool, const MIN: bool, const Z: i32>(
    rec: *const u8,
    fmt: QFormat,
    out: *mut u16,
) {
    use std::arch::x86_64::*;
    let sm = scales(rec, fmt);
    for r in 0..KC / 2 {
        let v = tile_row::<NIB, MIN, Z>(rec, r, &sm);
        _mm512_store_si512(out.add(r * 2 * PANEL) as *mut __m512i, v);
    }
}

/// A record's scales and mins spread over a tile row's lanes: `[d_lo, d_hi, m_lo, m_hi]`
/// (lanes 0-15 of a tile row are columns 0-7 twice each, lanes 16-31 columns 8-15).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scales(rec: *const u8, fmt: QFormat) -> [std::arch::x86_64::__m512; 4] {
    use std::arch::x86_64::*;
    let cb = code_bytes(fmt);
    let lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    let hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    let params = |at: *const u8| {
        if fmt.f16_params() {
            _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i))
        } else {
            _mm512_loadu_ps(at as *const f32)
        }
    };
    let d = params(rec.add(cb));
    let m = params(rec.add(cb + PANEL * param_bytes(fmt)));
    [
        _mm512_permutexvar_ps(lo, d),
        _mm512_permutexvar_ps(hi, d),
        _mm512_permutexvar_ps(lo, m),
        _mm512_permutexvar_ps(hi, m),
    ]
}

/// Tile row `r` of a record (32 bf16: weights `2r` and `2r + 1` of the 16 columns), from its
/// [`scales`] `sm`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tile_row<const NIB: bool, const MIN: bool, const Z: i32>(
    rec: *const u8,
    r: usize,
    sm: &[std::arch::x86_64::__m512; 4],
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let (mut a, mut b) = if NIB {
        let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(rec.add(16 * r) as *const __m128i));
        (
            _mm512_and_si512(v, _mm512_set1_epi32(15)),
            _mm512_srli_epi32::<4>(v),
        )
    } else {
        let at = rec.add(32 * r);
        (
            _mm512_cvtepu8_epi32(_mm_loadu_si128(at as *const __m128i)),
            _mm512_cvtepu8_epi32(_mm_loadu_si128(at.add(16) as *const __m128i)),
        )
    };
    if Z != 0 {
        let zp = _mm512_set1_epi32(Z);
        a = _mm512_sub_epi32(a, zp);
        b = _mm512_sub_epi32(b, zp);
    }
    let (fa, fb) = (_mm512_cvtepi32_ps(a), _mm512_cvtepi32_ps(b));
    let (fa, fb) = if MIN {
        (
            _mm512_fmadd_ps(fa, sm[0], sm[2]),
            _mm512_fmadd_ps(fb, sm[1], sm[3]),
        )
    } else {
        (_mm512_mul_ps(fa, sm[0]), _mm512_mul_ps(fb, sm[1]))
    };
    std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(fb, fa))
}

impl QTiles {
    /// Chunk `c` of panels `p..p + G` times `R` rows of bf16 activations, added into `acc`
    /// (row `q`, panel `i` at `acc[q][i]`): each tile row rebuilt in registers and multiplied
    /// at once (`vdpbf16ps`, row `q`'s pair `r` at `x[q] + 2r`), never stored. Each lane's
    /// chain runs over the tile rows in order, as [`super::bf16_dot`]'s tile path does, so the
    /// bits are the same.
    ///
    /// # Safety
    /// AVX-512 F, BW, BF16 and F16C present; panels `p..p + G` and chunk `c` exist; each
    /// `x[q]` readable for 32 values.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16,f16c")]
    pub(super) unsafe fn dots_in_registers<const R: usize, const G: usize>(
        &self,
        p: usize,
        c: usize,
        x: &[*const u16; R],
        acc: &mut [[std::arch::x86_64::__m512; G]; R],
    ) {
        match self.fmt {
            QFormat::Q8_0 => self.dot_chunk_as::<false, false, 128, R, G>(p, c, x, acc),
            QFormat::Q4_0 => self.dot_chunk_as::<true, false, 8, R, G>(p, c, x, acc),
            _ => self.dot_chunk_as::<true, true, 0, R, G>(p, c, x, acc),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_chunk_as<
        const NIB: bool,
        const MIN: bool,
        const Z: i32,
        const R: usize,
        const G: usize,
    >(
        &self,
        p: usize,
        c: usize,
        x: &[*const u16; R],
        acc: &mut [[std::arch::x86_64::__m512; G]; R],
    ) {
        use std::arch::x86_64::*;
        // plain loops, not closures, around the vector code (kept in this feature context)
        let mut recs = [std::ptr::null::<u8>(); G];
        let mut sm = [[_mm512_setzero_ps(); 4]; G];
        for (i, (rec, s)) in recs.iter_mut().zip(&mut sm).enumerate() {
            *rec = self.record_ahead(p + i, c);
            *s = scales(*rec, self.fmt);
        }
        for r in 0..KC / 2 {
            let mut b = [_mm512_setzero_si512(); G];
            for ((bi, rec), s) in b.iter_mut().zip(&recs).zip(&sm) {
                *bi = tile_row::<NIB, MIN, Z>(*rec, r, s);
            }
            super::bf16_dot::add_tile_row(acc, &b, |q| x[q].add(2 * r));
        }
    }
}
