//! Verify blocks (2 to 32 rows) on AVX2 + FMA without AVX-512: a tile of up to 3 rows × 3
//! columns shares each load (the one-column dot loads weights and activations once per
//! multiply-add).
//!
//! Every output runs exactly the arithmetic of [`super::x86::dot_f32`] /
//! [`super::x86::dot_bf16`]: four 8-lane accumulators over 32-wide steps (accumulator `q`
//! takes elements `32 s + 8 q ..+8` of each step `s`, in order), the 8-wide tail into the
//! first, the same horizontal sum and scalar tail. So a verify row gives the bits of a one-row
//! decode step. With only 16 vector registers the tile cannot hold four accumulators per output,
//! so it runs the four accumulators one after another (four strided passes over the tile's
//! columns, from L1 after the first): each accumulator still sees the same multiply-adds in the
//! same order. Each row tile prefetches an equal share of the column tile two ahead, so the
//! weight stream keeps flowing while the later row tiles compute from cache.

use std::arch::x86_64::*;

use super::avx512::{Load, Prefetch};

/// Rows from which this tile replaces the one-column dot.
pub const TILE_ROWS: usize = 2;
const ROWS: usize = 3;
const COLS: usize = 3;
/// Prefetch distance in columns (two column tiles).
const PREFETCH_COLS: usize = 2 * COLS;

/// `y[m * n]` from `x[m * k]` and weights `w[n * k]`.
pub fn gemv<T: Load>(x: &[f32], m: usize, k: usize, w: &[T], n: usize, y: &mut [f32]) {
    assert_eq!(x.len(), m * k, "gemv: x is not m*k");
    assert_eq!(w.len(), n * k, "gemv: w is not n*k");
    assert_eq!(y.len(), m * n, "gemv: y is not m*n");
    assert!(super::x86::available(), "gemv avx2: CPU lacks AVX2/FMA");
    super::super::column_tasks(y, n, n * k * m, |cols| {
        // balanced row tiles (9 rows: 3 + 3 + 3; 4 rows: 2 + 2)
        let per = m.div_ceil(m.div_ceil(ROWS));
        let tiles = m.div_ceil(per);
        let lines = (COLS * k * std::mem::size_of::<T>()).div_ceil(64);
        let share = lines.div_ceil(tiles);
        let per_step = share.div_ceil((k / 8).max(1));
        let mut out = [[0f32; COLS]; ROWS];
        for j in (cols.j0..cols.j1).step_by(COLS) {
            let nc = (cols.j1 - j).min(COLS);
            let ahead = j + PREFETCH_COLS + COLS <= cols.j1;
            for (t, r0) in (0..m).step_by(per).enumerate() {
                let nr = (m - r0).min(per);
                let pf = if ahead {
                    Prefetch {
                        // SAFETY: column j + PREFETCH_COLS + COLS - 1 < n exists; a prefetch
                        // never faults, and the lines stay inside that column tile.
                        base: unsafe { w.as_ptr().add((j + PREFETCH_COLS) * k) } as *const i8,
                        first: t * share,
                        end: ((t + 1) * share).min(lines),
                        per_step,
                    }
                } else {
                    Prefetch::NONE
                };
                let (xp, wp) = (x[r0 * k..].as_ptr(), w[j * k..].as_ptr());
                // SAFETY: AVX2/FMA present (asserted); rows r0..r0+nr of x and columns
                // j..j+nc of w exist (lengths asserted above).
                unsafe { dispatch(xp, nr, wp, nc, k, pf, &mut out) };
                for (i, row) in out[..nr].iter().enumerate() {
                    for (c, v) in row[..nc].iter().enumerate() {
                        cols.set(r0 + i, j + c, *v);
                    }
                }
            }
        }
    });
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dispatch<T: Load>(
    xp: *const f32,
    nr: usize,
    wp: *const T,
    nc: usize,
    k: usize,
    pf: Prefetch,
    out: &mut [[f32; COLS]; ROWS],
) {
    macro_rules! go {
        ($($r:literal, $c:literal);*) => {
            match (nr, nc) {
                $(($r, $c) => tile::<$r, $c, T>(xp, wp, k, pf, out),)*
                _ => unreachable!("tile {nr}x{nc}"),
            }
        };
    }
    go!(1, 1; 1, 2; 1, 3; 2, 1; 2, 2; 2, 3; 3, 1; 3, 2; 3, 3)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize, const C: usize, T: Load>(
    xp: *const f32,
    wp: *const T,
    k: usize,
    pf: Prefetch,
    out: &mut [[f32; COLS]; ROWS],
) {
    let steps = k / 32;
    let mut line = pf.first;
    // the dot's accumulator q of every output, one pass per q
    let mut sums = [[[_mm256_setzero_ps(); 4]; C]; R];
    for q in 0..4 {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut step = |o: usize, acc: &mut [[__m256; C]; R]| {
            for _ in 0..pf.per_step {
                if line < pf.end {
                    _mm_prefetch::<_MM_HINT_T0>(pf.base.add(64 * line));
                    line += 1;
                }
            }
            let wv: [__m256; C] = std::array::from_fn(|c| T::load8(wp.add(c * k + o)));
            for (r, ar) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(xp.add(r * k + o));
                for (a, wc) in ar.iter_mut().zip(&wv) {
                    *a = _mm256_fmadd_ps(xv, *wc, *a);
                }
            }
        };
        for s in 0..steps {
            step(32 * s + 8 * q, &mut acc);
        }
        if q == 0 {
            // the 8-wide tail goes into the first accumulator, after its 32-wide steps
            let mut i = 32 * steps;
            while i + 8 <= k {
                step(i, &mut acc);
                i += 8;
            }
        }
        for (sr, ar) in sums.iter_mut().zip(&acc) {
            for (sc, a) in sr.iter_mut().zip(ar) {
                sc[q] = *a;
            }
        }
    }
    for (r, sr) in sums.iter().enumerate() {
        for (c, a) in sr.iter().enumerate() {
            out[r][c] = super::x86::finish(a, xp.add(r * k), wp.add(c * k), k / 8 * 8, k);
        }
    }
}
