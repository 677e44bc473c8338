//! `--matmul bf16` on CPUs with AVX-512 BF16 but no AMX (AMD Zen 4 and later): the same B tiles
//! and bf16 rows as [`super::bf16_tiles`], multiplied by `vdpbf16ps` instead of tile multiplies.
//!
//! Row `r` of a chunk's B tile holds, for each of a panel's 16 columns, the weights `2r` and
//! `2r + 1`: one 64-byte vector whose 16 lanes are the 16 columns' pairs. Broadcasting a row's
//! activation pair `(x[2r], x[2r + 1])` to every lane, one `vdpbf16ps` adds each column's two
//! bf16 products into its f32 lane. Up to [`MAX_ROWS`] rows and 4 panels (64 columns) share
//! each loaded tile row in registers.
//!
//! Batch invariance: every output is one lane's chain over the chunks and tile rows in order,
//! whatever the rows and panels that share its pass, so a verify block gives the bits of
//! one-row decode steps. The bits are this instruction's, not AMX's (whose tile multiply sums
//! in its own order): each CPU kind is consistent with itself. `DSPARK_BF16_DOT=0` leaves this
//! form out (`--matmul bf16` then runs f32 on such CPUs, as before it existed).

use std::arch::x86_64::*;

use super::bf16_tiles::{rebuilt_group, Rows, TileSource, KC, PANEL, TILE};
use super::Columns;

/// Rows per pass: 6 rows × 4 panels keep 24 accumulators, 4 tile rows and a broadcast in the
/// 32 vector registers.
const MAX_ROWS: usize = 6;
/// Panels per pass.
const GROUP: usize = 4;
/// Up to this many rows (one pass), a rebuilt source's tile rows go straight into the products
/// ([`TileSource::dot_chunk`]) instead of through a stored tile. On the Zen 4, the demo's forward
/// over 1 / 3 / 5 tokens took 6.5 / 8.1 / 9.6 ms so, against 6.6 / 9.1-9.3 / 10.9-11.2 with up
/// to 2 rows so and 6.8-7.1 / 9.2 / 11.0 with stored tiles only.
const FUSED_ROWS: usize = MAX_ROWS;

/// Whether this CPU has AVX-512 BF16 (with F, BW and F16C, which the rebuilt tiles use).
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512bf16")
        && std::is_x86_feature_detected!("f16c")
}

#[repr(C, align(64))]
struct Chunk([u16; GROUP * TILE]);

/// This task's panels in groups of 4 (a task's last 1-3 one at a time), each in passes of up
/// to [`MAX_ROWS`] rows. A rebuilt source read by several passes rebuilds the group's tiles
/// once into a scratch; read by one pass, it rebuilds each tile row in registers just before
/// its multiplies ([`TileSource::dot_chunk`]).
///
/// # Safety
/// [`available`]; `a` holds `m` rows rounded for `w`'s chunks; `cols` starts on a panel.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,f16c")]
pub(super) unsafe fn task<W: TileSource>(w: &W, a: &Rows, m: usize, cols: &Columns) {
    let panels = cols.j0 / PANEL..cols.j1.div_ceil(PANEL);
    // balanced passes (8 rows: 4 + 4; 16 rows: 6 + 5 + 5)
    let per = m.div_ceil(m.div_ceil(MAX_ROWS));
    let mut buf = std::mem::MaybeUninit::<Chunk>::uninit();
    let buf = buf.as_mut_ptr() as *mut u16;
    let mut p = panels.start;
    while p < panels.end {
        let g = (panels.end - p).min(GROUP);
        if W::FUSED && m <= FUSED_ROWS {
            if g < GROUP {
                for q in p..p + g {
                    fused::<W, 1>(w, a, m, q, cols);
                }
            } else {
                fused::<W, GROUP>(w, a, m, p, cols);
            }
        } else if g < GROUP {
            for q in p..p + g {
                passes::<W, 1>(w, a, m, per, q, cols, |c| w.chunk(q, 1, c, buf));
            }
        } else if W::REBUILT && m > per {
            rebuilt_group(w, p, GROUP, |base| {
                passes::<W, GROUP>(w, a, m, per, p, cols, |c| {
                    (base.add(c * GROUP * TILE) as *const u16, TILE)
                })
            });
        } else {
            passes::<W, GROUP>(w, a, m, per, p, cols, |c| w.chunk(p, GROUP, c, buf));
        }
        p += g;
    }
}

/// Panels `p..p + G` for all `m` (up to [`FUSED_ROWS`]) rows of a source that rebuilds its
/// tile rows in registers ([`TileSource::dot_chunk`]).
#[inline(always)]
unsafe fn fused<W: TileSource, const G: usize>(
    w: &W,
    a: &Rows,
    m: usize,
    p: usize,
    cols: &Columns,
) {
    unsafe fn go<W: TileSource, const R: usize, const G: usize>(
        w: &W,
        a: &Rows,
        p: usize,
    ) -> [[__m512; G]; R] {
        let mut acc = [[_mm512_setzero_ps(); G]; R];
        let x0 = a.bits.as_ptr().add(a.start);
        for c in 0..w.dims().2 {
            let x = std::array::from_fn(|q| x0.add(q * a.stride + c * KC));
            w.dot_chunk::<R, G>(p, c, &x, &mut acc);
        }
        acc
    }
    match m {
        1 => emit(&go::<W, 1, G>(w, a, p), 0, p, cols),
        2 => emit(&go::<W, 2, G>(w, a, p), 0, p, cols),
        3 => emit(&go::<W, 3, G>(w, a, p), 0, p, cols),
        4 => emit(&go::<W, 4, G>(w, a, p), 0, p, cols),
        5 => emit(&go::<W, 5, G>(w, a, p), 0, p, cols),
        _ => emit(&go::<W, 6, G>(w, a, p), 0, p, cols),
    }
}

