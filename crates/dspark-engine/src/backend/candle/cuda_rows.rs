//! The candle backend's glue to our CUDA row kernels (`backend/cuda/rows.rs`, `rope.rs`,
//! `markov.rs`): RMSNorm alone or after a residual add, per-head norm + rotary, and DSpark's
//! greedy Markov chain, when dtype and layout fit; `None` sends the caller to the ops one by one.

use candle_core::Tensor;

use super::{cuda_dtype, cuda_ops, err, profile, CandleBackend, CandleLinear, CandleRope};
use crate::backend::{BResult, QkvHeads, RopeStyle};

impl CandleBackend {
    /// `rms_norm(x) · w`, or with `r` the stacked `[2, ..]` of `x + r` and its norm.
    pub(super) fn cuda_rms_norm(
        &self,
        x: &Tensor,
        r: Option<&Tensor>,
        w: &Tensor,
        eps: f32,
    ) -> Option<BResult<Tensor>> {
        let dt = x.dtype();
        let rows = |t: &Tensor| cuda_ops::row_levels(t.layout()).is_some();
        let fits = self.cuda_kernels()
            && cuda_dtype(dt)
            && w.dtype() == dt
            && w.rank() == 1
            && w.is_contiguous()
            && rows(x)
            && r.is_none_or(|r| r.dtype() == dt && r.dims() == x.dims() && rows(r));
        if !fits {
            return None;
        }
        Some(
            match r {
                None => x.apply_op2_no_bwd(w, &cuda_ops::RmsNorm { eps }),
                Some(r) => x.apply_op3_no_bwd(r, w, &cuda_ops::AddRmsNorm { eps }),
            }
            .map_err(err),
        )
    }

    /// [`crate::backend::Backend::norm_rope`] in one launch.
    pub(super) fn cuda_norm_rope(
        &self,
        y: &Tensor,
        norm: Option<(&Tensor, f32)>,
        rope: &CandleRope,
        start: usize,
    ) -> Option<BResult<Tensor>> {
        let op = cuda_ops::NormRope {
            norm,
            cos: &rope.cos,
            sin: &rope.sin,
            start,
            interleaved: matches!(rope.style, RopeStyle::Interleaved),
        };
        if !self.cuda_kernels() || !op.fits(y) {
            return None;
        }
        let _p = profile::span("norm_rope");
        Some(y.apply_op1_no_bwd(&op).map_err(err))
    }

    /// [`crate::backend::Backend::qkv_rope_store`] in one launch, when the heads, tables and
    /// caches fit the kernel (`None` otherwise, before anything is written).
    pub(super) fn cuda_qkv_rope_store(
        &self,
        heads: &QkvHeads<'_, Tensor>,
        rope: &CandleRope,
        start: usize,
        [k_cache, v_cache]: [&Tensor; 2],
        at: usize,
    ) -> Option<BResult<Tensor>> {
        let eps = heads.q_norm.or(heads.k_norm).map_or(0.0, |(_, e)| e);
        if heads
            .q_norm
            .zip(heads.k_norm)
            .is_some_and(|((_, a), (_, b))| a != b)
        {
            return None;
        }
        // a captured step reads its position on the device: the cache's row 0 must be position
        // 0 and this op must take the step, since any other path would bake the host's position
        let live = self.live_step();
        let op = cuda_ops::QkvRopeStore {
            q_norm: heads.q_norm.map(|(w, _)| w),
            k_norm: heads.k_norm.map(|(w, _)| w),
            eps,
            cos: &rope.cos,
            sin: &rope.sin,
            start,
            interleaved: matches!(rope.style, RopeStyle::Interleaved),
            k_cache,
            v_cache,
            at,
            queries: heads.q.is_some(),
            step: live.as_ref().map(|l| l.step),
        };
        // without queries the keys stand in for them (the kernel reads nothing of it)
        let q = heads.q.unwrap_or(heads.k);
        let takes = self.cuda_kernels()
            && cuda_ops::qkv_rope_store_enabled()
            && op.fits(q, heads.k, heads.v);
        if live.is_some() && !(takes && at == start) {
            return Some(Err(err(candle_core::Error::Msg(
                "a captured step needs the one-launch attention inputs over a cache from \
                 position 0"
                    .into(),
            ))));
        }
        if !takes {
            return None;
        }
        let _p = profile::span("qkv_rope_store");
        Some(q.apply_op3_no_bwd(heads.k, heads.v, &op).map_err(err))
    }

    /// DSpark's greedy Markov chain as one launch a row (`cuda_ops::MarkovGreedy`), where the
    /// tensors fit it: bf16 `w1` and dense `w2` of an unsplit GEMM shape, f32 or bf16 logits.
    pub(super) fn cuda_markov_greedy(
        &self,
        logits: &Tensor,
        w1: &Tensor,
        w2: &CandleLinear,
        pending: u32,
        n: usize,
    ) -> Option<BResult<Tensor>> {
        use candle_core::DType as CDType;
        let CandleLinear::Dense(w2) = w2 else {
            return None;
        };
        let vocab = *logits.dims().last()?;
        let fits = self.cuda_kernels()
            && cuda_ops::markov_enabled()
            && cuda_dtype(logits.dtype())
            && w1.dtype() == CDType::BF16
            && w2.dtype() == CDType::BF16
            && w1.rank() == 2
            // ids the ops would refuse (past w1's rows) get the ops' own error
            && w1.dims()[0] >= vocab
            && (pending as usize) < w1.dims()[0]
            && w2.dims() == [vocab, *w1.dims().last()?]
            && cuda_ops::markov_fits(vocab, w2.dim(1).ok()?)
            && w1.is_contiguous()
            && w2.is_contiguous()
            && cuda_ops::row_levels(logits.layout()).is_some();
        if !fits {
            return None;
        }
        let _p = profile::span("markov_greedy");
        let op = cuda_ops::MarkovGreedy { pending, n };
        Some(logits.apply_op3_no_bwd(w1, w2, &op).map_err(err))
    }
}
