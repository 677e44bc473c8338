//! The AMX tiles of [`super::qpanel`]: one tile multiply gives the exact integer dots of a
//! 32-element block for up to 16 rows and 16 columns; the rows' f32 sums then take them in
//! [`super::qpanel::add_dot`]'s order. Taken for calls of [`super::qpanel::AMX_ROWS`] rows or more
//! (fewer rows run [`super::qpanel_vnni`], with the same bits).

use std::arch::asm;
use std::arch::x86_64::*;

use super::amx::{configure, Config};
use super::qpack::{QFormat, QPacked, QK};
use super::qpanel::{add_dot, code_bytes, store_panel, stride, Rows, PANEL};
use crate::backend::cpu::Columns;

/// Rows per tile pass: the C and A tiles' height, the most a tile holds. One 16-row pass cost
/// about 20% less than two of 8 (`qpanel_timing`), and a 750-token prefill 5-8% less.
const ROWS: usize = 16;

/// The tile configuration: tmm0, tmm1 C (`rows` x 16 i32), tmm2, tmm4 A (`rows` x 32
/// codes), tmm3, tmm5 B (8 x 64 bytes).
fn config(rows: usize) -> Config {
    Config::new()
        .tile(0, rows, 64)
        .tile(1, rows, 64)
        .tile(2, rows, 32)
        .tile(4, rows, 32)
        .tile(3, 8, 64)
        .tile(5, 8, 64)
}

#[repr(C, align(64))]
struct Buf([u8; 512]);

/// Every panel of this task's columns, in passes of up to [`ROWS`] rows. The tile
/// configuration stays loaded on the thread between calls ([`configure`]).
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub unsafe fn task(w: &QPacked, q: &Rows, m: usize, cols: &Columns) {
    for r0 in (0..m).step_by(ROWS) {
        let rows = (m - r0).min(ROWS);
        configure(&config(rows));
        let mut out = |p: usize, acc: &[__m512; ROWS]| store_panel(cols, p, r0, rows, acc);
        let panels = cols.j0 / PANEL..cols.j1.div_ceil(PANEL);
        match w.fmt {
            QFormat::Q8_0 => stream::<false, false, false>(w, q, panels, r0, rows, &mut out),
            QFormat::Q4_0 => stream::<true, false, false>(w, q, panels, r0, rows, &mut out),
            QFormat::Q4K => stream::<true, true, true>(w, q, panels, r0, rows, &mut out),
            _ => stream::<true, true, false>(w, q, panels, r0, rows, &mut out),
        }
    }
}

/// A Q4 panel-block's nibbles spread to the bytes of the B tile.
#[inline(always)]
unsafe fn unpack(pb: *const u8, buf: &mut Buf) {
    let mask = _mm512_set1_epi8(0x0f);
    for j in 0..4 {
        let v = _mm512_loadu_si512(pb.add(64 * j) as *const __m512i);
        let lo = _mm512_and_si512(v, mask);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
        _mm512_store_si512(buf.0.as_mut_ptr().add(128 * j) as *mut __m512i, lo);
        _mm512_store_si512(buf.0.as_mut_ptr().add(128 * j + 64) as *mut __m512i, hi);
    }
}

/// The integer dots of two blocks (the second only with `two`): the rows' codes `a[i]` (rows
/// `lda` bytes apart) against the B tiles `b[i]`, into `c[i]` (`rows` x 16 i32 each).
#[inline(always)]
unsafe fn dots<const NIB: bool>(
    a: [*const i8; 2],
    b: [*const u8; 2],
    lda: usize,
    two: bool,
    c: [*mut i32; 2],
) {
    let ([a0, a1], [b0, b1], [c0, c1]) = (a, b, c);
    let s = 64usize;
    // one block: A and B tiles in tmm2 / tmm3, C in tmm0; the second in tmm4 / tmm5, tmm1.
    // `$dp` is the dot product: `tdpbsud` (signed codes of the rows, unsigned Q4 codes) or
    // `tdpbssd` (both signed: Q8_0)
    macro_rules! two {
        ($dp:literal) => {
            asm!(
                "tileloadd tmm2, [{a0} + {lda}*1]",
                "tileloadd tmm3, [{b0} + {s}*1]",
                "tileloadd tmm4, [{a1} + {lda}*1]",
                "tileloadd tmm5, [{b1} + {s}*1]",
                "tilezero tmm0",
                "tilezero tmm1",
                concat!($dp, " tmm0, tmm2, tmm3"),
                concat!($dp, " tmm1, tmm4, tmm5"),
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                a0 = in(reg) a0, b0 = in(reg) b0, a1 = in(reg) a1, b1 = in(reg) b1,
                lda = in(reg) lda, s = in(reg) s, c0 = in(reg) c0, c1 = in(reg) c1,
                options(nostack)
            )
        };
    }
    macro_rules! one {
        ($dp:literal) => {
            asm!(
                "tileloadd tmm2, [{a0} + {lda}*1]",
                "tileloadd tmm3, [{b0} + {s}*1]",
                "tilezero tmm0",
                concat!($dp, " tmm0, tmm2, tmm3"),
                "tilestored [{c0} + {s}*1], tmm0",
                a0 = in(reg) a0, b0 = in(reg) b0, lda = in(reg) lda, s = in(reg) s,
                c0 = in(reg) c0, options(nostack)
            )
        };
    }
    match (NIB, two) {
        (true, true) => two!("tdpbsud"),
        (false, true) => two!("tdpbssd"),
        (true, false) => one!("tdpbsud"),
        (false, false) => one!("tdpbssd"),
    }
}

