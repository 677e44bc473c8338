//! The exact packed matmul ([`super::qexact`]) on AVX2 CPUs, and for Q6_K everywhere: each
//! group of 4 interleaved columns is rebuilt as the loader's f32 weights in a small scratch
//! (4 · k floats, in the L1 or L2), then the dense GEMV's own register tiles
//! ([`super::gemv::f32_tile`]) run every row of the block on it. The outputs therefore have
//! the dense copy's bits by construction: the same f32 weights, the same per-output arithmetic.
//!
//! Rebuilding a weight: `s · (q − z)` (Q8_0, Q4_0, Q6_K), or `s · q + m` (Q4_1, Q4_K) in one
//! fused multiply-add. `s · q` is exact in f32 for every format held here (an f16 scale, times
//! a 6-bit or 8-bit sub-scale for Q4_K / Q6_K, times a code of at most 8 bits: at most 23
//! significant bits), so the one rounding is that of `+ m`, as in the loader's dequantization.
//!
//! A decode step then reads the packed bytes once (a fifth to an eighth of the dense copy's)
//! and spends a few vector instructions per 8 weights rebuilding them, straight into the dot
//! products (as do calls of up to [`REG_ROWS`] rows); more rows share each rebuilt group across
//! a block of up to [`ROW_BLOCK`] rows through the scratch.

use std::arch::x86_64::*;

use super::gemv::{f32_tile, hsum8, with_scratch, TileOut};
use super::qpack::{prefetch_group, QFormat, QPacked, COL_TILE};

/// Rows per block: each rebuilt group serves this many rows before the next is built.
const ROW_BLOCK: usize = 64;
/// Rows and columns per register tile: 4 × 2 keeps eight accumulator chains in flight (enough
/// to hide the multiply-add latency on two FMA pipes; 3 × 2 left a quarter of them idle) beside
/// two weight registers and one activation register.
const TILE_ROWS: usize = 4;
const TILE_COLS: usize = 2;
/// Up to this many rows, the rebuilt weights go straight into the rows' dot products (two
/// columns at a time, `2 · rows` accumulators) without the scratch. On Zen 4 running this form,
/// the demo's matrices over 2 / 3 rows took 10.4 / 10.7 ms with the scratch and 8.0-8.3 /
/// 9.7-9.9 this way; 4 rows were 5% slower this way (12.6-13.1 against 12.1).
const REG_ROWS: usize = 3;

/// Whether this CPU runs this file's kernel (AVX2, FMA, F16C).
pub fn available() -> bool {
    super::avx2_fma()
}

/// `y[m · n]` = `x[m · k]` times the dequantized `w`ᵀ. The caller checked the lengths, the
/// format and [`available`].
pub fn run(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    let k = w.k;
    if m == 0 {
        return; // nothing to write (a tile is never run with zero rows)
    }
    super::column_tasks(y, w.n, w.n * k * m, |cols| {
        if m <= REG_ROWS {
            // up to REG_ROWS rows: weights rebuilt straight into the dot products, no scratch
            for j in (cols.j0..cols.j1).step_by(COL_TILE) {
                let mut rows = [[0f32; COL_TILE]; REG_ROWS];
                // SAFETY: AVX2/FMA/F16C present (the caller checked); j is a multiple of
                // COL_TILE below n_pad; x holds m rows of k floats.
                unsafe {
                    match m {
                        1 => rows[..1].copy_from_slice(&dots::<1>(w, j, x.as_ptr())),
                        2 => rows[..2].copy_from_slice(&dots::<2>(w, j, x.as_ptr())),
                        _ => rows[..3].copy_from_slice(&dots::<3>(w, j, x.as_ptr())),
                    }
                }
                for (r, row) in rows[..m].iter().enumerate() {
                    for (c, v) in row.iter().enumerate().take(cols.j1 - j) {
                        cols.set(r, j + c, *v);
                    }
                }
            }
            return;
        }
        with_scratch(COL_TILE * k, |g| {
            let mut out: TileOut = Default::default();
            for b0 in (0..m).step_by(ROW_BLOCK) {
                let b1 = (b0 + ROW_BLOCK).min(m);
                // balanced row tiles (9 rows: 3 + 3 + 3; 5 rows: 3 + 2)
                let per = (b1 - b0).div_ceil((b1 - b0).div_ceil(TILE_ROWS));
                for j in (cols.j0..cols.j1).step_by(COL_TILE) {
                    // SAFETY: AVX2/FMA/F16C present (the caller checked); j is a multiple of
                    // COL_TILE below n_pad; g holds 4 · k floats.
                    unsafe { rebuild_into(w, j, g.as_mut_ptr()) };
                    let live = (cols.j1 - j).min(COL_TILE);
                    for c0 in (0..live).step_by(TILE_COLS) {
                        let nc = (live - c0).min(TILE_COLS);
                        for r0 in (b0..b1).step_by(per) {
                            let nr = (b1 - r0).min(per);
                            // SAFETY: AVX2/FMA present; rows r0..r0+nr of x and the scratch's
                            // columns c0..c0+nc exist, each k long.
                            unsafe {
                                f32_tile(
                                    x[r0 * k..].as_ptr(),
                                    nr,
                                    g[c0 * k..].as_ptr(),
                                    nc,
                                    k,
                                    &mut out,
                                )
                            };
                            for (i, row) in out[..nr].iter().enumerate() {
                                for (c, v) in row[..nc].iter().enumerate() {
                                    cols.set(r0 + i, j + c0 + c, *v);
                                }
                            }
                        }
                    }
                }
            }
        })
    });
}