/// Panels `p..p + G` for every row, in passes of `per` rows; `tiles(c)` gives chunk `c`'s B
/// tiles (where panel `p`'s lies, and how many u16 on the next panel's is).
#[inline(always)]
unsafe fn passes<W: TileSource, const G: usize>(
    w: &W,
    a: &Rows,
    m: usize,
    per: usize,
    p: usize,
    cols: &Columns,
    mut tiles: impl FnMut(usize) -> (*const u16, usize),
) {
    let chunks = w.dims().2;
    for r0 in (0..m).step_by(per) {
        let rows = (m - r0).min(per);
        let t = &mut tiles;
        match rows {
            1 => emit(&pass::<1, G>(chunks, a, r0, t), r0, p, cols),
            2 => emit(&pass::<2, G>(chunks, a, r0, t), r0, p, cols),
            3 => emit(&pass::<3, G>(chunks, a, r0, t), r0, p, cols),
            4 => emit(&pass::<4, G>(chunks, a, r0, t), r0, p, cols),
            5 => emit(&pass::<5, G>(chunks, a, r0, t), r0, p, cols),
            _ => emit(&pass::<6, G>(chunks, a, r0, t), r0, p, cols),
        }
    }
}

/// Rows `r0..r0 + R` times panels `p..p + G`: one accumulator per row and panel, over the
/// chunks and their 16 tile rows in order.
#[inline(always)]
unsafe fn pass<const R: usize, const G: usize>(
    chunks: usize,
    a: &Rows,
    r0: usize,
    tiles: &mut impl FnMut(usize) -> (*const u16, usize),
) -> [[__m512; G]; R] {
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    let x = a.bits.as_ptr().add(a.start + r0 * a.stride);
    for c in 0..chunks {
        let (b0, ps) = tiles(c);
        let xc = x.add(c * KC);
        add_chunk(&mut acc, b0, ps, |q| xc.add(q * a.stride));
    }
    acc
}

/// One chunk's stored B tiles of `G` panels (panel `i`'s at `b0 + i · ps`) times `R` rows'
/// chunk of activations (row `q`'s at `x(q)`), added into `acc`, tile row by tile row.
#[inline(always)]
unsafe fn add_chunk<const R: usize, const G: usize>(
    acc: &mut [[__m512; G]; R],
    b0: *const u16,
    ps: usize,
    x: impl Fn(usize) -> *const u16,
) {
    for r in 0..KC / 2 {
        let mut b = [_mm512_setzero_si512(); G];
        for (i, bi) in b.iter_mut().enumerate() {
            *bi = _mm512_loadu_si512(b0.add(i * ps + r * 2 * PANEL) as *const _);
        }
        add_tile_row(acc, &b, |q| x(q).add(2 * r));
    }
}

/// [`TileSource::dot_chunk`] for any source: chunk `c`'s tiles of panels `p..p + G` (up to
/// [`GROUP`]) taken from [`TileSource::chunk`], then multiplied as a pass multiplies them, so
/// the bits equal the passes' (test `tiles_dot_chunk_gives_the_passes_bits`).
///
/// # Safety
/// As [`TileSource::dot_chunk`].
#[inline(always)]
pub(super) unsafe fn dot_chunk_from_tiles<
    W: TileSource + ?Sized,
    const R: usize,
    const G: usize,
>(
    w: &W,
    p: usize,
    c: usize,
    x: &[*const u16; R],
    acc: &mut [[__m512; G]; R],
) {
    assert!(
        G <= GROUP,
        "bf16_dot: more panels than a chunk buffer holds"
    );
    let mut buf = std::mem::MaybeUninit::<Chunk>::uninit();
    let (b0, ps) = w.chunk(p, G, c, buf.as_mut_ptr() as *mut u16);
    add_chunk(acc, b0, ps, |q| x[q]);
}

/// One tile row `b` of `G` panels (16 columns' weight pairs each) times `R` rows' activation
/// pairs (row `q`'s at `pair(q)`), added into `acc[q][i]`: the step every lane's chain takes
/// once per tile row, whether the row was loaded from a tile or rebuilt in registers.
#[inline(always)]
pub(super) unsafe fn add_tile_row<const R: usize, const G: usize>(
    acc: &mut [[__m512; G]; R],
    b: &[__m512i; G],
    pair: impl Fn(usize) -> *const u16,
) {
    for (q, row) in acc.iter_mut().enumerate() {
        let xv: __m512bh =
            std::mem::transmute(_mm512_set1_epi32((pair(q) as *const i32).read_unaligned()));
        for (s, bi) in row.iter_mut().zip(b) {
            *s = _mm512_dpbf16_ps(*s, xv, std::mem::transmute::<__m512i, __m512bh>(*bi));
        }
    }
}

/// Writes a pass's sums: row `r0 + q`, panel `p + i`.
#[inline(always)]
unsafe fn emit<const R: usize, const G: usize>(
    acc: &[[__m512; G]; R],
    r0: usize,
    p: usize,
    cols: &Columns,
) {
    let mut v = [0f32; PANEL];
    for (q, row) in acc.iter().enumerate() {
        for (i, s) in row.iter().enumerate() {
            _mm512_storeu_ps(v.as_mut_ptr(), *s);
            cols.set_run(r0 + q, (p + i) * PANEL, &v);
        }
    }
}
