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
//! On AVX-512 CPUs (with DQ and F16C) `qexact_avx512.rs` rebuilds two columns per 16-lane
//! register (lanes 0-7 column `c`, 8-15 column `c + 1`, as in [`super::gemv`]'s AVX-512 tiles)
//! from one group of 4 interleaved columns, so even one row reads the weights as one sequential
//! stream: in registers for up to 9 rows, into a scratch shared by a block's row tiles past
//! that. AVX2 CPUs, and Q6_K (a scale per 16) on every x86 CPU, take `qexact_avx2.rs`: each
//! group rebuilt into a scratch, then the dense tiles. Elsewhere the loader keeps the dense f32
//! copy.

use super::qpack::{QFormat, QPacked};

#[cfg(target_arch = "x86_64")]
use super::qexact_avx512::{self as avx512, ROWS};

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
    if m == 0 {
        return; // nothing to write (a tile is never run with zero rows)
    }
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

/// [`gemv`]'s work: row blocks, each streaming the task's column groups once in row tiles;
/// with more rows than one tile, each group is rebuilt once per block into a scratch that
/// every tile of the block reads.
#[cfg(target_arch = "x86_64")]
fn run(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    use super::qpack::COL_TILE;
    let k = w.k;
    super::column_tasks(y, w.n, w.n * k * m, |cols| {
        let mut out = [[0f32; COL_TILE]; ROWS];
        let emit = |out: &avx512::Out, r0: usize, nr: usize, j: usize| {
            for (i, row) in out[..nr].iter().enumerate() {
                for (c, v) in row.iter().enumerate() {
                    if j + c < cols.j1 {
                        cols.set(r0 + i, j + c, *v);
                    }
                }
            }
        };
        if m <= ROWS {
            for j in (cols.j0..cols.j1).step_by(COL_TILE) {
                // SAFETY: the CPU has the features (asserted); w has a scale per 32; j is a
                // multiple of COL_TILE below n_pad; rows 0..m of x exist.
                unsafe { avx512::tile(w, j, x.as_ptr(), m, &mut out) };
                emit(&out, 0, m, j);
            }
            return;
        }
        // 64-byte aligned room for one group (with_scratch aligns to 32)
        super::gemv::with_scratch(COL_TILE * k + 8, |buf| {
            let skip = buf.as_ptr() as usize % 64 / 4;
            let g = buf[skip..].as_mut_ptr();
            for b0 in (0..m).step_by(ROW_BLOCK) {
                let b1 = (b0 + ROW_BLOCK).min(m);
                // balanced row tiles (16 rows: 8 + 8; 64 rows: 8 x 8)
                let per = (b1 - b0).div_ceil((b1 - b0).div_ceil(ROWS));
                for j in (cols.j0..cols.j1).step_by(COL_TILE) {
                    // SAFETY: as above; g holds 4 · k floats from a 64-byte boundary.
                    unsafe { avx512::store(w, j, g) };
                    for r0 in (b0..b1).step_by(per) {
                        let nr = (b1 - r0).min(per);
                        // SAFETY: g holds the group just rebuilt; rows r0..r0+nr of x exist.
                        unsafe { avx512::from_scratch(g, k, x[r0 * k..].as_ptr(), nr, &mut out) };
                        emit(&out, r0, nr, j);
                    }
                }
            }
        })
    });
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
                for m in [0, 1, 2, 3, 4, 5, 8, 9, 17, 70] {
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

    /// The demo's shapes packed as the demo holds them (30 layers of Q4_1 matrices and a Q8_0
    /// head, ~100 MB), called with the row counts of decode and verify; wall time over both
    /// threads, the fastest of interleaved passes (the host is shared):
    /// `cargo test --release -p dspark-engine qexact_model_probe -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn qexact_model_probe() {
        if !available() {
            return;
        }
        let mut seed = 11;
        let mut mats = Vec::new();
        for _ in 0..30 {
            for (n, k) in [(960, 576), (576, 576), (3072, 576), (576, 1536)] {
                mats.push(random(QFormat::Q4_1, n, k, true, &mut seed));
            }
        }
        mats.push(random(QFormat::Q8_0, 49152, 576, true, &mut seed));
        let counts = [1usize, 2, 3, 4, 8, 16];
        let mut best = [f64::MAX; 6];
        for _ in 0..12 {
            for (b, &m) in best.iter_mut().zip(&counts) {
                let x: Vec<f32> = (0..m * 1536).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
                let mut y = vec![0f32; m * 49152];
                for _ in 0..3 {
                    let t = std::time::Instant::now();
                    for w in &mats {
                        gemv(&x[..m * w.k], m, w, &mut y[..m * w.n]);
                    }
                    *b = b.min(t.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (b, m) in best.iter().zip(counts) {
            println!(
                "exact packed model m={m}: {b:.2} ms wall (best pass), x{:.2} of m=1",
                b / best[0]
            );
        }
    }
}