/// Every column of `w` as f32, row-major `[n, k]`.
pub fn dequantize(w: &QPacked) -> Vec<f32> {
    let k = w.k;
    // written once by the rebuild, not zeroed first (a prefill chunk rebuilds every matrix)
    let mut v: Vec<f32> = Vec::with_capacity(w.n_pad * k);
    let base = v.spare_capacity_mut().as_mut_ptr() as *mut f32;
    for j in (0..w.n_pad).step_by(COL_TILE) {
        // SAFETY: AVX2/FMA/F16C present (the caller checked); j is a multiple of COL_TILE
        // below n_pad; the capacity holds columns j..j+4 of k floats each.
        unsafe { rebuild_into(w, j, base.add(j * k)) };
    }
    // SAFETY: every column j < n_pad, so every float below n · k, was written above.
    unsafe { v.set_len(w.n * k) };
    v
}

/// Rebuilds columns `j..j+4` of `w` as f32 into `g` (column `c` at `g[c·k..]`).
///
/// # Safety
/// AVX2, FMA and F16C present; `j` a multiple of 4 below `w.n_pad`; `g` holds `4 · w.k` floats.
unsafe fn rebuild_into(w: &QPacked, j: usize, g: *mut f32) {
    dispatch::<0, 0, COL_TILE>(w, j, g, std::ptr::null());
}

/// The dot products of `R` rows (`x`, `R · w.k` floats) with columns `j..j+4` of `w`, the
/// weights rebuilt straight into the products (the dense tiles' arithmetic: one 8-lane
/// accumulator per output over `k` in order, then `hsum`). Two or more rows take the columns
/// in two passes of two, so that the accumulators (`2 · R`) stay in registers.
///
/// # Safety
/// AVX2, FMA and F16C present; `j` a multiple of 4 below `w.n_pad`; `x` holds `R · w.k` floats.
unsafe fn dots<const R: usize>(w: &QPacked, j: usize, x: *const f32) -> [[f32; COL_TILE]; R] {
    let null = std::ptr::null_mut();
    if R == 1 {
        return dispatch::<R, 0, COL_TILE>(w, j, null, x);
    }
    // each pass fills its two columns of every row
    let mut out = dispatch::<R, 0, 2>(w, j, null, x);
    for (o, d) in out.iter_mut().zip(dispatch::<R, 2, 2>(w, j, null, x)) {
        o[2..].copy_from_slice(&d[..2]);
    }
    out
}

/// [`group`] for `w`'s format.
///
/// # Safety
/// As [`group`].
#[inline]
unsafe fn dispatch<const R: usize, const C0: usize, const NC: usize>(
    w: &QPacked,
    j: usize,
    g: *mut f32,
    x: *const f32,
) -> [[f32; COL_TILE]; R] {
    match (w.fmt, w.half) {
        (QFormat::Q4_1, true) => group::<true, true, true, false, R, C0, NC>(w, j, g, x),
        (QFormat::Q4_1 | QFormat::Q4K, false) => {
            group::<true, true, false, false, R, C0, NC>(w, j, g, x)
        }
        (QFormat::Q4_0, true) => group::<true, false, true, false, R, C0, NC>(w, j, g, x),
        (QFormat::Q4_0, false) => group::<true, false, false, false, R, C0, NC>(w, j, g, x),
        (QFormat::Q6K, _) => group::<false, false, false, true, R, C0, NC>(w, j, g, x),
        (_, true) => group::<false, false, true, false, R, C0, NC>(w, j, g, x),
        (_, false) => group::<false, false, false, false, R, C0, NC>(w, j, g, x),
    }
}

/// Rebuilds columns `j + C0 .. j + C0 + NC` of the group: `NIB`: 4-bit codes (else bytes);
/// `MIN`: a min per block; `H`: f16 scales and mins (else f32); `P16`: a scale per 16 elements
/// (`[A_lo, B_lo, A_hi, B_hi]` per pair, Q6_K). With `R == 0` the weights go into `gp` (column
/// `c` at `gp[c·k..]`); with `R` rows at `x` they go straight into the `R × NC` dot products,
/// which it returns (row `r`, column `C0 + c` at `[r][c]`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<
    const NIB: bool,
    const MIN: bool,
    const H: bool,
    const P16: bool,
    const R: usize,
    const C0: usize,
    const NC: usize,
