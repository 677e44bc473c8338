//! Rotary embeddings on the candle backend: the cos/sin tables and the rotation (our CPU kernel
//! for f32 on the CPU, candle's kernels elsewhere; CUDA's fused norm + rope is in `cuda_rows.rs`).

use candle_core::{DType as CDType, Tensor};

use super::{cdtype, cpu_ops, err, profile, CandleBackend};
use crate::backend::{BResult, DType, RopeSpec, RopeStyle};

/// A rotary table set on this backend.
pub struct CandleRope {
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    /// The f32 tables on the host, for our CPU kernel.
    pub(super) host: Option<(Vec<f32>, Vec<f32>)>,
    pub(super) style: RopeStyle,
    pub(super) max: usize,
}

impl CandleBackend {
    /// Cos/sin tables for positions `0..max_positions` (compute dtype; f32 host copies for
    /// our CPU kernel).
    pub(super) fn rope_tables(&self, spec: &RopeSpec, max_positions: usize) -> BResult<CandleRope> {
        let half = spec.inv_freq.len();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for &f in &spec.inv_freq {
                let a = p as f64 * f as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let mk = |v: Vec<f32>| {
            Tensor::from_vec(v, (max_positions, half), &self.device)
                .and_then(|t| t.to_dtype(cdtype(self.dtype)))
                .map_err(err)
        };
        let host = (self.device.is_cpu() && self.dtype == DType::F32 && self.cpu_kernels())
            .then(|| (cos.clone(), sin.clone()));
        Ok(CandleRope {
            cos: mk(cos)?,
            sin: mk(sin)?,
            host,
            style: spec.style,
            max: max_positions,
        })
    }

    /// Rotates `x[b, h, L, d]` for positions `start..`.
    pub(super) fn rotate(&self, x: &Tensor, rope: &CandleRope, start: usize) -> BResult<Tensor> {
        let _p = profile::span("rope");
        let l = x.dim(2).map_err(err)?;
        if start + l > rope.max {
            return Err(err(candle_core::Error::Msg(format!(
                "position {} is past the RoPE table of {} positions",
                start + l,
                rope.max
            ))));
        }
        if let (Some((cos, sin)), CDType::F32) = (&rope.host, x.dtype()) {
            if x.rank() == 4 && x.stride().last() == Some(&1) {
                let op = cpu_ops::Rope {
                    cos,
                    sin,
                    start,
                    style: rope.style,
                };
                return x.apply_op1_no_bwd(&op).map_err(err);
            }
        }
        let cos = rope.cos.narrow(0, start, l).map_err(err)?;
        let sin = rope.sin.narrow(0, start, l).map_err(err)?;
        let x = x.contiguous().map_err(err)?;
        match rope.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope(&x, &cos, &sin),
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin),
        }
        .map_err(err)
    }
}
