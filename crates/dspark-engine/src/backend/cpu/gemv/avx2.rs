//! f32 / bf16 / f16 GEMV on AVX2 + FMA (+ F16C): one-row decode steps on every x86 CPU, and verify blocks and
//! prefill chunks where AVX-512 is missing ([`super::avx512_rows`] takes those otherwise, with
//! the same per-output arithmetic).
//!
//! The arithmetic of every output `(row, column)`: one 8-lane accumulator takes
//! `x[o..o+8] * w[o..o+8]` for `o = 0, 8, 16, ...` in order (a fused multiply-add per lane), then
//! the fixed-order horizontal sum of its lanes, then the scalar tail `k % 8` by fused
//! multiply-adds. Which tile computes an output never changes that sequence, so a verify row
//! gives the bits of a one-row decode step.
//!
//! One accumulator per output lets a tile walk `k` once, front to back: a verify tile of 3 rows
//! × 3 columns keeps its nine accumulators in registers and streams its columns sequentially.
//! The arithmetic this replaces (four accumulators per output, as a one-column dot keeps them)
//! needed four strided passes over each tile; on the demo's 30 layers with 9 rows, one thread
//! measured 82.6 ms that way against 57.3 ms here. A decode step reads one column after
//! another: a single stream. Tiles of 8 columns (eight streams 2-6 KiB apart) read the demo's
//! f32 weights at 16 GB/s on one Zen 4 thread against 25 GB/s for one column at a time
//! (gemv_model_probe: 33.6 against 21.3 ms; two threads 16.9-22.2 against 16.7-16.9 ms).
//!
//! On Intel CPUs that single stream reads slower than two: a decode step there walks the
//! columns in adjacent pairs (two accumulator chains, each output's arithmetic unchanged) and
//! prefetches into the L2 [`PAIR_PREFETCH`] bytes ahead. The demo's f32 layers and head
//! (`gemv_model_probe`, two threads, 2-core Xeon, family 6 model 207) took 17.1-18.1 ms
//! against 24.1-25.2 one column at a time; 4 columns without prefetch 18.1-19.2. See [`Walk`].
//!
//! A verify or prefill tile prefetches an equal share of the column tile two ahead into the L2,
//! so the weight stream keeps flowing while the later row tiles compute from cache. Into the
//! L1 instead, the demo's 30 layers and head with 9 rows took 32 ms against 21 ms (Zen 4, two
//! threads, `gemv_model_probe`, these tiles forced on an AVX-512 CPU).

use std::arch::x86_64::*;

use super::x86::hsum;

/// Weights from `p`, widened to f32: 8 (`load8`) or one (the scalar tail).
pub trait Load: Copy + Sync {
    /// # Safety
    /// AVX2 available; 8 elements readable at `p`.
    unsafe fn load8(p: *const Self) -> __m256;
    fn one(self) -> f32;
}

impl Load for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    fn one(self) -> f32 {
        self
    }
}

impl Load for half::bf16 {
    /// bf16 -> f32 is a 16-bit left shift of the bits.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load8(p: *const half::bf16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
    fn one(self) -> f32 {
        self.to_f32()
    }
}

impl Load for half::f16 {
    /// f16 -> f32 by F16C, exact (every f16 value, subnormals included, is an f32 value).
    /// The tile functions enable `f16c` too, so this inlines into them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const half::f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    fn one(self) -> f32 {
        self.to_f32()
    }
}

/// Rows per verify tile.
const ROWS: usize = 3;
/// Columns per verify tile.
const COLS: usize = 3;
/// Prefetch distance in columns (two column tiles).
const PREFETCH_COLS: usize = 2 * COLS;
/// Rows per block of a prefill chunk: 64 rows of k = 1536 f32 activations are 384 KiB, inside
/// a 1 MiB L2 with the weight tiles; each block streams the columns once.
const ROW_BLOCK: usize = 64;

/// Room for one tile's outputs: the largest tile of either family (9 rows × 4 columns, the
/// AVX-512 one).
pub(crate) type TileOut = [[f32; 4]; 9];

/// One `nr × nc` tile (at most 3 × 3, or 4 × 2) of f32 weights at stride `k`, without prefetch: the
/// per-output arithmetic of every tile here, for kernels that rebuild f32 weights themselves
/// (`qexact_avx2.rs`).
///
/// # Safety
/// AVX2 and FMA present; rows `0..nr` of `xp` and columns `0..nc` of `wp` readable, `k` each.
pub(crate) unsafe fn f32_tile(
    xp: *const f32,
    nr: usize,
    wp: *const f32,
    nc: usize,
    k: usize,
    out: &mut TileOut,
) {
    dispatch(xp, nr, wp, nc, k, Prefetch::NONE, out)
}