>(
    w: &QPacked,
    j: usize,
    gp: *mut f32,
    x: *const f32,
) -> [[f32; COL_TILE]; R] {
    let (k, cpp) = (w.k, w.codes_per_pair());
    let blocks = k / 32;
    let spp = w.fmt.scales_per_pair();
    // bytes of one pair's scales, and of one min
    let (sw, mw) = if H { (2 * spp, 2) } else { (4 * spp, 4) };
    let (wc, ws) = w.group(j, sw);
    let mins = w.mins.as_ptr();
    let zp = _mm256_set1_epi32(w.fmt.zero_point());
    let low = _mm_set1_epi8(15);
    let mut acc = [[_mm256_setzero_ps(); R]; NC];
    for p in 0..w.np {
        prefetch_group(wc, ws, p, cpp, sw);
        // this pair's scales for the 4 columns, in storage order (per column [A, B], or
        // [A_lo, B_lo, A_hi, B_hi] for P16), and mins ([m_A, m_B] per column), as f32
        let mut sv = [0f32; 16];
        let at = ws.add(p * COL_TILE * sw);
        if H {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i));
            _mm256_storeu_ps(sv.as_mut_ptr(), v);
        } else {
            _mm256_storeu_ps(sv.as_mut_ptr(), _mm256_loadu_ps(at as *const f32));
            if P16 {
                let v = _mm256_loadu_ps((at as *const f32).add(8));
                _mm256_storeu_ps(sv.as_mut_ptr().add(8), v);
            }
        }
        let mut mv = [0f32; 8];
        if MIN {
            let col = |c: usize| mins.add(((j + c) * w.nm + 2 * p) * mw);
            let v = if H {
                let r = |c: usize| (col(c) as *const i32).read_unaligned();
                _mm256_cvtph_ps(_mm_set_epi32(r(3), r(2), r(1), r(0)))
            } else {
                let r = |c: usize| (col(c) as *const i64).read_unaligned();
                _mm256_castsi256_ps(_mm256_set_epi64x(r(3), r(2), r(1), r(0)))
            };
            _mm256_storeu_ps(mv.as_mut_ptr(), v);
        }
        for (ci, col_acc) in acc.iter_mut().enumerate() {
            let c = C0 + ci;
            let pc = wc.add((p * COL_TILE + c) * cpp);
            let out = gp.wrapping_add(c * k + 64 * p);
            for blk in 0..2 {
                if 2 * p + blk >= blocks {
                    break; // the padding block of an odd count
                }
                // the scale of k 0..16 and 16..32 of this block
                let (s_lo, s_hi) = if P16 {
                    (sv[4 * c + blk], sv[4 * c + 2 + blk])
                } else {
                    (sv[2 * c + blk], sv[2 * c + blk])
                };
                let m = _mm256_set1_ps(mv[2 * c + blk]);
                // the block's 32 codes as four 8-lane groups, k 0..8, 8..16, 16..24, 24..32
                let q: [__m256i; 4] = if NIB {
                    // byte i holds k = i (low nibble) and k = 16 + i (high)
                    let b = _mm_loadu_si128(pc.add(16 * blk) as *const __m128i);
                    let lo = _mm_and_si128(b, low);
                    let hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
                    [
                        _mm256_cvtepu8_epi32(lo),
                        _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)),
                        _mm256_cvtepu8_epi32(hi),
                        _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)),
                    ]
                } else {
                    // k 0..16 at 16 · blk, k 16..32 at 32 + 16 · blk
                    let a = _mm_loadu_si128(pc.add(16 * blk) as *const __m128i);
                    let b = _mm_loadu_si128(pc.add(32 + 16 * blk) as *const __m128i);
                    [
                        _mm256_cvtepu8_epi32(a),
                        _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)),
                        _mm256_cvtepu8_epi32(b),
                        _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)),
                    ]
                };
                for (t, qt) in q.into_iter().enumerate() {
                    let s = _mm256_set1_ps(if t < 2 { s_lo } else { s_hi });
                    let v = if MIN {
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(qt), s, m)
                    } else {
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(qt, zp)), s)
                    };
                    if R == 0 {
                        _mm256_storeu_ps(out.add(32 * blk + 8 * t), v);
                    }
                    for (r, a) in col_acc.iter_mut().enumerate() {
                        let xv = _mm256_loadu_ps(x.add(r * k + 64 * p + 32 * blk + 8 * t));
                        *a = _mm256_fmadd_ps(xv, v, *a);
                    }
                }
            }
        }
    }
    let mut out = [[0f32; COL_TILE]; R];
    for (ci, col) in acc.iter().enumerate() {
        for (r, a) in col.iter().enumerate() {
            out[r][ci] = hsum8(*a);
        }
    }
    out
}
