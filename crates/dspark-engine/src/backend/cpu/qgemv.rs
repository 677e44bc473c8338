//! Quantized GEMV/GEMM on the CPU: `y[m, n] = x[m, k] · W[n, k]ᵀ` with W packed by
//! [`super::qpack`] (GGUF Q8_0, Q4_0, Q4_1, Q4_K, Q6_K).
//!
//! Each activation row is quantized once per call to 8-bit blocks of 32 (scale = max|x|/127,
//! as llama.cpp does), laid out in the same pairs as the weights. Per pair the integer dot is
//! exact (u8·i8 into i32, the zero point folded into the accumulator's start value); it is then
//! scaled and added into one f32 accumulator per output in a fixed order. A tile of up to 4 rows
//! × 4 columns shares each load (the 4 columns' pairs are interleaved in memory, so even one
//! row reads a single sequential stream), but every output runs the same instruction sequence
//! whatever the tile, so a row's result does not depend on how many rows share the call (batch
//! invariance: a verify block gives the bits of one-row decode steps).
//!
//! Tiles: AVX-512 VNNI (here), AVX2 + FMA ([`super::qgemv_avx2`]), else plain Rust.

use super::qpack::COL_TILE;
pub use super::qpack::{QFormat, QPacked, QK};
pub use super::qrows::{quantize_rows, QRows};

/// Rows handled per tile.
const ROW_TILE: usize = 4;

/// `n` rows of `k` GGUF elements of `fmt` packed for [`qgemv`]: in panels where this CPU runs
/// them for the format ([`super::qpanel`]), else in pairs ([`QPacked::from_gguf`]).
pub fn pack(fmt: QFormat, bytes: &[u8], n: usize, k: usize) -> Result<QPacked, String> {
    if super::qpanel::takes(fmt) {
        super::qpanel::pack(fmt, bytes, n, k)
    } else {
        QPacked::from_gguf(fmt, bytes, n, k)
    }
}

/// `y[m · n]` from `x[m · k]` and packed `w`. Panics on inconsistent lengths (callers check).
pub fn qgemv(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    assert_eq!(x.len(), m * w.k, "qgemv: x is not m*k");
    assert_eq!(y.len(), m * w.n, "qgemv: y is not m*n");
    if w.panels {
        return super::qpanel::gemv(x, m, w, y);
    }
    super::qrows::with_quantized(x, m, w, |rows| run_tiles(y, m, w, rows));
}

fn run_tiles(y: &mut [f32], m: usize, w: &QPacked, rows: &QRows) {
    let tile = tile_kernel(w);
    super::column_tasks(y, w.n, w.n * w.k * m, |cols| {
        let mut out = [[0f32; COL_TILE]; ROW_TILE];
        for j in (cols.j0..cols.j1).step_by(COL_TILE) {
            for r0 in (0..m).step_by(ROW_TILE) {
                let nr = (m - r0).min(ROW_TILE);
                // SAFETY: the kernel was chosen for this CPU; `j` is a multiple of COL_TILE
                // below n_pad and rows r0..r0+nr exist.
                unsafe { tile(w, j, rows, r0, nr, &mut out) };
                for (i, row) in out[..nr].iter().enumerate() {
                    for (c, v) in row.iter().enumerate() {
                        if j + c < cols.j1 {
                            cols.set(r0 + i, j + c, *v);
                        }
                    }
                }
            }
        }
    });
}

/// Columns `j..j+4` of `w` against rows `r0..r0+nr` of `x`.
type TileKernel =
    unsafe fn(&QPacked, usize, &QRows, usize, usize, &mut [[f32; COL_TILE]; ROW_TILE]);

/// The fastest tile this CPU has for `w`'s format and scale layout.
fn tile_kernel(w: &QPacked) -> TileKernel {
    let fmt = w.fmt;
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // f16 scales come only with two per pair (never PER16)
        return match (fmt.nibbles(), fmt.per16(), w.half) {
            (true, _, true) => avx512::tile_half::<true>,
            (false, _, true) => avx512::tile_half::<false>,
            (true, _, false) => avx512::tile::<true, false>,
            (false, false, false) => avx512::tile::<false, false>,
            (false, true, false) => avx512::tile::<false, true>,
        };
    }
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        return avx2_tile(fmt, w.half);
    }
    let _ = fmt;
    portable::tile
}

