//! Ignored timing tests of the packed quantized GEMV (run by hand with `--ignored
//! --nocapture`): one thread on a few shapes, and the demo's Q4_1 layers in decode order.

use super::*;

use super::super::thread_cpu_ns as cpu_ns;

/// One thread, on-CPU time: `cargo test --release -p dspark-engine qgemv_timing --
/// --ignored --nocapture`
#[test]
#[ignore]
fn qgemv_timing() {
    for (n, k) in [(1536, 576), (49152, 576)] {
        timing_at(n, k);
    }
}

fn timing_at(n: usize, k: usize) {
    let mut seed = 1u64;
    let mut r = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u8
    };
    for fmt in [QFormat::Q8_0, QFormat::Q4_1] {
        let (bb, be) = fmt.gguf_block();
        let mut bytes: Vec<u8> = (0..n * k / be * bb).map(|_| r()).collect();
        for blk in bytes.chunks_exact_mut(bb) {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        let w = QPacked::from_gguf(fmt, &bytes, n, k).unwrap();
        let kernels: [(&str, TileKernel); 2] = [
            ("dispatched", tile_kernel(&w)),
            ("portable", portable::tile),
        ];
        for (name, tile) in kernels {
            for m in [1usize, 2, 4, 8] {
                let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
                let rows = quantize_rows(&x, m, &w);
                let mut out = [[0f32; COL_TILE]; ROW_TILE];
                let iters = if n > 10000 { 20 } else { 300 };
                let t = cpu_ns();
                for _ in 0..iters {
                    for j in (0..n).step_by(COL_TILE) {
                        unsafe { tile(&w, j, &rows, 0, m, &mut out) };
                    }
                }
                let ns = (cpu_ns() - t) as f64 / iters as f64;
                let mut y = vec![0f32; m * n];
                let t = cpu_ns();
                for _ in 0..iters {
                    qgemv(&x, m, &w, &mut y);
                }
                let whole = (cpu_ns() - t) as f64 / iters as f64;
                println!(
                    "  whole qgemv (DSPARK_FAN_OUT=never for one thread): {:.1} us",
                    whole / 1e3
                );
                let blocks = (n * k / 32 * m) as f64;
                println!(
                    "{name} {fmt:?} n={n} k={k} m={m}: {:.1} us/call, {:.2} ns/block/row",
                    ns / 1e3,
                    ns / blocks
                );
            }
        }
    }
}

/// SmolLM2-135M's 30 layers of Q4_1 matrices and its tied Q8_0 head, ~96 MB, beyond the L3,
/// called in decode order with one row: the DRAM-bound case of a real decode step.
/// `DSPARK_FAN_OUT=never cargo test --release -p dspark-engine qgemv_decode_like --
/// --ignored --nocapture` (on-CPU time of the calling thread)
#[test]
#[ignore]
fn qgemv_decode_like() {
    let mkf = |fmt: QFormat, n: usize, k: usize, salt: usize| {
        let (bb, be) = fmt.gguf_block();
        let mut bytes: Vec<u8> = (0..n * k / be * bb)
            .map(|i| ((i + salt) * 7 % 251) as u8)
            .collect();
        for blk in bytes.chunks_exact_mut(bb) {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        QPacked::from_gguf(fmt, &bytes, n, k).unwrap()
    };
    let mk = |n: usize, k: usize, salt: usize| mkf(QFormat::Q4_1, n, k, salt);
    let mut mats = Vec::new();
    for l in 0..30 {
        mats.extend([
            mk(960, 576, l),
            mk(576, 576, l),
            mk(3072, 576, l),
            mk(576, 1536, l),
        ]);
    }
    // the demo GGUF's tied embedding is Q8_0
    mats.push(mkf(QFormat::Q8_0, 49152, 576, 99));
    let bytes: usize = mats.iter().map(|w| w.bytes()).sum();
    let x: Vec<f32> = (0..1536).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut y = vec![0f32; 49152];
    for _ in 0..3 {
        let reps = 20;
        let (t, wall) = (cpu_ns(), std::time::Instant::now());
        for _ in 0..reps {
            for w in &mats {
                qgemv(&x[..w.k], 1, w, &mut y[..w.n]);
            }
        }
        let ms = (cpu_ns() - t) as f64 / 1e6 / reps as f64;
        let wall_ms = wall.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!(
            "decode-like: {ms:.2} ms/token on-CPU of the caller, {wall_ms:.2} ms wall, \
             {:.1} GB/s of {} MB (wall)",
            bytes as f64 / wall_ms / 1e6,
            bytes / 1_000_000
        );
    }
}

/// One row of Q4_1 and Q8_0 (n 1536, k 576, in the L2) through the dispatched tile alone, best
/// of 20 wall-clock passes (steadier than the on-CPU timer's ticks on a shared host):
/// `cargo test --release -p dspark-engine qtile_wall_probe -- --ignored --nocapture`
#[test]
#[ignore]
fn qtile_wall_probe() {
    for fmt in [QFormat::Q4_1, QFormat::Q8_0] {
        let (n, k) = (1536usize, 576usize);
        let (bb, be) = fmt.gguf_block();
        let mut bytes: Vec<u8> = (0..n * k / be * bb).map(|i| (i * 7 % 251) as u8).collect();
        for blk in bytes.chunks_exact_mut(bb) {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        let w = QPacked::from_gguf(fmt, &bytes, n, k).unwrap();
        let tile = tile_kernel(&w);
        let x: Vec<f32> = (0..k).map(|i| (i % 7) as f32 - 3.0).collect();
        let rows = quantize_rows(&x, 1, &w);
        let mut out = [[0f32; COL_TILE]; ROW_TILE];
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            for _ in 0..100 {
                for j in (0..n).step_by(COL_TILE) {
                    // SAFETY: the kernel was chosen for this CPU; j < n_pad, row 0 exists.
                    unsafe { tile(&w, j, &rows, 0, 1, &mut out) };
                }
            }
            best = best.min(t.elapsed().as_secs_f64() / 100.0);
        }
        println!(
            "{fmt:?} one row in cache: {:.3} ns/block",
            best * 1e9 / (n * k / 32) as f64
        );
    }
}
