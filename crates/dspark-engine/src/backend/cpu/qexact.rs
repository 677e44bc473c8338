//! Exact f32 matmul from GGUF blocks held packed (Q8_0, Q4_0, Q4_1, Q4_K in [`QPacked`]'s layout):
//! the model a user loads dequantized, at the memory traffic of its quantized file.
//!
//! Each weight is rebuilt in registers as the f32 value the loader's dequantization gives it:
//! `d · q` (Q8_0, Q4_0 with `q` the signed code), or `d · q + m` (Q4_1; Q4_K with `d` an f16
//! scale times a 6-bit sub-scale and `m` minus the f16 `dmin` times a 6-bit min). The product
//! of the scale (at most 17 significant bits) and a code of at most 8 bits (4 for Q4_K) is exact
//! in f32, so the one rounding is that of `+ m`, and a fused multiply-add rounds the same. Every output then runs
//! [`super::gemv`]'s arithmetic on those weights: one 8-lane accumulator over `k` in steps of
//! 8, the same fixed-order horizontal sum (`k` is a multiple of 32, so no scalar tail). A row
//! therefore has the bits of the dense f32 GEMV on the dequantized copy, for any row count.
//!
//! Two columns share a 16-lane register (lanes 0-7 column `c`, 8-15 column `c + 1`), as in
//! [`super::gemv::avx512_rows`]; a tile is up to [`ROWS`] rows × one group of 4 interleaved
//! columns, so even one row reads the weights as one sequential stream. That form needs
//! AVX-512 (with DQ and F16C). AVX2 CPUs, and Q6_K (a scale per 16) on every x86 CPU, take
//! `qexact_avx2.rs`: each group rebuilt into a scratch, then the dense tiles. Elsewhere the
//! loader keeps the dense f32 copy.

use super::qpack::{QFormat, QPacked};

/// Rows per tile (2 accumulators each).
#[cfg(target_arch = "x86_64")]
const ROWS: usize = 8;
/// Rows per block of a prefill chunk (their activations stay in the L2 while the block streams
/// the task's columns once).
#[cfg(target_arch = "x86_64")]
const ROW_BLOCK: usize = 64;

/// Whether this CPU runs the exact packed matmul (AVX-512, or AVX2's scratch form).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        wide() || super::qexact_avx2::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this CPU runs the AVX-512 form.
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    super::gemv_avx512_allowed()
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512dq")
        && std::is_x86_feature_detected!("f16c")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("avx2")
}

/// Whether `fmt` has an exact packed form: every weight `s · q` or `s · q + m` with `s · q`
/// exact in f32 (Q8_0, Q4_0, Q4_1, Q5_0: an f16 scale; Q4_K: an f16 scale times a 6-bit sub-scale,
/// times a 4-bit code, 21 bits; Q6_K: an f16 scale times an 8-bit sub-scale, times a 6-bit
/// code less 32, 23 bits). Every format [`QPacked`] holds has one.
pub fn supports(fmt: QFormat) -> bool {
    matches!(
        fmt,
        QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q5_0 | QFormat::Q4K | QFormat::Q6K
    )
}

/// The packed form in which the exact kernel holds a GGUF tensor of type `d`, if any: Q8_0,
/// Q4_0, Q4_1, Q5_0, Q4_K and Q6_K (Q5_0 only here: kept quantized, it stays in candle's
/// form). The loader and the memory check both ask here.
pub fn exact_format(d: candle_core::quantized::GgmlDType) -> Option<QFormat> {
    use candle_core::quantized::GgmlDType as G;
    let f = match d {
        G::Q8_0 => QFormat::Q8_0,
        G::Q4_0 => QFormat::Q4_0,
        G::Q4_1 => QFormat::Q4_1,
        G::Q5_0 => QFormat::Q5_0,
        G::Q4K => QFormat::Q4K,
        G::Q6K => QFormat::Q6K,
        _ => return None,
    };
    supports(f).then_some(f)
}

