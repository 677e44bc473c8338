//! The AVX-512 form of the exact packed matmul ([`super::qexact`]): each group of 4 interleaved
//! columns rebuilt 16 lanes at a time (lanes 0-7 column `c`, 8-15 column `c + 1`, as in
//! [`super::gemv`]'s AVX-512 tiles) as the loader's f32 weights, then every row's two
//! accumulators per column pair take them in `k` order, 8 at a time, and each output is the
//! fixed-order horizontal sum of its 8 lanes: the dense f32 GEMV's arithmetic on the
//! dequantized weights, so the bits of the dense copy for any row count.
//!
//! Two forms share [`rebuild`]:
//! - **registers** ([`tile`], up to [`ROWS`] rows): the rebuilt weights feed the rows' fused
//!   multiply-adds straight away, so even a one-row decode step reads the packed bytes once
//!   and writes nothing;
//! - **scratch** ([`store`] then [`from_scratch`]): for blocks of more rows, a group is rebuilt
//!   once into a thread's scratch (4 · k floats, in the L1 or L2) and every row tile of the
//!   block reads it there, instead of rebuilding it once per tile of [`ROWS`] rows.

use std::arch::x86_64::*;

use super::qpack::{prefetch_group, QFormat, QPacked, COL_TILE};

/// Rows per tile (2 accumulators each): 9, so that a draft model's 8 drafts and their pending
/// token rebuild the weights once (18 accumulators, the block's scales and offsets, the rebuilt
/// weights and a row of `x` stay within the 32 vector registers).
pub const ROWS: usize = 9;

/// One tile's outputs, `[row][column]`.
pub type Out = [[f32; COL_TILE]; ROWS];

/// Runs `$f::<PRE.., NIB, MIN, H>($args)` with the `NIB`, `MIN`, `H` of `w`'s format.
macro_rules! by_format {
    ($w:expr, $f:ident, [$($pre:tt),*], ($($a:expr),*)) => {
        match ($w.fmt, $w.half) {
            (QFormat::Q4_1, true) => $f::<$($pre,)* true, true, true>($($a),*),
            (QFormat::Q4_1 | QFormat::Q4K, false) => $f::<$($pre,)* true, true, false>($($a),*),
            (QFormat::Q4_0, true) => $f::<$($pre,)* true, false, true>($($a),*),
            (QFormat::Q4_0, false) => $f::<$($pre,)* true, false, false>($($a),*),
            (_, true) => $f::<$($pre,)* false, false, true>($($a),*),
            (_, false) => $f::<$($pre,)* false, false, false>($($a),*),
        }
    };
}

/// Runs `$go!(R)` for `nr` rows (1..=ROWS, more taken as ROWS).
macro_rules! by_rows {
    ($nr:expr, $go:ident) => {
        match $nr {
            1 => $go!(1),
            2 => $go!(2),
            3 => $go!(3),
            4 => $go!(4),
            5 => $go!(5),
            6 => $go!(6),
            7 => $go!(7),
            8 => $go!(8),
            _ => $go!(9),
        }
    };
}

/// Rows `0..nr` of `x` (row stride `w.k`) against the interleaved columns `j..j+4`, the weights
/// rebuilt in registers.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C present; `w` not a format with a scale per 16 (Q6_K);
/// `j` a multiple of 4 below `w.n_pad`; `nr` (1..=ROWS) rows of `w.k` floats readable at `x`.
pub unsafe fn tile(w: &QPacked, j: usize, x: *const f32, nr: usize, out: &mut Out) {
    macro_rules! go {
        ($r:tt) => {
            by_format!(w, in_registers, [$r], (w, j, x, out))
        };
    }
    by_rows!(nr, go)
}

/// Rebuilds columns `j..j+4` of `w` into `g`: for each step of 8 along `k`, 32 floats (the two
/// column pairs' 16-lane vectors, as [`rebuild`] gives them).
///
/// # Safety
/// As [`tile`]; `g` holds `4 · w.k` floats and is 64-byte aligned.
pub unsafe fn store(w: &QPacked, j: usize, g: *mut f32) {
    by_format!(w, into_scratch, [], (w, j, g))
}

