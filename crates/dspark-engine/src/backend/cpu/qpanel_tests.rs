//! Tests of [`super`]: the panel layout, the activation quantizer, and both kernels against a
//! plain-Rust reference of their arithmetic (bit for bit), plus an ignored timing probe.

use super::*;

use super::super::qpack::testing::{assert_within_rounding, random_gguf, rng};

const FORMATS: [QFormat; 4] = [QFormat::Q8_0, QFormat::Q4_0, QFormat::Q4_1, QFormat::Q4K];

/// `k` of `blocks` 32-element blocks, rounded up to whole GGUF blocks of `fmt` (Q4_K's
/// hold 256 elements).
fn k_for(fmt: QFormat, blocks: usize) -> usize {
    (blocks * QK).next_multiple_of(fmt.gguf_block().1)
}

/// The SIMD quantizer gives the plain one's codes, scale and sum, ties and zero blocks
/// included.
#[test]
fn activation_blocks_quantize_alike() {
    let mut seed = 9;
    let mut blocks: Vec<Vec<f32>> = vec![vec![0.0; QK], (0..QK).map(|i| i as f32 - 15.5).collect()];
    // values on the half-way points between codes: 127 / 254 · (2j + 1)
    blocks.push(
        (0..QK)
            .map(|i| {
                if i == 0 {
                    1.0
                } else {
                    (2 * (i % 20) + 1) as f32 / 254.0
                }
            })
            .collect(),
    );
    for _ in 0..200 {
        blocks.push(
            (0..QK)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                .collect(),
        );
    }
    for blk in &blocks {
        let (mut a, mut b) = ([0i8; QK], [0i8; QK]);
        let plain = quantize_block(blk, &mut a);
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512bw") {
            // SAFETY: checked just above.
            let simd = unsafe { quantize_block_avx512(blk, &mut b) };
            assert_eq!((plain, a), (simd, b), "{blk:?}");
        }
    }
}

/// The layout holds exactly the weights GGUF defines (the pair layout's rows, which a qpack
/// test pins to candle's dequantization), padding columns and odd block counts included.
#[test]
fn panel_layout_dequantizes_as_gguf_defines() {
    let mut seed = 3;
    for fmt in FORMATS {
        for (n, kb) in [(5, 1), (16, 3), (37, 2), (33, 10), (17, 24)] {
            let k = k_for(fmt, kb);
            let bytes = random_gguf(fmt, n, k, &mut seed);
            let a = pack(fmt, &bytes, n, k).unwrap();
            let p = QPacked::from_gguf(fmt, &bytes, n, k).unwrap();
            for j in 0..n {
                assert_eq!(
                    a.dequantize_row(j),
                    p.dequantize_row(j),
                    "{fmt:?} {n}x{k} row {j}"
                );
            }
        }
    }
    assert!(pack(QFormat::Q8_0, &[0; 33], 1, 32).is_err());
    assert!(pack(QFormat::Q4_1, &[0; 20], 1, 48).is_err());
}

/// The arithmetic the tiles are meant to run, in plain Rust: per row and column, block
/// after block, `fma(f32(dot − zp·Σx), d·dx, acc)`, then `fma(min, dx·Σx, acc)`.
fn reference(x: &[f32], m: usize, w: &QPacked) -> Vec<f32> {
    let (k, nb) = (w.k, w.k / QK);
    let q = quantize(x, m, k);
    let zp = if w.fmt == QFormat::Q4_0 { 8 } else { 0 };
    let mut y = vec![0f32; m * w.n];
    for j in 0..w.n {
        for r in 0..m {
            let mut acc = 0f32;
            for b in 0..nb {
                let (_, d, min) = code(w, j, b, 0);
                let dot: i32 = (0..QK)
                    .map(|e| code(w, j, b, e).0 * q.codes[r * k + b * QK + e] as i32)
                    .sum();
                let x = r * nb + b;
                acc = ((dot - zp * q.sum[x]) as f32).mul_add(d * q.dx[x], acc);
                if w.fmt.has_min() {
                    acc = min.mul_add(q.dsum[x], acc);
                }
            }
            y[r * w.n + j] = acc;
        }
    }
    y
}

