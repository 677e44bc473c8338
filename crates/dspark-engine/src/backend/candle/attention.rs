//! Attention on the candle backend: our CPU kernel (f32) and CUDA kernels read the KV cache in
//! place; otherwise grouped heads through candle's matmul and softmax, with a cached mask.

use candle_core::{DType as CDType, Tensor};

use super::{cpu_ops, err, profile, CandleBackend};
#[cfg(feature = "cuda")]
use super::{cuda_dtype, cuda_ops};
use crate::backend::{AttnMask, BResult};

impl CandleBackend {
    /// Scaled dot-product attention (our kernels where they apply, else candle's ops with a
    /// mask tensor).
    pub(super) fn sdpa(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: AttnMask,
        scale: f32,
    ) -> BResult<Tensor> {
        let _p = profile::span("attention");
        let (b, hq, lq, d) = q.dims4().map_err(err)?;
        let (_, hkv, lk, _) = k.dims4().map_err(err)?;
        if hkv == 0 || hq % hkv != 0 {
            return Err(err(candle_core::Error::Msg(format!(
                "{hq} query heads vs {hkv} kv heads"
            ))));
        }
        if self.cpu_kernels() && [q, k, v].iter().all(|t| t.dtype() == CDType::F32) {
            // reads the cache views in place; only a non-unit inner stride forces a copy
            let inner = |t: &Tensor| -> BResult<Tensor> {
                if t.stride().last() == Some(&1) {
                    Ok(t.clone())
                } else {
                    t.contiguous().map_err(err)
                }
            };
            let (q, k, v) = (inner(q)?, inner(k)?, inner(v)?);
            return q
                .apply_op3_no_bwd(&k, &v, &cpu_ops::Attention { mask, scale })
                .map_err(err);
        }
        #[cfg(feature = "cuda")]
        let live = self.live_step();
        #[cfg(feature = "cuda")]
        if self.cuda_kernels()
            && d % 16 == 0
            && d <= 256
            && [q, k, v].iter().all(|t| cuda_dtype(t.dtype()))
        {
            let q = if q.stride().last() == Some(&1) {
                q.clone()
            } else {
                q.contiguous().map_err(err)?
            };
            // [b, lq, hq, d] from the kernel; the layer's transpose back is then free
            return q
                .apply_op3_no_bwd(
                    k,
                    v,
                    &cuda_ops::CacheAttention {
                        mask,
                        scale,
                        step: live.map(|l| l.step),
                    },
                )
                .and_then(|o| o.transpose(1, 2))
                .map_err(err);
        }
        #[cfg(feature = "cuda")]
        if live.is_some() {
            return Err(err(candle_core::Error::Msg(
                "a captured step needs our attention kernel".into(),
            )));
        }
        let rep = hq / hkv;
        // group query heads onto their kv head: [b, hkv, rep*lq, d]
        let qg = q
            .contiguous()
            .and_then(|q| q.reshape((b, hkv, rep * lq, d)))
            .map_err(err)?;
        let k = k.contiguous().map_err(err)?;
        let v = v.contiguous().map_err(err)?;
        let mut scores = qg
            .matmul(&k.t().map_err(err)?)
            .and_then(|s| s.to_dtype(CDType::F32))
            .and_then(|s| s * scale as f64)
            .map_err(err)?;
        if let Some(m) = self.mask_tensor(mask, lq, lk, rep)? {
            scores = scores.broadcast_add(&m).map_err(err)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)
            .and_then(|p| p.to_dtype(v.dtype()))
            .map_err(err)?;
        probs
            .matmul(&v)
            .and_then(|o| o.reshape((b, hq, lq, d)))
            .map_err(err)
    }

    fn mask_tensor(
        &self,
        mask: AttnMask,
        lq: usize,
        lk: usize,
        rep: usize,
    ) -> BResult<Option<Tensor>> {
        let allowed = |i: usize, j: usize| -> bool {
            match mask {
                AttnMask::None => true,
                AttnMask::Causal { offset } => j <= offset + i,
                AttnMask::SlidingCausal { offset, window } => {
                    let p = offset + i;
                    j <= p && j + window > p
                }
            }
        };
        if (0..lq).all(|i| (0..lk).all(|j| allowed(i, j))) {
            return Ok(None);
        }
        let key = (mask, lq, lk, rep);
        let mut last = self.last_mask.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, t)) = last.as_ref() {
            if *k == key {
                return Ok(Some(t.clone()));
            }
        }
        let mut m = Vec::with_capacity(rep * lq * lk);
        for _ in 0..rep {
            for i in 0..lq {
                for j in 0..lk {
                    m.push(if allowed(i, j) {
                        0f32
                    } else {
                        f32::NEG_INFINITY
                    });
                }
            }
        }
        let t = Tensor::from_vec(m, (rep * lq, lk), &self.device).map_err(err)?;
        *last = Some((key, t.clone()));
        Ok(Some(t))
    }
}