/// Whether the tile [`tile_kernel`] picks for `w` reads the activations' compact scales
/// ([`QRows::scale4`], [`QRows::start16`]), which [`quantize_rows`] then fills.
pub(super) fn reads_compact(w: &QPacked) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return w.half;
    }
    let _ = w;
    false
}

/// The AVX2 tile for `fmt` with f16 (`half`) or f32 scales (the caller checks the CPU has
/// AVX2, FMA and F16C).
#[cfg(target_arch = "x86_64")]
fn avx2_tile(fmt: QFormat, half: bool) -> TileKernel {
    use super::qgemv_avx2::tile;
    match (fmt, half) {
        (QFormat::Q8_0, false) => tile::<false, true, false, false>,
        (QFormat::Q8_0, true) => tile::<false, true, false, true>,
        (QFormat::Q6K, _) => tile::<false, false, true, false>,
        // Q5_0 is packed for the exact kernel only (the loader keeps it in candle's form when
        // weights stay quantized), so this arm is the generic byte tile, never taken today
        (QFormat::Q5_0, h) => {
            if h {
                tile::<false, false, false, true>
            } else {
                tile::<false, false, false, false>
            }
        }
        (QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K, false) => tile::<true, false, false, false>,
        (QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K, true) => tile::<true, false, false, true>,
    }
}

/// `Σ_b min_b · dsum_b` for the formats with a per-block min (0 otherwise), in a fixed order.
fn min_term(w: &QPacked, j: usize, x: &QRows, r: usize) -> f32 {
    if !w.fmt.has_min() {
        return 0.0;
    }
    let ds = &x.dsum[r * x.nm..(r + 1) * x.nm];
    let mut acc = [0f32; 16];
    for (c, dc) in ds.chunks_exact(16).enumerate() {
        for l in 0..16 {
            acc[l] += w.min(j * w.nm + 16 * c + l) * dc[l];
        }
    }
    acc.iter().sum()
}

/// Plain Rust, same arithmetic as the SIMD path up to f32 rounding order.
mod portable {
    use super::{min_term, QPacked, QRows, COL_TILE, ROW_TILE};