/// Adds block `b`'s dots (`c`, `rows` x 16, as the tile stored them) into the rows' sums.
#[inline(always)]
unsafe fn add_block<const NIB: bool, const MIN: bool, const F32: bool>(
    acc: &mut [__m512; ROWS],
    c: *const i32,
    pb: *const u8,
    q: &Rows,
    at: usize,
    nb: usize,
    rows: usize,
) {
    let (d, mins) = super::qpanel::params::<NIB, MIN, F32>(pb);
    for (i, acc_r) in acc.iter_mut().enumerate().take(rows) {
        let x = at + i * nb;
        let mut dot = _mm512_load_si512(c.add(16 * i) as *const __m512i);
        if NIB && !MIN {
            // Q4_0: codes carry a zero point of 8
            dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(8 * q.sum[x]));
        }
        add_dot::<MIN>(acc_r, dot, d, mins, q, x);
    }
}

/// Steps between a pair's unpack and its tile multiply, and between that and its
/// epilogue: a tile load of bytes just stored by vector stores (or a vector load of a
/// tile's store) waits until those stores leave the core, so each stage reads what an
/// earlier step wrote.
const LAG: usize = 2;
const RING: usize = 2 * LAG + 1;

/// Rows `r0..r0 + rows` against `panels` (16 columns each), one pair of blocks a step, as
/// a pipeline over the flattened (panel, pair) sequence: step `t` unpacks pair `t`, runs
/// the tiles of pair `t − LAG` and the epilogue of pair `t − 2·LAG`; `out(p, acc)` takes
/// each panel's sums.
#[inline(always)]
unsafe fn stream<const NIB: bool, const MIN: bool, const F32: bool>(
    w: &QPacked,
    q: &Rows,
    panels: std::ops::Range<usize>,
    r0: usize,
    rows: usize,
    out: &mut impl FnMut(usize, &[__m512; ROWS]),
) {
    let (k, nb) = (w.k, w.k / QK);
    let st = stride(w.fmt);
    debug_assert_eq!(code_bytes(w.fmt), if NIB { 256 } else { 512 });
    let pairs = nb.div_ceil(2);
    let total = panels.len() * pairs;
    let a = q.codes.as_ptr().add(r0 * k);
    #[repr(C, align(64))]
    struct C([i32; 16 * ROWS]);
    let mut bufs: [[Buf; 2]; RING] = std::array::from_fn(|_| [Buf([0; 512]), Buf([0; 512])]);
    let mut cs: [[C; 2]; RING] = std::array::from_fn(|_| [C([0; 16 * ROWS]), C([0; 16 * ROWS])]);
    // pair t: its panel, its first block, and its panel-block bytes
    let at = |t: usize| {
        let (p, b) = (panels.start + t / pairs, 2 * (t % pairs));
        let pb = w.codes.as_ptr().add((p * nb + b) * st);
        (p, b, pb)
    };
    let mut acc = [_mm512_setzero_ps(); ROWS];
    for t in 0..total + 2 * LAG {
        if t < total {
            let (_, b, pb) = at(t);
            for l in (0..2 * st).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(pb.wrapping_add(8192 + l) as *const i8);
            }
            if NIB {
                let slot = &mut bufs[t % RING];
                unpack(pb, &mut slot[0]);
                if b + 1 < nb {
                    unpack(pb.add(st), &mut slot[1]);
                }
            }
        }
        if t >= LAG && t - LAG < total {
            let u = t - LAG;
            let (_, b, pb) = at(u);
            let two = b + 1 < nb;
            let (t0, t1) = if NIB {
                let slot = &bufs[u % RING];
                (slot[0].0.as_ptr(), slot[1].0.as_ptr())
            } else {
                (pb, pb.add(st))
            };
            let [c0, c1] = &mut cs[u % RING];
            dots::<NIB>(
                [a.add(b * QK), a.add((b + 1).min(nb - 1) * QK)],
                [t0, t1],
                k,
                two,
                [c0.0.as_mut_ptr(), c1.0.as_mut_ptr()],
            );
        }
        if t >= 2 * LAG {
            let u = t - 2 * LAG;
            let (p, b, pb) = at(u);
            let [c0, c1] = &cs[u % RING];
            let xat = r0 * nb + b;
            add_block::<NIB, MIN, F32>(&mut acc, c0.0.as_ptr(), pb, q, xat, nb, rows);
            if b + 1 < nb {
                add_block::<NIB, MIN, F32>(
                    &mut acc,
                    c1.0.as_ptr(),
                    pb.add(st),
                    q,
                    xat + 1,
                    nb,
                    rows,
                );
            }
            if b + 2 >= nb {
                out(p, &acc);
                acc = [_mm512_setzero_ps(); ROWS];
            }
        }
    }
}