/// On a CPU with AVX-512 VNNI: the kernels give the reference's bits for every format
/// and shape (rows 1 to 19, across the 8-row passes; n not a multiple of 16; odd block
/// counts), the VNNI kernel and (with AMX) the tiles alike at every row count, each row of
/// a many-row call has the bits of that row alone, and the result is within the 8-bit
/// activation rounding bound of the dequantized matmul. Elsewhere it says so and checks
/// nothing.
#[test]
fn panel_kernels_run_the_reference_arithmetic_and_are_batch_invariant() {
    if !available() {
        eprintln!("no AVX-512 VNNI on this CPU (or DSPARK_QPANELS=0): nothing to check");
        return;
    }
    if !amx_available() {
        eprintln!("no AMX-INT8 tiles here (or DSPARK_AMX=0): the VNNI kernel alone");
    }
    let mut seed = 19;
    for fmt in FORMATS {
        for &(m, kb, n) in &[
            (1, 2, 300),
            (3, 3, 37),
            (8, 18, 48),
            (9, 1, 16),
            (19, 48, 40),
        ] {
            let k = k_for(fmt, kb);
            let bytes = random_gguf(fmt, n, k, &mut seed);
            let w = pack(fmt, &bytes, n, k).unwrap();
            let x: Vec<f32> = (0..m * k)
                .map(|_| (rng(&mut seed) % 2000) as f32 / 1000.0 - 1.0)
                .collect();
            let mut y = vec![0f32; m * n];
            gemv(&x, m, &w, &mut y);
            let want = reference(&x, m, &w);
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{fmt:?} m{m} k{k} n{n} at {i}: {a} vs {b}"
                );
            }
            // each kernel alone, at any row count, has the same bits
            for amx in [false, true].into_iter().filter(|a| !a || amx_available()) {
                let mut y2 = vec![0f32; m * n];
                gemv_by(&x, m, &w, &mut y2, amx);
                assert_eq!(
                    y2,
                    y,
                    "{fmt:?} m{m}: the {} kernel differs",
                    if amx { "AMX" } else { "VNNI" }
                );
            }
            for r in 0..m {
                let xr = &x[r * k..(r + 1) * k];
                let mut alone = vec![0f32; n];
                gemv(xr, 1, &w, &mut alone);
                assert_eq!(alone[..], y[r * n..(r + 1) * n], "{fmt:?}: row {r} varies");
                for j in 0..n {
                    let what = format!("{fmt:?} m{m} k{k} n{n} [{r},{j}]");
                    assert_within_rounding(xr, &w.dequantize_row(j), y[r * n + j], &what);
                }
            }
        }
    }
}

mod timing {
    use super::*;

    /// `cargo test --release -p dspark-engine qpanel_timing -- --ignored --nocapture`: the demo's
    /// shapes: each panel kernel alone on one thread, then whole calls against the pair layout.
    #[test]
    #[ignore]
    fn qpanel_timing() {
        assert!(amx_available(), "no AMX here");
        let mut seed = 5u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        };
        for (fmt, n, k) in [
            (QFormat::Q4_1, 3072, 576),
            (QFormat::Q4_1, 576, 1536),
            (QFormat::Q8_0, 49152, 576),
        ] {
            let (bb, be) = fmt.gguf_block();
            let mut bytes: Vec<u8> = (0..n * k / be * bb).map(|_| rnd()).collect();
            for blk in bytes.chunks_exact_mut(bb) {
                blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
                if fmt == QFormat::Q4_1 {
                    blk[2..4].copy_from_slice(&half::f16::from_f32(-0.02).to_le_bytes());
                }
            }
            let a = pack(fmt, &bytes, n, k).unwrap();
            let p = QPacked::from_gguf(fmt, &bytes, n, k).unwrap();
            // one thread, the kernels alone (no quantization, no fan-out)
            for m in [1usize, 2, 4, 8, 16] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
                    .collect();
                let q = quantize(&x, m, k);
                let mut y = vec![0f32; m * n];
                for amx in [false, true] {
                    let cols = crate::backend::cpu::Columns {
                        ptr: y.as_mut_ptr(),
                        rows: m,
                        n,
                        j0: 0,
                        j1: n,
                    };
                    let mut ns = f64::MAX;
                    for _ in 0..7 {
                        let t = std::time::Instant::now();
                        for _ in 0..20 {
                            unsafe {
                                if amx {
                                    crate::backend::cpu::qpanel_amx::task(&a, &q, m, &cols)
                                } else {
                                    crate::backend::cpu::qpanel_vnni::task(&a, &q, m, &cols)
                                }
                            }
                        }
                        ns = ns.min(t.elapsed().as_secs_f64() * 1e9 / 20.0);
                    }
                    let pbs = (n / PANEL * k / QK) as f64;
                    println!(
                        "  1 thread {fmt:?} {n}x{k} m={m} {}: {:.1} ns per panel-block",
                        if amx { "amx" } else { "vnni" },
                        ns / pbs
                    );
                }
            }
            for m in [1usize, 4, 8] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
                    .collect();
                let mut y = vec![0f32; m * n];
                for name in ["amx", "panel-vnni", "pairs-vnni"] {
                    let w = if name == "pairs-vnni" { &p } else { &a };
                    let reps = 50;
                    let mut us = f64::MAX;
                    for _ in 0..7 {
                        let t = std::time::Instant::now();
                        for _ in 0..reps {
                            if name == "pairs-vnni" {
                                crate::backend::cpu::qgemv::qgemv(&x, m, w, &mut y);
                            } else {
                                gemv_by(&x, m, w, &mut y, name == "amx");
                            }
                        }
                        us = us.min(t.elapsed().as_secs_f64() * 1e6 / reps as f64);
                    }
                    let gbs = w.bytes() as f64 / us / 1e3;
                    println!("{fmt:?} {n}x{k} m={m} {name}: {us:.1} us ({gbs:.1} GB/s)");
                }
            }
        }
    }
}
