//! Launch shapes of our CUDA kernels, as pure functions of the weight or row shape (never of
//! how many rows a call carries, which is what keeps a verify row equal to a decode step).
//! Kept outside the `cuda` feature so that CPU CI tests them.

/// bf16 few-row GEMM launch shape for an `[n, k]` weight: (8-column tiles per block, warps,
/// K ranges). Measured on the H200 at Qwen3-8B's shapes (GB/s of weights streamed, 1 row):
/// wide outputs (gate/up 24576, the LM head) 4 tiles x 4 warps (3832 / 4164, were 3364 / 4019
/// with 8 warps); the fused qkv (6144) 2 x 8 (2829); narrow ones (o and down, 4096) had too few
/// blocks to fill the 132 SMs, so K is cut into 4 ranges summed in order by the last block (o
/// 2508, down 3301, were 1988 / 2332).
pub fn gemm_plan(n: usize, k: usize) -> (usize, usize, usize) {
    match (n, k) {
        (n, _) if n >= 16384 => (4, 4, 1),
        (n, _) if n >= 6144 => (2, 8, 1),
        (_, k) if k >= 2048 => (2, 4, 4),
        _ => (1, 8, 1),
    }
}

/// Column tiles a split GEMM launch may have (its arrival counters); wider outputs never split.
pub const SPLIT_TILES_MAX: usize = 16384 / 16;

/// Chunks of 8 values a norm thread keeps in registers (`NORM_CH` in rows.cuh).
pub const NORM_CH: usize = 4;

/// Threads of a norm block for rows of `h`: one chunk of 8 per thread up to 512, whole warps.
pub fn norm_threads(h: usize) -> usize {
    h.div_ceil(8).next_multiple_of(32).clamp(32, 512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_shape_depends_on_the_weight_alone() {
        assert_eq!(gemm_plan(151936, 4096), (4, 4, 1));
        assert_eq!(gemm_plan(24576, 4096), (4, 4, 1));
        assert_eq!(gemm_plan(6144, 4096), (2, 8, 1));
        assert_eq!(gemm_plan(4096, 12288), (2, 4, 4));
        assert_eq!(gemm_plan(4096, 4096), (2, 4, 4));
        assert_eq!(gemm_plan(64, 64), (1, 8, 1));
        // every split launch fits the counters
        for n in (8..65536).step_by(8) {
            for k in [64, 2048, 4096, 12288] {
                let (nt, _, s) = gemm_plan(n, k);
                assert!(
                    s == 1 || n.div_ceil(8 * nt) <= SPLIT_TILES_MAX,
                    "n {n} k {k}"
                );
            }
        }
    }

    #[test]
    fn norm_blocks_hold_their_rows() {
        for h in (8..=16384).step_by(8) {
            let t = norm_threads(h);
            assert!(
                t.is_multiple_of(32) && (32..=512).contains(&t),
                "h {h}: {t} threads"
            );
            // the vector path holds every row of up to 16384 values in registers
            assert!(h <= 8 * NORM_CH * t, "h {h}: {t} threads");
        }
        assert!(16392 > 8 * NORM_CH * norm_threads(16392));
        assert_eq!(norm_threads(4096), 512);
        assert_eq!(norm_threads(128), 32);
    }
}