    pub unsafe fn tile(
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        nr: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        let (cpp, spp) = (w.codes_per_pair(), w.fmt.scales_per_pair());
        for (i, row) in out[..nr].iter_mut().enumerate() {
            let r = r0 + i;
            for (c, o) in row.iter_mut().enumerate() {
                let col = j + c;
                let mut acc = [0f32; 16];
                for p in 0..w.np {
                    let at = w.pair_at(col, p);
                    let wc = &w.codes[at * cpp..(at + 1) * cpp];
                    let ws = at * spp;
                    let xb = (r * x.np + p) * 16;
                    let xc = &x.codes[xb * 4..xb * 4 + 64];
                    for (l, a) in acc.iter_mut().enumerate() {
                        let mut s = x.start[xb + l];
                        for t in 0..4 {
                            let e = 4 * l + t;
                            let code = if cpp == 32 {
                                if e < 32 {
                                    wc[e] & 15
                                } else {
                                    wc[e - 32] >> 4
                                }
                            } else {
                                wc[e]
                            };
                            s += code as i32 * xc[e] as i32;
                        }
                        // lane l: group (l / 4) % 2 is block A or B, l / 8 the half
                        let scale = if spp == 4 {
                            w.scale(ws + (l / 8) * 2 + (l / 4) % 2)
                        } else {
                            w.scale(ws + (l / 4) % 2)
                        };
                        *a += s as f32 * (scale * x.scale[xb + l]);
                    }
                }
                *o = acc.iter().sum::<f32>() + min_term(w, col, x, r);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::qpack::prefetch_group;
    use super::{QPacked, QRows, COL_TILE, ROW_TILE};

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// 64 codes of one pair as u8 lanes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn codes<const NIB: bool>(p: *const u8) -> __m512i {
        if NIB {
            let v = _mm256_loadu_si256(p as *const __m256i);
            let both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
            _mm512_and_si512(both, _mm512_set1_epi8(15))
        } else {
            _mm512_loadu_si512(p as *const __m512i)
        }
    }

    /// The 16 lane scales of one pair from its 2 or 4 stored f32 scales.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn scales<const PER16: bool>(p: *const u8) -> __m512 {
        if PER16 {
            let idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
            _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(p as *const f32)))
        } else {
            let idx = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
            let two = _mm_castsi128_ps(_mm_loadl_epi64(p as *const __m128i));
            _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(two))
        }
    }

    /// The four 16-lane sums of `v` as one 128-bit vector, in one fixed order: 128-bit quarters
    /// added across halves, then across quarters, then the four lanes of each quarter.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    unsafe fn sum4(v: &[__m512; COL_TILE]) -> __m128 {
        let half = |a: __m512, b: __m512| {
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
                _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
            )
        };
        let (ab, cd) = (half(v[0], v[1]), half(v[2], v[3]));
        // quarter c holds column c's four partial sums
        let q = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(ab, cd),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(ab, cd),
        );
        let q = _mm512_add_ps(q, _mm512_permute_ps::<0b10_11_00_01>(q));
        let q = _mm512_add_ps(q, _mm512_permute_ps::<0b01_00_11_10>(q));
        let idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
        _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, q))
    }

    /// The outputs of rows `r0..r0+R` and columns `j..j+4`: each accumulator's sum plus, for
    /// the formats with a min, `Σ_b min_b · dsum_b` summed the same way (every tile shares
    /// this epilogue, so an output's bits do not depend on the tile).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    unsafe fn finish<const R: usize, const H: bool>(
        acc: &[[__m512; COL_TILE]; R],
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        for (i, acc_r) in acc.iter().enumerate() {
            let mut s = sum4(acc_r);
            if w.fmt.has_min() {
                let width = if H { 2 } else { 4 };
                let dp = x.dsum.as_ptr().add((r0 + i) * x.nm);
                let mut m = [_mm512_setzero_ps(); COL_TILE];
                for (c, mc) in m.iter_mut().enumerate() {
                    let mp = w.mins.as_ptr().add((j + c) * w.nm * width);
                    for b in (0..w.nm).step_by(16) {
                        let v = if H {
                            _mm512_cvtph_ps(_mm256_loadu_si256(mp.add(2 * b) as *const __m256i))
                        } else {
                            _mm512_loadu_ps(mp.add(4 * b) as *const f32)
                        };
                        *mc = _mm512_fmadd_ps(v, _mm512_loadu_ps(dp.add(b)), *mc);
                    }
                }
                s = _mm_add_ps(s, sum4(&m));
            }
            _mm_storeu_ps(out[i].as_mut_ptr(), s);
        }
    }

    /// Runs `$rows::<R, ...>` for `nr` rows against the four interleaved columns at `j`
    /// (one sequential stream of weights); the tile never changes an output's arithmetic.
    macro_rules! by_rows {
        ($rows:ident::<$($g:tt),*>($w:ident, $j:ident, $x:ident, $r0:ident, $nr:ident, $out:ident)) => {
            match $nr {
                1 => $rows::<1, $($g),*>($w, $j, $x, $r0, $out),
                2 => $rows::<2, $($g),*>($w, $j, $x, $r0, $out),
                3 => $rows::<3, $($g),*>($w, $j, $x, $r0, $out),
                _ => $rows::<4, $($g),*>($w, $j, $x, $r0, $out),
            }
        };
    }

    /// The tile for f32 scales (`!w.half`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    pub unsafe fn tile<const NIB: bool, const PER16: bool>(
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        nr: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        assert!(!w.half, "tile chosen for the other scale layout");
        by_rows!(rows::<NIB, PER16>(w, j, x, r0, nr, out))
    }

    /// The tile for two f16 scales per pair (`w.half`: Q8_0, Q4_0, Q4_1).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    pub unsafe fn tile_half<const NIB: bool>(
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        nr: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        assert!(
            w.half && !w.fmt.per16(),
            "tile chosen for the other scale layout"
        );
        by_rows!(rows_half::<NIB>(w, j, x, r0, nr, out))
    }

    /// [`rows`] for two f16 scales per pair (Q8_0, Q4_0, Q4_1), with the bits [`rows`] gives
    /// the same weights held with f32 scales, in fewer instructions: 4-bit codes are the 32 bytes broadcast to both halves and masked to `lo` and
    /// `hi · 16` (no shift or insert), with [`QRows::start16`] and the `/ 16` in
    /// [`QRows::scale4`] undoing the factor exactly; the two weight scales times the row's four
    /// compact scales make one 128-bit product, spread to the 16 lanes by one permute.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    unsafe fn rows_half<const R: usize, const NIB: bool>(
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        let cpp = w.codes_per_pair();
        let mut acc = [[_mm512_setzero_ps(); COL_TILE]; R];
        let (wc, ws) = w.group(j, 4);
        let spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        let mask = _mm512_inserti64x4(_mm512_set1_epi8(0x0f), _mm256_set1_epi8(0xf0u8 as i8), 1);
        let start = if NIB { &x.start16 } else { &x.start };
        for p in 0..w.np {
            prefetch_group(wc, ws, p, cpp, 4);
            let mut wv = [_mm512_setzero_si512(); COL_TILE];
            let mut sv = [_mm_setzero_ps(); COL_TILE];
            for c in 0..COL_TILE {
                let pc = p * COL_TILE + c;
                let at = pc * cpp;
                wv[c] = if NIB {
                    let v = _mm256_loadu_si256(wc.add(at) as *const __m256i);
                    _mm512_and_si512(_mm512_broadcast_i64x4(v), mask)
                } else {
                    _mm512_loadu_si512(wc.add(at) as *const __m512i)
                };
                // [A, B, A, B] from the pair's two f16 scales
                let two = _mm_broadcast_ss(&*(ws.add(pc * 4) as *const f32));
                sv[c] = _mm_cvtph_ps(_mm_castps_si128(two));
            }
            for (i, acc_r) in acc.iter_mut().enumerate() {
                let xp = (r0 + i) * x.np + p;
                let xc = _mm512_loadu_si512(x.codes.as_ptr().add(xp * 64) as *const __m512i);
                let st = _mm512_loadu_si512(start.as_ptr().add(xp * 16) as *const __m512i);
                let xs = _mm_loadu_ps(x.scale4.as_ptr().add(xp * 4));
                for c in 0..COL_TILE {
                    let dot = _mm512_dpbusd_epi32(st, wv[c], xc);
                    let four = _mm512_castps128_ps512(_mm_mul_ps(sv[c], xs));
                    let sc = _mm512_permutexvar_ps(spread, four);
                    acc_r[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc_r[c]);
                }
            }
        }
        finish::<R, true>(&acc, w, j, x, r0, out);
    }

    /// Rows `r0..r0+R` against columns `j..j+4`, f32 scales.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    unsafe fn rows<const R: usize, const NIB: bool, const PER16: bool>(
        w: &QPacked,
        j: usize,
        x: &QRows,
        r0: usize,
        out: &mut [[f32; COL_TILE]; ROW_TILE],
    ) {
        let (cpp, spp) = (w.codes_per_pair(), w.fmt.scales_per_pair());
        let mut acc = [[_mm512_setzero_ps(); COL_TILE]; R];
        let sw = spp * 4;
        let (wc, ws) = w.group(j, sw);
        for p in 0..w.np {
            prefetch_group(wc, ws, p, cpp, sw);
            let mut wv = [_mm512_setzero_si512(); COL_TILE];
            let mut sv = [_mm512_setzero_ps(); COL_TILE];
            for c in 0..COL_TILE {
                let pc = p * COL_TILE + c;
                wv[c] = codes::<NIB>(wc.add(pc * cpp));
                sv[c] = scales::<PER16>(ws.add(pc * sw));
            }
            for (i, acc_r) in acc.iter_mut().enumerate() {
                let xb = ((r0 + i) * x.np + p) * 16;
                let xc = _mm512_loadu_si512(x.codes.as_ptr().add(xb * 4) as *const __m512i);
                let st = _mm512_loadu_si512(x.start.as_ptr().add(xb) as *const __m512i);
                let xs = _mm512_loadu_ps(x.scale.as_ptr().add(xb));
                for c in 0..COL_TILE {
                    let dot = _mm512_dpbusd_epi32(st, wv[c], xc);
                    let sc = _mm512_mul_ps(sv[c], xs);
                    acc_r[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc_r[c]);
                }
            }
        }
        finish::<R, false>(&acc, w, j, x, r0, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::qpack::testing::{assert_within_rounding, random_gguf, rng};

    /// Each output is within what 8-bit activation rounding can cause,
    /// Σ_i |w_i| · amax(block of i) / 254 (plus f32 slop), and rows are batch-invariant.
    #[test]
    fn packed_matmul_equals_dequantized_within_the_activation_rounding_bound() {
        let mut seed = 11;
        let formats = [
            QFormat::Q8_0,
            QFormat::Q4_0,
            QFormat::Q4_1,
            QFormat::Q5_0,
            QFormat::Q4K,
            QFormat::Q6K,
        ];
        for fmt in formats {
            let be = fmt.gguf_block().1;
            for &(m, kb, n) in &[(1, 3, 300), (5, 2, 97), (3, 1, 5), (9, 1, 41), (4, 6, 8)] {
                let k = kb * be.max(32);
                let bytes = random_gguf(fmt, n, k, &mut seed);
                let half = fmt.f16_params() && m % 2 == 1;
                let w = QPacked::from_gguf_as(fmt, &bytes, n, k, half).unwrap();
                let x: Vec<f32> = (0..m * k)
                    .map(|_| (rng(&mut seed) % 2000) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut y = vec![0f32; m * n];
                qgemv(&x, m, &w, &mut y);
                for r in 0..m {
                    let xr = &x[r * k..(r + 1) * k];
                    let mut alone = vec![0f32; n];
                    qgemv(xr, 1, &w, &mut alone);
                    assert_eq!(alone[..], y[r * n..(r + 1) * n], "{fmt:?}: row {r} varies");
                    for j in 0..n {
                        let what = format!("{fmt:?} m{m} k{k} n{n} [{r},{j}]");
                        assert_within_rounding(xr, &w.dequantize_row(j), y[r * n + j], &what);
                    }
                }
            }
        }
    }

    /// Every SIMD tile this CPU can run, for `w`'s format and scale layout.
    fn simd_kernels(w: &QPacked) -> Vec<(&'static str, TileKernel)> {
        let mut v: Vec<(&'static str, TileKernel)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if avx512::available() {
                v.push(("avx512", tile_kernel(w)));
            }
            if super::super::avx2_fma() {
                v.push(("avx2", avx2_tile(w.fmt, w.half)));
            }
        }
        let _ = w;
        v
    }

    /// Each SIMD tile agrees with the plain Rust one (f32 summation order aside) on every
    /// format, including 8-bit codes at both extremes against activations of ±127 (where an
    /// unguarded u8·i8 pair sum would saturate i16), and gives each row the same bits whatever
    /// the number of rows in the tile.
    #[test]
    fn simd_tiles_agree_with_the_portable_one() {
        let mut seed = 5;
        for fmt in [
            QFormat::Q8_0,
            QFormat::Q4_0,
            QFormat::Q4_1,
            QFormat::Q5_0,
            QFormat::Q4K,
            QFormat::Q6K,
        ] {
            let k = 2 * fmt.gguf_block().1.max(128);
            let (m, n) = (4, 12);
            let mut bytes = random_gguf(fmt, n, k, &mut seed);
            if fmt == QFormat::Q8_0 {
                // column 0 all -128, column 1 all +127
                let row = k / 32 * 34;
                for (c, v) in [(0usize, 0x80u8), (1, 0x7f)] {
                    for blk in bytes[c * row..(c + 1) * row].chunks_exact_mut(34) {
                        blk[2..].fill(v);
                    }
                }
            }
            for half in [false, true] {
                if half && !fmt.f16_params() {
                    continue;
                }
                let w = QPacked::from_gguf_as(fmt, &bytes, n, k, half).unwrap();
                let mut x: Vec<f32> = (0..m * k)
                    .map(|_| (rng(&mut seed) % 200) as f32 / 100.0 - 1.0)
                    .collect();
                // row 0: ±1 everywhere, so its codes are ±127
                for (i, v) in x[..k].iter_mut().enumerate() {
                    *v = if i % 3 == 0 { -1.0 } else { 1.0 };
                }
                let rows = quantize_rows(&x, m, &w);
                for (name, kernel) in simd_kernels(&w) {
                    for j in (0..n).step_by(COL_TILE) {
                        let (mut want, mut got) =
                            ([[0f32; COL_TILE]; ROW_TILE], [[0f32; COL_TILE]; ROW_TILE]);
                        // SAFETY: j < n_pad, rows 0..m exist; the SIMD kernel's features are present.
                        unsafe { portable::tile(&w, j, &rows, 0, m, &mut want) };
                        unsafe { kernel(&w, j, &rows, 0, m, &mut got) };
                        for r in 0..m {
                            for c in 0..COL_TILE.min(n - j) {
                                let (a, b) = (want[r][c], got[r][c]);
                                assert!(
                                // f32 summation order only (1.9e-5 seen on Q6_K)
                                (a - b).abs() <= 5e-5 * (1.0 + a.abs()),
                                "{name} {fmt:?} (f16 scales {half}) [{r},{}]: {b} vs portable {a}",
                                j + c
                            );
                            }
                            let mut one = [[0f32; COL_TILE]; ROW_TILE];
                            // SAFETY: as above, one row.
                            unsafe { kernel(&w, j, &rows, r, 1, &mut one) };
                            assert_eq!(
                                one[0], got[r],
                                "{name} {fmt:?}: row {r} varies with the tile"
                            );
                        }
                    }
                }
            }
        }
    }

    /// f16 and f32 copies of the same scales are the same numbers, so every SIMD tile gives the
    /// same bits from either layout, for every row count.
    #[test]
    fn f16_and_f32_scales_give_the_same_bits() {
        let mut seed = 17;
        for fmt in [QFormat::Q8_0, QFormat::Q4_0, QFormat::Q4_1] {
            let (n, k) = (9, 5 * 32);
            let bytes = random_gguf(fmt, n, k, &mut seed);
            let [w16, w32] =
                [true, false].map(|h| QPacked::from_gguf_as(fmt, &bytes, n, k, h).unwrap());
            assert!(w16.bytes() < w32.bytes());
            let x: Vec<f32> = (0..4 * k)
                .map(|_| (rng(&mut seed) % 2000) as f32 / 1000.0 - 1.0)
                .collect();
            let rows = quantize_rows(&x, 4, &w16);
            let kernels = simd_kernels(&w16).into_iter().zip(simd_kernels(&w32));
            for ((name, k16), (_, k32)) in kernels {
                for m in 1..=4 {
                    for j in (0..n).step_by(COL_TILE) {
                        let mut got = [[[0f32; COL_TILE]; ROW_TILE]; 2];
                        // SAFETY: the CPU has each kernel's features; j < n_pad; rows exist.
                        unsafe { k16(&w16, j, &rows, 0, m, &mut got[0]) };
                        unsafe { k32(&w32, j, &rows, 0, m, &mut got[1]) };
                        assert_eq!(got[0], got[1], "{name} {fmt:?} m{m} j{j}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod timing;
