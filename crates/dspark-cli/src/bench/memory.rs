//! `dspark bench`'s host memory read bandwidth probe, the ceiling a CPU decode step is held to.

use std::time::Instant;

/// Host memory read bandwidth (GB/s): the best of 5 passes for each of 1, 2 and 4 streams per
/// thread, reading a 512 MiB buffer with every core (wrapping u64 sums in 4 lanes, so the loop
/// is bound by memory, not arithmetic). On the 2-core Xeon one stream per core read 19-23 GB/s,
/// two 26 and four 28, and its decode GEMV reads 28 with paired columns: one stream alone
/// understated the ceiling there.
pub(super) fn memory_bandwidth() -> f64 {
    let n: usize = 64 << 20;
    let buf: Vec<u64> = (0..n as u64).collect();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut best = 0.0f64;
    for streams in [1usize, 2, 4] {
        for _ in 0..5 {
            let t = Instant::now();
            let total = std::thread::scope(|s| {
                let chunk = n.div_ceil(threads);
                let hs: Vec<_> = buf
                    .chunks(chunk)
                    .map(|c| {
                        s.spawn(move || match streams {
                            1 => read_streams::<1>(c),
                            2 => read_streams::<2>(c),
                            _ => read_streams::<4>(c),
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or(0))
                    .fold(0u64, u64::wrapping_add)
            });
            std::hint::black_box(total);
            best = best.max((n * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }
    best
}

/// Wrapping sum of `c`, read as `S` equal parts advanced together, 4 words of each at a time
/// (the last `len % (4 · S)` words are left out).
fn read_streams<const S: usize>(c: &[u64]) -> u64 {
    let part = c.len() / S / 4 * 4;
    let mut parts: [_; S] = std::array::from_fn(|p| c[p * part..(p + 1) * part].chunks_exact(4));
    let mut acc = [0u64; 4];
    for _ in 0..part / 4 {
        for it in parts.iter_mut() {
            if let Some(q) = it.next() {
                for k in 0..4 {
                    acc[k] = acc[k].wrapping_add(q[k]);
                }
            }
        }
    }
    acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
}
