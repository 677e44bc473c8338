//! f32 / bf16 / f16 GEMV of several rows (verify blocks, prefill chunks) on AVX-512 CPUs, with the
//! per-output arithmetic of [`super::avx2`]: one 8-lane accumulator per output over `k` in
//! steps of 8, its fixed-order horizontal sum, then the scalar tail. So a verify row still
//! gives the bits of a one-row decode step, which stays on the AVX2 path.
//!
//! Two columns share one 16-lane register: lanes 0-7 hold column `c`'s accumulator and lanes
//! 8-15 column `c + 1`'s, and one row's 8 activations are broadcast to both halves. A tile of up
//! to 9 rows × 4 columns keeps 18 accumulators in registers, and every weight is read once per
//! verify block.
//!
//! The weights of the tile a few columns ahead are prefetched into the L2 while this tile
//! computes. Without that, a Zen 4 thread computing 9 rows waited on memory and on the FMA
//! units in turn: the demo's 30 layers and head took 28-33 ms with 9 rows against 15-17 ms
//! with one (AVX2 3 × 3 tiles, or these tiles prefetching into the L1 two tiles ahead), and
//! 17-20 ms with the L2 prefetch 16 KiB ahead (`gemv_model_probe`, two threads).

use std::arch::x86_64::*;

use super::avx2::{Load, Prefetch, RowTiles, TileOut};
use super::x86::hsum;

/// Rows per tile.
const ROWS: usize = 9;
/// Column pairs per tile.
const PAIRS: usize = 2;
/// Columns per tile.
const COLS: usize = 2 * PAIRS;
/// How far ahead of the tile being computed its weights are prefetched into the L2, in
/// bytes of the weight stream (rounded down to whole column tiles, at least one).
const PREFETCH_BYTES: usize = 16 << 10;
/// Rows per block of a prefill chunk (their activations stay in the L2 while the block streams
/// the task's columns once).
const ROW_BLOCK: usize = 63;

/// Whether this CPU runs these tiles (AVX-512F and VL, plus the AVX2/FMA level of the tail).
pub fn available() -> bool {
    super::avx512::available()
}

/// These tiles, for [`super::avx2`]'s row scheduler (the caller checked [`available`]).
pub(super) struct Avx512Tiles;

impl RowTiles for Avx512Tiles {
    const ROWS: usize = ROWS;
    const COLS: usize = COLS;
    const ROW_BLOCK: usize = ROW_BLOCK;
    fn ahead<T>(k: usize) -> usize {
        (PREFETCH_BYTES / (COLS * k * std::mem::size_of::<T>())).max(1) * COLS
    }
    /// A missing column of the last pair reads the last real one; its output is dropped.
    unsafe fn run<T: Load>(
        xp: *const f32,
        nr: usize,
        wp: *const T,
        nc: usize,
        k: usize,
        pf: Prefetch,
        out: &mut TileOut,
    ) {
        let cols: [*const T; COLS] = std::array::from_fn(|c| wp.add(c.min(nc - 1) * k));
        dispatch(xp, nr, cols, nc.div_ceil(2), k, pf, out)
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn dispatch<T: Load>(
    xp: *const f32,
    nr: usize,
    wp: [*const T; COLS],
    np: usize,
    k: usize,
    pf: Prefetch,
    out: &mut TileOut,
) {
    macro_rules! go {
        ($($r:literal),*) => {
            match (nr, np) {
                $(($r, 1) => tile::<$r, 1, T>(xp, wp, k, pf, out),
                  ($r, _) => tile::<$r, 2, T>(xp, wp, k, pf, out),)*
                _ => unreachable!("tile of {nr} rows"),
            }
        };
    }
    go!(1, 2, 3, 4, 5, 6, 7, 8, 9)
}

/// Rows `0..R` of `xp` (row stride `k`) against column pairs `0..P` of `wp`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn tile<const R: usize, const P: usize, T: Load>(
    xp: *const f32,
    wp: [*const T; COLS],
    k: usize,
    pf: Prefetch,
    out: &mut TileOut,
) {
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    let mut line = pf.first;
    let mut o = 0;
    while o + 8 <= k {
        pf.step(&mut line);
        let wv: [__m512; P] = std::array::from_fn(|p| {
            let lo = _mm256_castps_pd(T::load8(wp[2 * p].add(o)));
            let hi = _mm256_castps_pd(T::load8(wp[2 * p + 1].add(o)));
            _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1))
        });
        for (r, ar) in acc.iter_mut().enumerate() {
            let xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                xp.add(r * k + o) as *const f64
            )));
            for (a, wc) in ar.iter_mut().zip(&wv) {
                *a = _mm512_fmadd_ps(xv, *wc, *a);
            }
        }
        o += 8;
    }
    for (r, ar) in acc.iter().enumerate() {
        for (p, a) in ar.iter().enumerate() {
            let halves = [
                _mm512_castps512_ps256(*a),
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(*a), 1)),
            ];
            for (h, v) in halves.into_iter().enumerate() {
                let (xr, wc) = (xp.add(r * k), wp[2 * p + h]);
                let mut s = hsum(v);
                for t in o..k {
                    s = (*xr.add(t)).mul_add((*wc.add(t)).one(), s);
                }
                out[r][2 * p + h] = s;
            }
        }
    }
}