/// `y[m · n]` = `x[m · k]` times the dequantized `w`ᵀ, with the bits of
/// [`super::gemv::gemv_f32`] on `w`'s dequantized rows. Panics on inconsistent lengths, a
/// format without an exact form, or a CPU without [`available`] (callers check).
pub fn gemv(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    assert_eq!(x.len(), m * w.k, "qexact: x is not m*k");
    assert_eq!(y.len(), m * w.n, "qexact: y is not m*n");
    assert!(supports(w.fmt), "qexact: {:?} has no exact form", w.fmt);
    assert!(available(), "qexact: CPU lacks AVX2");
    #[cfg(target_arch = "x86_64")]
    if wide() && !w.fmt.per16() && !scratch_form() {
        run(x, m, w, y)
    } else {
        super::qexact_avx2::run(x, m, w, y)
    }
}

/// The f32 weights `[n, k]` that the loader's dequantization gives (rebuilt by the AVX2 form
/// where the CPU has it): the dense GEMM's operand for prefill chunks on CPUs whose tiles do
/// not take them (see [`super::gemv::takes_rows`]), so that those rows keep the dense copy's
/// bits too.
pub fn dequantize(w: &QPacked) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if super::qexact_avx2::available() {
        return super::qexact_avx2::dequantize(w);
    }
    (0..w.n).flat_map(|j| w.dequantize_row(j)).collect()
}

/// `DSPARK_EXACT_FORM=avx2`: the scratch form on AVX-512 CPUs too (tests and probes compare
/// the two; read once).
#[cfg(target_arch = "x86_64")]
fn scratch_form() -> bool {
    static SCRATCH: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("DSPARK_EXACT_FORM").is_ok_and(|v| v == "avx2"));
    *SCRATCH
}