/// One family of register tiles for several rows, as [`rows`] schedules them.
pub(super) trait RowTiles {
    /// Rows and columns per tile.
    const ROWS: usize;
    const COLS: usize;
    /// Rows per block of a prefill chunk.
    const ROW_BLOCK: usize;
    /// Columns from the tile being computed to the tile whose weights it prefetches, for
    /// `k`-long columns of `T`.
    fn ahead<T>(k: usize) -> usize;
    /// Runs an `nr × nc` tile (at most `ROWS × COLS`): rows of `xp` and columns of `wp`, both
    /// at stride `k`.
    ///
    /// # Safety
    /// The CPU has the family's features; those rows and columns exist.
    unsafe fn run<T: Load>(
        xp: *const f32,
        nr: usize,
        wp: *const T,
        nc: usize,
        k: usize,
        pf: Prefetch,
        out: &mut TileOut,
    );
}

/// This file's 3 × 3 tiles.
struct Avx2Tiles;

impl RowTiles for Avx2Tiles {
    const ROWS: usize = ROWS;
    const COLS: usize = COLS;
    const ROW_BLOCK: usize = ROW_BLOCK;
    fn ahead<T>(_k: usize) -> usize {
        PREFETCH_COLS
    }
    unsafe fn run<T: Load>(
        xp: *const f32,
        nr: usize,
        wp: *const T,
        nc: usize,
        k: usize,
        pf: Prefetch,
        out: &mut TileOut,
    ) {
        dispatch(xp, nr, wp, nc, k, pf, out)
    }
}

/// Cache lines `first..end` after `base` for one tile to prefetch, `per_step` per 8-wide step.
#[derive(Clone, Copy)]
pub(super) struct Prefetch {
    pub(super) base: *const i8,
    pub(super) first: usize,
    pub(super) end: usize,
    pub(super) per_step: usize,
}

impl Prefetch {
    /// Issues one 8-wide step's share of the prefetches into the L2, from line `*line` on.
    ///
    /// # Safety
    /// `base` and the lines up to `end` lie in one allocation (a prefetch never faults, but
    /// the address arithmetic must stay in bounds).
    #[inline(always)]
    pub(super) unsafe fn step(&self, line: &mut usize) {
        for _ in 0..self.per_step {
            if *line < self.end {
                _mm_prefetch::<_MM_HINT_T1>(self.base.add(64 * *line));
                *line += 1;
            }
        }
    }

    pub(super) const NONE: Prefetch = Prefetch {
        base: std::ptr::null(),
        first: 0,
        end: 0,
        per_step: 0,
    };
}

/// Bytes from a column pair's start to the weights a decode step on [`Walk::Pairs`] prefetches
/// (4-12 KiB measured alike).
const PAIR_PREFETCH: usize = 8192;

/// How a one-row decode step walks its columns. Either way every output runs the same
/// arithmetic, so the walk changes speed, never bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Walk {
    /// One column after another, no software prefetch: one sequential stream (the faster walk
    /// on AMD Zen 4, where it was measured against tiles of 8 columns).
    OneColumn,
    /// Two adjacent columns at a time, prefetching [`PAIR_PREFETCH`] bytes ahead into the L2
    /// (the faster walk on Intel).
    Pairs,
}

/// This CPU's walk, read once: `DSPARK_DECODE_WALK=one|pairs`, else [`Walk::Pairs`] on Intel
/// CPUs and [`Walk::OneColumn`] elsewhere (the walk not measured on other vendors stays off).
pub(crate) fn walk() -> Walk {
    static WALK: std::sync::LazyLock<Walk> =
        std::sync::LazyLock::new(|| match std::env::var("DSPARK_DECODE_WALK").as_deref() {
            Ok("one") => Walk::OneColumn,
            Ok("pairs") => Walk::Pairs,
            _ if intel() => Walk::Pairs,
            _ => Walk::OneColumn,
        });
    *WALK
}