/// Rows `0..nr` of `x` (row stride `k`) against a group [`store`] rebuilt into `g`.
///
/// # Safety
/// As [`tile`]'s CPU features; `g` as [`store`] left it for `k`; `nr` (1..=ROWS) rows of `k`
/// floats readable at `x`.
pub unsafe fn from_scratch(g: *const f32, k: usize, x: *const f32, nr: usize, out: &mut Out) {
    macro_rules! go {
        ($r:tt) => {
            scratch_rows::<$r>(g, k, x, out)
        };
    }
    by_rows!(nr, go)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn in_registers<const R: usize, const NIB: bool, const MIN: bool, const H: bool>(
    w: &QPacked,
    j: usize,
    x: *const f32,
    out: &mut Out,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    rebuild::<NIB, MIN, H>(w, j, |o, wv| accumulate(&mut acc, x, w.k, o, wv));
    finish(&acc, out);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn into_scratch<const NIB: bool, const MIN: bool, const H: bool>(
    w: &QPacked,
    j: usize,
    g: *mut f32,
) {
    rebuild::<NIB, MIN, H>(w, j, |o, wv| {
        _mm512_store_ps(g.add(4 * o), wv[0]);
        _mm512_store_ps(g.add(4 * o + 16), wv[1]);
    });
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn scratch_rows<const R: usize>(g: *const f32, k: usize, x: *const f32, out: &mut Out) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for o in (0..k).step_by(8) {
        let wv = [
            _mm512_load_ps(g.add(4 * o)),
            _mm512_load_ps(g.add(4 * o + 16)),
        ];
        accumulate(&mut acc, x, k, o, wv);
    }
    finish(&acc, out);
}

/// One step of 8 along `k` (at `o`) for every row: each row's 8 values of `x` (row stride `k`)
/// broadcast to both halves, times the two column pairs' rebuilt weights `wv`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn accumulate<const R: usize>(
    acc: &mut [[__m512; 2]; R],
    x: *const f32,
    k: usize,
    o: usize,
    wv: [__m512; 2],
) {
    for (r, acc_r) in acc.iter_mut().enumerate() {
        let xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x.add(r * k + o)));
        acc_r[0] = _mm512_fmadd_ps(xv, wv[0], acc_r[0]);
        acc_r[1] = _mm512_fmadd_ps(xv, wv[1], acc_r[1]);
    }
}

/// Each accumulator's two halves (columns `c`, `c + 1`) as [`super::gemv`]'s horizontal sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn finish<const R: usize>(acc: &[[__m512; 2]; R], out: &mut Out) {
    for (r, acc_r) in acc.iter().enumerate() {
        for (half, a) in acc_r.iter().enumerate() {
            out[r][2 * half] = super::gemv::hsum8(_mm512_castps512_ps256(*a));
            out[r][2 * half + 1] = super::gemv::hsum8(_mm512_extractf32x8_ps(*a, 1));
        }
    }
}

