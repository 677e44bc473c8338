//! AVX2 + FMA tiles for [`super::qgemv`], for x86 CPUs without AVX-512 VNNI (AMD Zen 1-3, most
//! Intel client cores).
//!
//! The u8·i8 dot of a pair of blocks is `maddubs` (products in pairs into i16) and then `madd`
//! by ones (so each i32 lane sums four consecutive products, the grouping of the VNNI path).
//! No i16 saturates:
//! - nibble and 6-bit codes (≤ 63) times |x| ≤ 127 stay below 2 · 63 · 128;
//! - 8-bit codes run signed, `q = code − 128`, with the sign moved onto the activation:
//!   `|q|` (≤ 128 as u8) times `sign(q) · x`, at most 2 · 128 · 127 = 32,512.
//!
//! So every integer dot is exact. With one scale per 32 elements, lanes `l` and `l + 8` of a pair
//! belong to the same block and are added as integers before the single conversion and
//! multiply-add; Q6_K (a scale per 16) converts both halves. Every output of a call runs the
//! same instruction sequence whatever the tile, so rows stay batch-invariant.

use std::arch::x86_64::*;

use super::gemv::hsum8 as hsum;
use super::qgemv::{QPacked, QRows};
use super::qpack::{COL_TILE, QK};

/// Rows handled per tile by the caller ([`super::qgemv`]'s `ROW_TILE`).
const ROW_TILE: usize = 4;

/// Columns `j..j+4` of `w` against rows `r0..r0+nr` of `x`. `NIB`: 4-bit codes; `S8`: 8-bit
/// codes with zero point 128 (Q8_0); `PER16`: a scale per 16 elements (Q6_K); `H`: scales and
/// mins stored as f16 (`w.half`), widened exactly to the f32 values the other layout holds.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C ([`super::avx2_fma`]); `w.half == H`; `j` is a multiple of
/// [`COL_TILE`] below `w.n_pad` and rows `r0..r0 + nr` (nr ≤ 4) exist in `x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile<const NIB: bool, const S8: bool, const PER16: bool, const H: bool>(
    w: &QPacked,
    j: usize,
    x: &QRows,
    r0: usize,
    nr: usize,
    out: &mut [[f32; COL_TILE]; ROW_TILE],
) {
    assert_eq!(w.half, H, "tile chosen for the other scale layout");
    if nr == 1 {
        // one row: the four columns of a group at once, one sequential stream of their
        // interleaved pairs (a few registers spill; still faster than two passes)
        let mut one = [[0f32; COL_TILE]; 1];
        rows::<1, COL_TILE, NIB, S8, PER16, H>(w, j, x, r0, &mut one);
        out[0] = one[0];
        return;
    }
    // tiles of 2 rows x 2 columns keep the accumulators and codes in the 16 registers
    let mut r = 0;
    while r < nr {
        let two = nr - r >= 2;
        for c in (0..COL_TILE).step_by(2) {
            if two {
                let mut part = [[0f32; 2]; 2];
                rows::<2, 2, NIB, S8, PER16, H>(w, j + c, x, r0 + r, &mut part);
                out[r][c..c + 2].copy_from_slice(&part[0]);
                out[r + 1][c..c + 2].copy_from_slice(&part[1]);
            } else {
                let mut part = [[0f32; 2]; 1];
                rows::<1, 2, NIB, S8, PER16, H>(w, j + c, x, r0 + r, &mut part);
                out[r][c..c + 2].copy_from_slice(&part[0]);
            }
        }
        r += if two { 2 } else { 1 };
    }
}

/// The 64 codes of one pair as two registers of u8 (codes 0‥31, 32‥63); for `S8` as i8 `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes<const NIB: bool, const S8: bool>(p: *const u8) -> (__m256i, __m256i) {
    if NIB {
        let v = _mm256_loadu_si256(p as *const __m256i);
        let m = _mm256_set1_epi8(15);
        (
            _mm256_and_si256(v, m),
            _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
        )
    } else {
        let (lo, hi) = (
            _mm256_loadu_si256(p as *const __m256i),
            _mm256_loadu_si256(p.add(32) as *const __m256i),
        );
        if S8 {
            let flip = _mm256_set1_epi8(-128);
            (_mm256_xor_si256(lo, flip), _mm256_xor_si256(hi, flip))
        } else {
            (lo, hi)
        }
    }
}

/// Lane scales of a pair: lanes 0-3 block A, 4-7 block B, for codes 0‥31 (`.0`) and 32‥63
/// (`.1`, the same unless `PER16`), from the pair's first stored scale (f16 when `H`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales<const PER16: bool, const H: bool>(p: *const u8) -> (__m256, __m256) {
    if PER16 {
        let v = _mm256_castps128_ps256(_mm_loadu_ps(p as *const f32));
        (
            _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
            _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)),
        )
    } else {
        // two scales: f16 (the formats that store them so have one per 32, never PER16) or f32
        let two = if H {
            _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()))
        } else {
            _mm_castsi128_ps(_mm_loadl_epi64(p as *const __m128i))
        };
        let s = _mm256_permutevar8x32_ps(
            _mm256_castps128_ps256(two),
            _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
        );
        (s, s)
    }
}