/// Whether the CPU's vendor string is Intel's.
fn intel() -> bool {
    // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
    #[allow(unused_unsafe)]
    let r = unsafe { __cpuid(0) };
    let mut vendor = [0u8; 12];
    for (i, v) in [r.ebx, r.edx, r.ecx].into_iter().enumerate() {
        vendor[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    &vendor == b"GenuineIntel"
}

/// `y[m * n]` from `x[m * k]` and weights `w[n * k]`, any `m >= 1`.
pub fn gemv<T: Load>(x: &[f32], m: usize, k: usize, w: &[T], n: usize, y: &mut [f32]) {
    gemv_tiles(x, m, k, w, n, y, super::avx512_rows::available())
}

/// As [`gemv`], with several rows on the AVX-512 tiles (`wide`, which the caller checked the
/// CPU has) or on the AVX2 ones.
pub(super) fn gemv_tiles<T: Load>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[T],
    n: usize,
    y: &mut [f32],
    wide: bool,
) {
    assert_eq!(x.len(), m * k, "gemv: x is not m*k");
    assert_eq!(w.len(), n * k, "gemv: w is not n*k");
    assert_eq!(y.len(), m * n, "gemv: y is not m*n");
    assert!(super::x86::available(), "gemv avx2: CPU lacks AVX2/FMA");
    with_aligned(x, |x| {
        super::super::column_tasks(y, n, n * k * m, |cols| {
            if m == 1 {
                decode(x, k, w, cols, walk())
            } else if wide {
                rows::<T, super::avx512_rows::Avx512Tiles>(x, m, k, w, cols)
            } else {
                rows::<T, Avx2Tiles>(x, m, k, w, cols)
            }
        })
    });
}

/// One row, on `walk`. [`Walk::OneColumn`]: no software prefetch; the weights are read as a
/// single sequential stream, and out-of-order execution overlaps one column's accumulator
/// chain with the next column's loads. [`Walk::Pairs`]: two chains per tile, and each pair
/// prefetches its own length of weights [`PAIR_PREFETCH`] bytes on (none near the end of `w`).
fn decode<T: Load>(x: &[f32], k: usize, w: &[T], cols: &super::super::Columns, walk: Walk) {
    let mut out: TileOut = Default::default();
    let xp = x.as_ptr();
    if walk == Walk::OneColumn {
        for j in cols.j0..cols.j1 {
            let wp = w[j * k..].as_ptr();
            // SAFETY: AVX2/FMA present (asserted by the caller); row 0 of x and column j of w
            // exist (lengths asserted by the caller).
            unsafe { tile::<1, 1, T>(xp, wp, k, Prefetch::NONE, &mut out) };
            cols.set(0, j, out[0][0]);
        }
        return;
    }
    let size = std::mem::size_of::<T>();
    let lines = (2 * k * size).div_ceil(64);
    let first = PAIR_PREFETCH / 64;
    for j in (cols.j0..cols.j1).step_by(2) {
        let wp = w[j * k..].as_ptr();
        let pf = if j * k * size + 64 * (first + lines) <= std::mem::size_of_val(w) {
            // one line per 8-wide step: a pair of f32 columns consumes one per step
            Prefetch {
                base: wp as *const i8,
                first,
                end: first + lines,
                per_step: 1,
            }
        } else {
            Prefetch::NONE
        };
        // SAFETY: AVX2/FMA present (asserted by the caller); row 0 of x and columns j (and
        // j + 1 when it is in this task) of w exist; the prefetched lines lie inside `w`.
        if j + 1 < cols.j1 {
            unsafe { tile::<1, 2, T>(xp, wp, k, pf, &mut out) };
            cols.set(0, j + 1, out[0][1]);
        } else {
            unsafe { tile::<1, 1, T>(xp, wp, k, pf, &mut out) };
        }
        cols.set(0, j, out[0][0]);
    }
}

/// One-row products on the given walk (tests compare the walks' bits).
#[cfg(test)]
pub(crate) fn decode_on<T: Load>(
    x: &[f32],
    k: usize,
    w: &[T],
    n: usize,
    y: &mut [f32],
    walk: Walk,
) {
    assert!(x.len() == k && w.len() == n * k && y.len() == n);
    super::super::column_tasks(y, n, n * k, |cols| decode(x, k, w, cols, walk));
}

/// Several rows: blocks of `F::ROW_BLOCK` rows, each streaming the task's columns once in
/// tiles of `F::COLS`, every column tile shared by balanced row tiles of at most `F::ROWS`; each
/// row tile prefetches an equal share of the column tile `F::ahead` columns on.
fn rows<T: Load, F: RowTiles>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[T],
    cols: &super::super::Columns,
) {
    let ahead_cols = F::ahead::<T>(k);
    let mut out: TileOut = Default::default();
    let lines = (F::COLS * k * std::mem::size_of::<T>()).div_ceil(64);
    for b0 in (0..m).step_by(F::ROW_BLOCK) {
        let b1 = (b0 + F::ROW_BLOCK).min(m);
        // balanced row tiles (9 rows in 3 x 3 tiles: 3 + 3 + 3; 13 in 9-row tiles: 7 + 6)
        let per = (b1 - b0).div_ceil((b1 - b0).div_ceil(F::ROWS));
        let share = lines.div_ceil((b1 - b0).div_ceil(per));
        let per_step = share.div_ceil((k / 8).max(1));
        for j in (cols.j0..cols.j1).step_by(F::COLS) {
            let nc = (cols.j1 - j).min(F::COLS);
            let ahead = j + ahead_cols + F::COLS <= cols.j1;
            for (t, r0) in (b0..b1).step_by(per).enumerate() {
                let nr = (b1 - r0).min(per);
                let pf = if ahead {
                    Prefetch {
                        // SAFETY: column j + ahead + cols - 1 < n exists; a prefetch never
                        // faults, and the lines stay inside that column tile.
                        base: unsafe { w.as_ptr().add((j + ahead_cols) * k) } as *const i8,
                        first: t * share,
                        end: ((t + 1) * share).min(lines),
                        per_step,
                    }
                } else {
                    Prefetch::NONE
                };
                let (xp, wp) = (x[r0 * k..].as_ptr(), w[j * k..].as_ptr());
                // SAFETY: AVX2/FMA present (asserted by the caller); rows r0..r0+nr of x and
                // columns j..j+nc of w exist (lengths asserted by the caller).
                unsafe { F::run(xp, nr, wp, nc, k, pf, &mut out) };
                for (i, row) in out[..nr].iter().enumerate() {
                    for (c, v) in row[..nc].iter().enumerate() {
                        cols.set(r0 + i, j + c, *v);
                    }
                }
            }
        }
    }
}

