//! Ignored timing tests of the decode GEMV (run by hand with `--ignored --nocapture`): one
//! thread on a few shapes, and the demo's whole f32 model with 1, 5 and 9 rows.

mod one_thread {
    use super::super::super::thread_cpu_ns as cpu_ns;

    /// One thread, on-CPU time: `DSPARK_FAN_OUT=never cargo test --release -p dspark-engine
    /// gemv_timing -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn gemv_timing() {
        for (n, k) in [(96, 576), (1536, 576), (49152, 576)] {
            timing_at(n, k);
        }
    }

    fn timing_at(n: usize, k: usize) {
        let w: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32).collect();
        for m in [1usize, 3, 5, 9] {
            let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
            let mut y = vec![0f32; m * n];
            let t = cpu_ns();
            let iters = if n > 10000 { 10 } else { 300 * (1 + 3000 / n) };
            for _ in 0..iters {
                super::super::gemv_f32(&x, m, k, &w, n, &mut y);
            }
            let ns = (cpu_ns() - t) as f64 / iters as f64;
            println!(
                "f32 n={n} m={m}: {:.1} us/call, {:.3} ns/(row*weight)",
                ns / 1e3,
                ns / (m * n * k) as f64
            );
        }
    }
}

mod probe {
    /// The demo's 30 layers of f32 matrices and its head (~540 MB, beyond any cache), called
    /// with 1, 5 and 9 rows as decode and verify do; wall time over both threads:
    /// `cargo test --release -p dspark-engine gemv_model_probe -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn gemv_model_probe() {
        let mk = |n: usize, k: usize| -> (usize, usize, Vec<f32>) {
            (
                n,
                k,
                (0..n * k).map(|i| ((i * 31) % 13) as f32 * 0.1).collect(),
            )
        };
        let mut mats = Vec::new();
        for _ in 0..30 {
            mats.extend([mk(960, 576), mk(576, 576), mk(3072, 576), mk(576, 1536)]);
        }
        mats.push(mk(49152, 576));
        // interleaved rounds; the fastest pass of each row count (the host is shared)
        let counts = [1usize, 5, 9, 13, 17];
        let mut best = [f64::MAX; 5];
        for _ in 0..4 {
            for (b, &m) in best.iter_mut().zip(&counts) {
                let x: Vec<f32> = (0..m * 1536).map(|i| (i % 7) as f32 - 3.0).collect();
                let mut y = vec![0f32; m * 49152];
                for _ in 0..3 {
                    let t = std::time::Instant::now();
                    for (n, k, w) in &mats {
                        super::super::gemv_f32(&x[..m * k], m, *k, w, *n, &mut y[..m * n]);
                    }
                    *b = b.min(t.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (b, m) in best.iter().zip(counts) {
            println!("model m={m}: {b:.2} ms wall (best pass)");
        }
    }
}