/// [`gemv`]'s work: row blocks, each streaming the task's column groups once in row tiles.
#[cfg(target_arch = "x86_64")]
fn run(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    use super::qpack::COL_TILE;
    super::column_tasks(y, w.n, w.n * w.k * m, |cols| {
        let mut out = [[0f32; COL_TILE]; ROWS];
        for b0 in (0..m).step_by(ROW_BLOCK) {
            let b1 = (b0 + ROW_BLOCK).min(m);
            // balanced row tiles (9 rows: 5 + 4)
            let per = (b1 - b0).div_ceil((b1 - b0).div_ceil(ROWS));
            for j in (cols.j0..cols.j1).step_by(COL_TILE) {
                for r0 in (b0..b1).step_by(per) {
                    let nr = (b1 - r0).min(per);
                    // SAFETY: the CPU has the features (asserted); j is a multiple of
                    // COL_TILE below n_pad; rows r0..r0+nr of x exist.
                    unsafe { avx512::tile(w, j, x[r0 * w.k..].as_ptr(), nr, &mut out) };
                    for (i, row) in out[..nr].iter().enumerate() {
                        for (c, v) in row.iter().enumerate() {
                            if j + c < cols.j1 {
                                cols.set(r0 + i, j + c, *v);
                            }
                        }
                    }
                }
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::qpack::{prefetch_group, COL_TILE};
    use super::{QFormat, QPacked, ROWS};

    /// Rows `0..nr` of `x` (row stride `w.k`) against the interleaved columns `j..j+4`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C present; `j` a multiple of 4 below `w.n_pad`;
    /// `nr` (1..=ROWS) rows of `w.k` floats readable at `x`.
    pub unsafe fn tile(
        w: &QPacked,
        j: usize,
        x: *const f32,
        nr: usize,
        out: &mut [[f32; COL_TILE]; ROWS],
    ) {
        macro_rules! by_rows {
            ($nib:literal, $min:literal, $h:literal) => {
                match nr {
                    1 => rows::<1, $nib, $min, $h>(w, j, x, out),
                    2 => rows::<2, $nib, $min, $h>(w, j, x, out),
                    3 => rows::<3, $nib, $min, $h>(w, j, x, out),
                    4 => rows::<4, $nib, $min, $h>(w, j, x, out),
                    5 => rows::<5, $nib, $min, $h>(w, j, x, out),
                    6 => rows::<6, $nib, $min, $h>(w, j, x, out),
                    7 => rows::<7, $nib, $min, $h>(w, j, x, out),
                    _ => rows::<8, $nib, $min, $h>(w, j, x, out),
                }
            };
        }
        match (w.fmt, w.half) {
            (QFormat::Q4_1, true) => by_rows!(true, true, true),
            (QFormat::Q4_1 | QFormat::Q4K, false) => by_rows!(true, true, false),
            (QFormat::Q4_0, true) => by_rows!(true, false, true),
            (QFormat::Q4_0, false) => by_rows!(true, false, false),
            (_, true) => by_rows!(false, false, true),
            (_, false) => by_rows!(false, false, false),
        }
    }

    /// `R` rows; `NIB`: 4-bit codes (else bytes); `MIN`: a min per block (Q4_1, Q4_K; codes
    /// then carry no zero point); `H`: scales and mins stored as f16 (else f32).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn rows<const R: usize, const NIB: bool, const MIN: bool, const H: bool>(
        w: &QPacked,
        j: usize,
        x: *const f32,
        out: &mut [[f32; COL_TILE]; ROWS],
    ) {
        let (k, cpp) = (w.k, w.codes_per_pair());
        let blocks = k / 32;
        // bytes of one pair's two scales, and of one min
        let (sw, mw) = if H { (4, 2) } else { (8, 4) };
        let (wc, ws) = w.group(j, sw);
        let mins = w.mins.as_ptr();
        let low = _mm512_set1_epi32(15);
        let zp = _mm512_set1_epi32(w.fmt.zero_point());
        // lanes 0-7 take entry 0 (column c's), 8-15 entry 2 (column c+1's) of [A_c, B_c,
        // A_c+1, B_c+1]; `ib` the B entries
        let ia = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        let ib = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for p in 0..w.np {
            prefetch_group(wc, ws, p, cpp, sw);
            // per column pair (c, c + 1) = (0, 1), (2, 3): [d_A, d_B] and [m_A, m_B], each
            // [column c x8 | column c + 1 x8]
            let mut d = [[_mm512_setzero_ps(); 2]; 2];
            let mut m = [[_mm512_setzero_ps(); 2]; 2];
            for (h, c0) in [0, 2].into_iter().enumerate() {
                let at = ws.add((p * COL_TILE + c0) * sw);
                let sc = if H {
                    _mm_cvtph_ps(_mm_loadl_epi64(at as *const __m128i))
                } else {
                    _mm_loadu_ps(at as *const f32)
                };
                let sc = _mm512_castps128_ps512(sc);
                d[h] = [_mm512_permutexvar_ps(ia, sc), _mm512_permutexvar_ps(ib, sc)];
                if MIN {
                    // [m_A, m_B] of column c0, then of c0 + 1
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
                    let mm = _mm512_castps128_ps512(mm);
                    m[h] = [_mm512_permutexvar_ps(ia, mm), _mm512_permutexvar_ps(ib, mm)];
                }
            }
            let pc = wc.add(p * COL_TILE * cpp);
            for blk in 0..2 {
                if 2 * p + blk >= blocks {
                    break; // the padding block of an odd count
                }
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
                            if MIN {
                                _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d[h][blk], m[h][blk])
                            } else {
                                let q = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, zp));
                                _mm512_mul_ps(q, d[h][blk])
                            }
                        });
                        let o = 64 * p + 32 * blk + 16 * part + 8 * t;
                        for (r, acc_r) in acc.iter_mut().enumerate() {
                            let xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x.add(r * k + o)));
                            acc_r[0] = _mm512_fmadd_ps(xv, wv[0], acc_r[0]);
                            acc_r[1] = _mm512_fmadd_ps(xv, wv[1], acc_r[1]);
                        }
                    }
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (half, a) in acc_r.iter().enumerate() {
                out[r][2 * half] = super::super::gemv::hsum8(_mm512_castps512_ps256(*a));
                out[r][2 * half + 1] = super::super::gemv::hsum8(_mm512_extractf32x8_ps(*a, 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Random GGUF blocks with varied, valid f16 scales (and mins: Q4_1's min, Q4_K's dmin),
    /// some negative; held with f16 (`half`) or f32 scales.
    fn random(fmt: QFormat, n: usize, k: usize, half: bool, seed: &mut u64) -> QPacked {
        let (bb, be) = fmt.gguf_block();
        let mut bytes: Vec<u8> = (0..n * k / be * bb).map(|_| rng(seed) as u8).collect();
        let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
        for blk in bytes.chunks_exact_mut(bb) {
            let d = (rng(seed) % 2000) as f32 * 1e-5 - 0.004;
            if fmt == QFormat::Q6K {
                // codes and i8 sub-scales are any bytes; the f16 super-scale comes last
                blk[208..210].copy_from_slice(&f16(d));
                continue;
            }
            blk[0..2].copy_from_slice(&f16(d));
            if matches!(fmt, QFormat::Q4_1 | QFormat::Q4K) {
                blk[2..4].copy_from_slice(&f16((rng(seed) % 1000) as f32 * 1e-4 - 0.05));
            }
        }
        QPacked::from_gguf_as(fmt, &bytes, n, k, half).unwrap()
    }

    /// Every output has the bits of the dense f32 GEMV on the dequantized rows, for row counts
    /// that cover one row, the tile sizes, a prefill block and more, and odd column counts and
    /// block counts; in both forms (AVX-512 where the CPU has it, and AVX2's scratch form).
    #[test]
    fn exact_packed_gives_the_dequantized_gemv_bits() {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX2 (the loader keeps dense weights there)");
            return;
        }
        let mut seed = 5;
        let cases = [
            (QFormat::Q8_0, true),
            (QFormat::Q4_0, true),
            (QFormat::Q4_1, true),
            (QFormat::Q5_0, true),
            (QFormat::Q5_0, false),
            (QFormat::Q8_0, false),
            (QFormat::Q4_1, false),
            (QFormat::Q4K, false),
            (QFormat::Q6K, false),
        ];
        for (fmt, half) in cases {
            let shapes: &[(usize, usize)] = if matches!(fmt, QFormat::Q4K | QFormat::Q6K) {
                &[(37, 256), (13, 768), (40, 1536)]
            } else {
                &[(37, 96), (64, 576), (13, 32), (40, 1536)]
            };
            for &(n, k) in shapes {
                let w = random(fmt, n, k, half, &mut seed);
                let dense: Vec<f32> = (0..n).flat_map(|j| w.dequantize_row(j)).collect();
                for m in [1, 2, 3, 5, 8, 9, 17, 70] {
                    let x: Vec<f32> = (0..m * k)
                        .map(|_| (rng(&mut seed) % 20001) as f32 * 1e-4 - 1.0)
                        .collect();
                    let mut want = vec![0f32; m * n];
                    super::super::gemv::gemv_f32(&x, m, k, &dense, n, &mut want);
                    let mut got = vec![0f32; m * n];
                    gemv(&x, m, &w, &mut got);
                    let mut scratch = vec![0f32; m * n];
                    #[cfg(target_arch = "x86_64")]
                    super::super::qexact_avx2::run(&x, m, &w, &mut scratch);
                    #[cfg(not(target_arch = "x86_64"))]
                    scratch.copy_from_slice(&got);
                    for (form, got) in [("dispatched", &got), ("avx2", &scratch)] {
                        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{form} {fmt:?} (f16: {half}) {n}x{k}, {m} rows, [{}, {}]: {g} vs {e}",
                                i / n,
                                i % n
                            );
                        }
                    }
                }
            }
        }
    }
}