/// Runs `f` on `x`, or on a copy of it at 32-byte alignment when it is not aligned: a 32-byte
/// load that straddles two cache lines costs two. The copy lives in [`with_scratch`]'s buffer
/// and changes no arithmetic.
fn with_aligned<R>(x: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
    if (x.as_ptr() as usize).is_multiple_of(32) {
        return f(x);
    }
    with_scratch(x.len(), |a| {
        a.copy_from_slice(x);
        f(a)
    })
}

/// Runs `f` on `len` f32 at 32-byte alignment, in a buffer this thread reuses from call to
/// call (a decode step makes a few hundred calls; a nested call gets a buffer of its own). The
/// contents on entry are unspecified.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<Lanes>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|s| {
        let mut fresh = Vec::new();
        let mut held = s.try_borrow_mut();
        let v = held.as_deref_mut().unwrap_or(&mut fresh);
        v.resize(len.div_ceil(8), Lanes([0.0; 8]));
        // SAFETY: `v` holds `8 * v.len() >= len` contiguous f32 (`Lanes` is `repr(C)` of
        // `[f32; 8]`, whose size equals its alignment, 32).
        let a = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut f32, len) };
        f(a)
    })
}

/// Eight f32 lanes aligned as one AVX register.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Lanes([f32; 8]);

/// Runs the `nr × nc` 3 × 3-family tile (also 4 × 1 and 4 × 2, for `qexact_avx2.rs`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dispatch<T: Load>(
    xp: *const f32,
    nr: usize,
    wp: *const T,
    nc: usize,
    k: usize,
    pf: Prefetch,
    out: &mut TileOut,
) {
    macro_rules! go {
        ($($r:literal, $c:literal);*) => {
            match (nr, nc) {
                $(($r, $c) => tile::<$r, $c, T>(xp, wp, k, pf, out),)*
                _ => unreachable!("tile {nr}x{nc}"),
            }
        };
    }
    go!(1, 1; 1, 2; 1, 3; 2, 1; 2, 2; 2, 3; 3, 1; 3, 2; 3, 3; 4, 1; 4, 2)
}

/// Rows `0..R` of `xp` (row stride `k`) against columns `0..C` of `wp`, into `out[r][c]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize, const C: usize, T: Load>(
    xp: *const f32,
    wp: *const T,
    k: usize,
    pf: Prefetch,
    out: &mut TileOut,
) {
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut line = pf.first;
    let mut o = 0;
    while o + 8 <= k {
        pf.step(&mut line);
        let wv: [__m256; C] = std::array::from_fn(|c| T::load8(wp.add(c * k + o)));
        for (r, ar) in acc.iter_mut().enumerate() {
            let xv = _mm256_loadu_ps(xp.add(r * k + o));
            for (a, wc) in ar.iter_mut().zip(&wv) {
                *a = _mm256_fmadd_ps(xv, *wc, *a);
            }
        }
        o += 8;
    }
    for (r, ar) in acc.iter().enumerate() {
        for (c, a) in ar.iter().enumerate() {
            let (xr, wc) = (xp.add(r * k), wp.add(c * k));
            let mut s = hsum(*a);
            for t in o..k {
                s = (*xr.add(t)).mul_add((*wc.add(t)).one(), s);
            }
            out[r][c] = s;
        }
    }
}