/// Rebuilds columns `j..j+4` of `w` in `k` order and hands `sink` each step of 8 as two
/// 16-lane vectors (column pairs (0, 1) and (2, 3)) with its offset along `k`.
/// `NIB`: 4-bit codes (else bytes); `MIN`: a min per block (Q4_1, Q4_K; codes then carry no
/// zero point); `H`: scales and mins stored as f16 (else f32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn rebuild<const NIB: bool, const MIN: bool, const H: bool>(
    w: &QPacked,
    j: usize,
    mut sink: impl FnMut(usize, [__m512; 2]),
) {
    let (k, cpp) = (w.k, w.codes_per_pair());
    let blocks = k / 32;
    // bytes of one pair's two scales, and of one min
    let (sw, mw) = if H { (4, 2) } else { (8, 4) };
    let (wc, ws) = w.group(j, sw);
    let mins = w.mins.as_ptr();
    let low = _mm512_set1_epi32(15);
    let nzp = _mm512_set1_ps(-(w.fmt.zero_point() as f32));
    // lanes 0-7 take entry 0 (column c's), 8-15 entry 2 (column c+1's) of [A_c, B_c,
    // A_c+1, B_c+1]; `ib` the B entries
    let ia = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    let ib = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    for p in 0..w.np {
        prefetch_group(wc, ws, p, cpp, sw);
        // this pair's scales of columns (c0, c0 + 1), c0 = 0, 2: [d_A, d_B] as 4 lanes
        let sc: [__m512; 2] = std::array::from_fn(|h| {
            let at = ws.add((p * COL_TILE + 2 * h) * sw);
            let v = if H {
                _mm_cvtph_ps(_mm_loadl_epi64(at as *const __m128i))
            } else {
                _mm_loadu_ps(at as *const f32)
            };
            _mm512_castps128_ps512(v)
        });
        // and their mins [m_A, m_B] (Q4_1, Q4_K)
        let mn: [__m512; 2] = std::array::from_fn(|h| {
            if !MIN {
                return _mm512_setzero_ps();
            }
            let c0 = 2 * h;
            let (m0, m1) = (
                mins.add(((j + c0) * w.nm + 2 * p) * mw),
                mins.add(((j + c0 + 1) * w.nm + 2 * p) * mw),
            );
            let mm = if H {
                let (a, b) = (
                    (m0 as *const i32).read_unaligned(),
                    (m1 as *const i32).read_unaligned(),
                );
                _mm_cvtph_ps(_mm_set_epi32(0, 0, b, a))
            } else {
                let (a, b) = (
                    (m0 as *const i64).read_unaligned(),
                    (m1 as *const i64).read_unaligned(),
                );
                _mm_castsi128_ps(_mm_set_epi64x(b, a))
            };
            _mm512_castps128_ps512(mm)
        });
        let pc = wc.add(p * COL_TILE * cpp);
        for blk in 0..2 {
            if 2 * p + blk >= blocks {
                break; // the padding block of an odd count
            }
            // per column pair: the block's scale d and offset m, [column c x8 | c + 1 x8].
            // Without a min the offset is −zp·d (exact: zp is a power of two), so
            // `q·d + m` is `(q − zp)·d`, exact in f32, and one fused multiply-add gives it.
            let sel = if blk == 0 { ia } else { ib };
            let d: [__m512; 2] = sc.map(|v| _mm512_permutexvar_ps(sel, v));
            let m: [__m512; 2] = if MIN {
                mn.map(|v| _mm512_permutexvar_ps(sel, v))
            } else {
                d.map(|v| _mm512_mul_ps(v, nzp))
            };
            // Q8_0: bytes k 0..16 of the block at 16·blk, k 16..32 at 32 + 16·blk;
            // nibbles: byte i holds k = i (low) and k = 16 + i (high)
            for part in 0..if NIB { 1 } else { 2 } {
                let off = 32 * part + 16 * blk;
                let b: [__m128i; COL_TILE] = std::array::from_fn(|c| {
                    _mm_loadu_si128(pc.add(c * cpp + off) as *const __m128i)
                });
                // k 0..8 and 8..16 of this part, per pair [column c | column c + 1]
                let v = [0, 2].map(|c| {
                    [
                        _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(b[c], b[c + 1])),
                        _mm512_cvtepu8_epi32(_mm_unpackhi_epi64(b[c], b[c + 1])),
                    ]
                });
                for t in 0..if NIB { 4 } else { 2 } {
                    let wv: [__m512; 2] = std::array::from_fn(|h| {
                        let q = match (NIB, t) {
                            (true, 0 | 1) => _mm512_and_si512(v[h][t], low),
                            (true, _) => _mm512_srli_epi32(v[h][t - 2], 4),
                            (false, _) => v[h][t],
                        };
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d[h], m[h])
                    });
                    sink(64 * p + 32 * blk + 16 * part + 8 * t, wv);
                }
            }
        }
    }
}
