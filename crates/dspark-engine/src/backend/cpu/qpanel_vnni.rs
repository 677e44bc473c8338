//! The VNNI form of [`super::qpanel`]'s kernel, for calls of few rows: the same panel layout and
//! the same bits as the AMX tiles ([`super::qpanel_amx`]), on AVX-512 VNNI alone.
//!
//! A panel-block's B layout holds, per 64-byte row `r`, four consecutive codes of each of the
//! 16 columns, so one `vpdpbusd` against the row's four activation codes (broadcast) adds
//! `Σ code · xcode` over k = 4r‥4r+3 into each column's lane: eight of them give the block's
//! exact integer dots for 16 columns at once, and [`super::qpanel::add_dot`] takes them as the
//! tiles' dots. (Q8_0's signed codes are offset by 128 to meet `vpdpbusd`'s unsigned operand,
//! and `128 · Σ xcodes` is taken off again: the same integers.) About 25 instructions per
//! 512 weights and row, against 64 for the pair layout's tile.

use std::arch::x86_64::*;

use super::qpack::{QFormat, QPacked, QK};
use super::qpanel::{add_dot, params, store_panel, stride, Rows, PANEL, ROWS};
use crate::backend::cpu::Columns;

/// Every panel of this task's columns against all `m` rows, in passes of [`ROWS`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub unsafe fn task(w: &QPacked, q: &Rows, m: usize, cols: &Columns) {
    for p in cols.j0 / PANEL..cols.j1.div_ceil(PANEL) {
        for r0 in (0..m).step_by(ROWS) {
            let rows = (m - r0).min(ROWS);
            let acc = match w.fmt {
                QFormat::Q8_0 => panel::<false, false, false>(w, q, p, r0, rows),
                QFormat::Q4_0 => panel::<true, false, false>(w, q, p, r0, rows),
                QFormat::Q4K => panel::<true, true, true>(w, q, p, r0, rows),
                _ => panel::<true, true, false>(w, q, p, r0, rows),
            };
            store_panel(cols, p, r0, rows, &acc);
        }
    }
}

/// The 8 rows of a panel-block's B layout as unsigned bytes.
#[inline(always)]
unsafe fn b_rows<const NIB: bool>(pb: *const u8) -> [__m512i; 8] {
    let mut b = [_mm512_setzero_si512(); 8];
    if NIB {
        let mask = _mm512_set1_epi8(0x0f);
        for j in 0..4 {
            let v = _mm512_loadu_si512(pb.add(64 * j) as *const __m512i);
            b[2 * j] = _mm512_and_si512(v, mask);
            b[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
        }
    } else {
        let flip = _mm512_set1_epi8(-128);
        for (r, br) in b.iter_mut().enumerate() {
            let v = _mm512_loadu_si512(pb.add(64 * r) as *const __m512i);
            *br = _mm512_xor_si512(v, flip);
        }
    }
    b
}

/// Rows `r0..r0 + rows` against panel `p`: the 16 columns' sums of each row.
#[inline(always)]
unsafe fn panel<const NIB: bool, const MIN: bool, const F32: bool>(
    w: &QPacked,
    q: &Rows,
    p: usize,
    r0: usize,
    rows: usize,
) -> [__m512; ROWS] {
    let (k, nb) = (w.k, w.k / QK);
    let st = stride(w.fmt);
    let base = w.codes.as_ptr().add(p * nb * st);
    let mut acc = [_mm512_setzero_ps(); ROWS];
    // the zero point taken off each dot: Q8_0's offset codes, Q4_0's 8 (Q4_1 and Q4_K have
    // mins instead)
    let zp = match (NIB, MIN) {
        (false, _) => 128,
        (true, false) => 8,
        (true, true) => 0,
    };
    for b in 0..nb {
        let pb = base.add(b * st);
        for l in (0..st).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(pb.wrapping_add(8192 + l) as *const i8);
        }
        let br = b_rows::<NIB>(pb);
        let (d, mins) = params::<NIB, MIN, F32>(pb);
        for (i, acc_r) in acc.iter_mut().enumerate().take(rows) {
            let xc = q.codes.as_ptr().add((r0 + i) * k + b * QK) as *const i32;
            let (mut d0, mut d1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for r in (0..8).step_by(2) {
                d0 = _mm512_dpbusd_epi32(d0, br[r], _mm512_set1_epi32(xc.add(r).read_unaligned()));
                d1 = _mm512_dpbusd_epi32(
                    d1,
                    br[r + 1],
                    _mm512_set1_epi32(xc.add(r + 1).read_unaligned()),
                );
            }
            let x = (r0 + i) * nb + b;
            let mut dot = _mm512_add_epi32(d0, d1);
            if zp != 0 {
                dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(zp * q.sum[x]));
            }
            add_dot::<MIN>(acc_r, dot, d, mins, q, x);
        }
    }
    acc
}
