//! [`MarkovGreedy`]: DSpark's greedy draft chain on the device (`markov.cuh`), one launch per
//! draft row instead of six (gather of `w1[prev]`, the `[vocab, rank]` GEMM, two casts, add,
//! argmax), with the ids those ops give: the bias is accumulated by the few-row GEMM's own loop
//! with the launch shape `gemm_plan` gives `w2`, and the argmax follows the host's rule.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::LaunchConfig;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, DType, Layout, Result, Shape};
use half::bf16;

use super::gemm::counters;
use super::launch::Launch;
use super::{cpu_only, msg, row_stride, view};
use crate::backend::cuda_shapes::gemm_plan;

/// Whether the fused chain is taken (`DSPARK_CUDA_MARKOV=0`: the ops one by one, for runs side
/// by side; the same ids).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_MARKOV").map_or(true, |v| v != "0"))
}

/// Whether [`MarkovGreedy`] takes a `[vocab, rank]` bias weight: unsplit GEMM shapes only (a
/// split one would need the partial sums' second pass).
pub fn fits(vocab: usize, rank: usize) -> bool {
    vocab > 0 && rank > 0 && gemm_plan(vocab, rank).2 == 1
}

/// Over `(logits [.., n', vocab], w1 [v1, rank], w2 [vocab, rank])`, all on the device, w1 and
/// w2 bf16: the ids `[n]` of the first `n` rows, row i's id the argmax of
/// `f32(logits[i]) + f32(bf16(w2 · w1[prev]))` with `prev` = `pending` for row 0 and row
/// i - 1's id after it.
pub struct MarkovGreedy {
    pub pending: u32,
    pub n: usize,
}

impl CustomOp3 for MarkovGreedy {
    fn name(&self) -> &'static str {
        "dspark-cuda-markov-greedy"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(
        &self,
        ls: &CudaStorage,
        ll: &Layout,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (&vocab, lead) = ll
            .dims()
            .split_last()
            .ok_or_else(|| msg("markov: scalar"))?;
        let rows: usize = lead.iter().product();
        let (d1, d2) = (l1.dims(), l2.dims());
        if d1.len() != 2 || d2.len() != 2 || d1[1] != d2[1] || d2[0] != vocab {
            return Err(msg(format!(
                "markov: logits [.., {vocab}] do not fit w1 {d1:?} and w2 {d2:?}"
            )));
        }
        let rank = d1[1];
        if self.n == 0 || self.n > rows || d1[0] < vocab || self.pending as usize >= d1[0] {
            return Err(msg(format!(
                "markov: {} rows of {rows}, pending {} over {} rows of w1 ({vocab} ids)",
                self.n, self.pending, d1[0]
            )));
        }
        if !l1.is_contiguous() || !l2.is_contiguous() || !fits(vocab, rank) {
            return Err(msg(
                "markov: w1 and w2 must be contiguous, of an unsplit GEMM shape",
            ));
        }
        if s1.dtype() != DType::BF16 || s2.dtype() != DType::BF16 {
            return Err(msg("markov: w1 and w2 must be bf16"));
        }
        let ld = row_stride(ll, "markov")?;
        let dev = ls.device().clone();
        let (nt, warps, _) = gemm_plan(vocab, rank);
        let tiles = vocab.div_ceil(8 * nt);
        let sfx = match ls.dtype() {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            other => return Err(msg(format!("markov: {other:?} logits"))),
        };
        let f = func!(dev, &format!("markov_row_{sfx}_nt{nt}_w{warps}"))?;
        // the GEMM's vector loads need 16-byte rows (the values are the same either way)
        let vec = (rank.is_multiple_of(8)
            && l1.start_offset().is_multiple_of(8)
            && l2.start_offset().is_multiple_of(8)) as i32;
        let w1 = view::<bf16>(s1, l1)?;
        let w2 = view::<bf16>(s2, l2)?;
        // SAFETY: row i's id is written by its last block before any later row reads it; the
        // tile scratch is written by each block before the last one reads it.
        let ids = unsafe { dev.alloc::<u32>(self.n)? };
        let tile_v = unsafe { dev.alloc::<f32>(tiles)? };
        let tile_i = unsafe { dev.alloc::<u32>(tiles)? };
        // zero between launches: each row's last block resets it
        let counter = counters(&dev)?;
        let cfg = LaunchConfig {
            grid_dim: (tiles as u32, 1, 1),
            block_dim: (32 * warps as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (vi, ri) = (vocab as i32, rank as i32);
        let stream = dev.cuda_stream();
        macro_rules! rows {
            ($t:ty) => {{
                let logits = view::<$t>(ls, ll)?;
                for row in 0..self.n as i32 {
                    let mut b = Launch::new(&f, &stream);
                    b.buf(&logits);
                    b.val(&ld);
                    b.buf(&w1);
                    b.buf(&w2);
                    b.buf(&ids);
                    b.buf(&tile_v);
                    b.buf(&tile_i);
                    b.buf(&*counter);
                    b.val(&row);
                    b.val(&self.pending);
                    b.val(&vi);
                    b.val(&ri);
                    b.val(&vec);
                    // SAFETY: the arguments match markov_row's signature in markov.cuh and
                    // every buffer outlives the launch in stream order (one stream).
                    unsafe { b.run(cfg) }?;
                }
            }};
        }
        match ls.dtype() {
            DType::BF16 => rows!(bf16),
            _ => rows!(f32),
        }
        Ok((
            CudaStorage::wrap_cuda_slice(ids, dev),
            Shape::from(vec![self.n]),
        ))
    }
}