/// Sums of four consecutive u8·i8 products per i32 lane (exact, see the module header).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// `Σ_b min_b · dsum_b` of column `j` and row `r` (0 for formats without a min).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_term<const H: bool>(w: &QPacked, j: usize, x: &QRows, r: usize) -> f32 {
    if !w.fmt.has_min() {
        return 0.0;
    }
    let width = if H { 2 } else { 4 };
    let (mp, dp) = (
        w.mins.as_ptr().add(j * w.nm * width),
        x.dsum.as_ptr().add(r * x.nm),
    );
    let mut acc = _mm256_setzero_ps();
    for b in (0..w.nm).step_by(8) {
        let m = if H {
            _mm256_cvtph_ps(_mm_loadu_si128(mp.add(2 * b) as *const __m128i))
        } else {
            _mm256_loadu_ps(mp.add(4 * b) as *const f32)
        };
        acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(dp.add(b)), acc);
    }
    hsum(acc)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<
    const R: usize,
    const C: usize,
    const NIB: bool,
    const S8: bool,
    const PER16: bool,
    const H: bool,
>(
    w: &QPacked,
    j: usize,
    x: &QRows,
    r0: usize,
    out: &mut [[f32; C]; R],
) {
    let (cpp, spp) = (w.codes_per_pair(), w.fmt.scales_per_pair());
    let zp = w.fmt.zero_point() != 0;
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let sw = spp * if H { 2 } else { 4 };
    // pairs interleave across groups of COL_TILE columns (QPacked::pair_at)
    let lane0 = j % COL_TILE;
    let wc = w.codes.as_ptr().add((j - lane0) * w.np * cpp);
    let ws = w.scales.as_ptr().add((j - lane0) * w.np * sw);
    for p in 0..w.np {
        let mut wv = [(_mm256_setzero_si256(), _mm256_setzero_si256()); C];
        // S8: |q| once per column, shared by the tile's rows
        let mut wa = wv;
        let mut sv = [(_mm256_setzero_ps(), _mm256_setzero_ps()); C];
        for c in 0..C {
            let pc = p * COL_TILE + lane0 + c;
            wv[c] = codes::<NIB, S8>(wc.add(pc * cpp));
            if S8 {
                wa[c] = (_mm256_abs_epi8(wv[c].0), _mm256_abs_epi8(wv[c].1));
            }
            sv[c] = scales::<PER16, H>(ws.add(pc * sw));
        }
        for (i, acc_r) in acc.iter_mut().enumerate() {
            let xb = ((r0 + i) * x.np + p) * 16;
            let xp = x.codes.as_ptr().add(xb * 4);
            let xlo = _mm256_loadu_si256(xp as *const __m256i);
            let xhi = _mm256_loadu_si256(xp.add(32) as *const __m256i);
            let xs_lo = _mm256_loadu_ps(x.scale.as_ptr().add(xb));
            // the zero point's start values (none for S8, whose codes run signed, nor for
            // formats with a min instead of a zero point)
            let (st_lo, st_hi) = if S8 || !zp {
                (_mm256_setzero_si256(), _mm256_setzero_si256())
            } else {
                let sp = x.start.as_ptr().add(xb);
                (
                    _mm256_loadu_si256(sp as *const __m256i),
                    _mm256_loadu_si256(sp.add(8) as *const __m256i),
                )
            };
            let st = _mm256_add_epi32(st_lo, st_hi);
            for c in 0..C {
                let (lo, hi) = wv[c];
                if NIB {
                    // both halves' pair sums fit one i16 (at most 2 · 2 · 15 · 127), so they
                    // are added before the widening: the same integers as widening each half
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, xlo),
                        _mm256_maddubs_epi16(hi, xhi),
                    );
                    let d = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
                    let d = if zp { _mm256_add_epi32(d, st) } else { d };
                    acc_r[c] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(d),
                        _mm256_mul_ps(sv[c].0, xs_lo),
                        acc_r[c],
                    );
                    continue;
                }
                let (dlo, dhi) = if S8 {
                    (
                        dot4(wa[c].0, _mm256_sign_epi8(xlo, lo)),
                        dot4(wa[c].1, _mm256_sign_epi8(xhi, hi)),
                    )
                } else {
                    (
                        _mm256_add_epi32(dot4(lo, xlo), st_lo),
                        _mm256_add_epi32(dot4(hi, xhi), st_hi),
                    )
                };
                let (s_lo, s_hi) = sv[c];
                if PER16 {
                    // lanes l and l + 8 share the activation's block, hence its scale
                    let a = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(dlo),
                        _mm256_mul_ps(s_lo, xs_lo),
                        acc_r[c],
                    );
                    acc_r[c] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dhi), _mm256_mul_ps(s_hi, xs_lo), a);
                } else {
                    let d = _mm256_add_epi32(dlo, dhi);
                    acc_r[c] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(d),
                        _mm256_mul_ps(s_lo, xs_lo),
                        acc_r[c],
                    );
                }
            }
        }
    }
    for (i, acc_r) in acc.iter().enumerate() {
        for c in 0..C {
            out[i][c] = hsum(acc_r[c]) + min_term::<H>(w, j + c, x, r0 + i);
        }
    }
}

const _: () = assert!(QK == 32 && COL_TILE.is_multiple_of(2));
