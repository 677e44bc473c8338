//! One Llama/Qwen-style decoder layer (pre-norm attention + SwiGLU MLP), shared by the target
//! models and the DFlash/DSpark drafters, which differ only in where keys and values come from.

use crate::backend::{AttnMask, BResult, Backend};
use crate::weights::{LoadError, WeightSource};

/// Geometry of the attention and MLP of one layer.
#[derive(Clone, Copy, Debug)]
pub struct LayerShape {
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub qk_norm: bool,
    pub qkv_bias: bool,
}

pub struct DecoderLayer<B: Backend> {
    pub shape: LayerShape,
    q: B::Linear,
    k: B::Linear,
    v: B::Linear,
    o: B::Linear,
    q_bias: Option<B::Tensor>,
    k_bias: Option<B::Tensor>,
    v_bias: Option<B::Tensor>,
    q_norm: Option<B::Tensor>,
    k_norm: Option<B::Tensor>,
    gate: B::Linear,
    up: B::Linear,
    down: B::Linear,
    input_norm: B::Tensor,
    post_norm: B::Tensor,
}

pub(crate) fn load_err(
    src: &dyn WeightSource,
    name: &str,
    e: crate::backend::BackendError,
) -> LoadError {
    LoadError::Backend {
        path: src.path().to_path_buf(),
        name: name.to_string(),
        message: e.message,
    }
}

pub(crate) fn linear<B: Backend>(
    b: &B,
    src: &dyn WeightSource,
    name: &str,
    shape: &[usize],
) -> Result<B::Linear, LoadError> {
    let h = src.get_shaped(name, shape)?;
    b.linear(&h).map_err(|e| load_err(src, name, e))
}

pub(crate) fn tensor<B: Backend>(
    b: &B,
    src: &dyn WeightSource,
    name: &str,
    shape: &[usize],
) -> Result<B::Tensor, LoadError> {
    let h = src.get_shaped(name, shape)?;
    b.tensor(&h).map_err(|e| load_err(src, name, e))
}

impl<B: Backend> DecoderLayer<B> {
    /// Loads `{prefix}.self_attn.*`, `{prefix}.mlp.*` and the two norms.
    pub fn load(
        b: &B,
        src: &dyn WeightSource,
        prefix: &str,
        s: LayerShape,
    ) -> Result<Self, LoadError> {
        let (h, qd, kd) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let n = |x: &str| format!("{prefix}.{x}");
        let opt = |name: String, len: usize, on: bool| -> Result<Option<B::Tensor>, LoadError> {
            if on {
                tensor(b, src, &name, &[len]).map(Some)
            } else {
                Ok(None)
            }
        };
        Ok(DecoderLayer {
            shape: s,
            q: linear(b, src, &n("self_attn.q_proj.weight"), &[qd, h])?,
            k: linear(b, src, &n("self_attn.k_proj.weight"), &[kd, h])?,
            v: linear(b, src, &n("self_attn.v_proj.weight"), &[kd, h])?,
            o: linear(b, src, &n("self_attn.o_proj.weight"), &[h, qd])?,
            q_bias: opt(n("self_attn.q_proj.bias"), qd, s.qkv_bias)?,
            k_bias: opt(n("self_attn.k_proj.bias"), kd, s.qkv_bias)?,
            v_bias: opt(n("self_attn.v_proj.bias"), kd, s.qkv_bias)?,
            q_norm: opt(n("self_attn.q_norm.weight"), s.head_dim, s.qk_norm)?,
            k_norm: opt(n("self_attn.k_norm.weight"), s.head_dim, s.qk_norm)?,
            gate: linear(b, src, &n("mlp.gate_proj.weight"), &[s.intermediate, h])?,
            up: linear(b, src, &n("mlp.up_proj.weight"), &[s.intermediate, h])?,
            down: linear(b, src, &n("mlp.down_proj.weight"), &[h, s.intermediate])?,
            input_norm: tensor(b, src, &n("input_layernorm.weight"), &[h])?,
            post_norm: tensor(b, src, &n("post_attention_layernorm.weight"), &[h])?,
        })
    }

    pub fn input_norm(&self, b: &B, x: &B::Tensor) -> BResult<B::Tensor> {
        b.rms_norm(x, &self.input_norm, self.shape.eps)
    }

    fn heads(
        &self,
        b: &B,
        x: &B::Tensor,
        w: &B::Linear,
        bias: &Option<B::Tensor>,
        n_heads: usize,
        norm: &Option<B::Tensor>,
    ) -> BResult<B::Tensor> {
        let dims = b.dims(x);
        let (bs, l) = (dims[0], dims[1]);
        let mut y = b.matmul(x, w)?;
        if let Some(bias) = bias {
            y = b.add(&y, bias)?;
        }
        let y = b.reshape(&y, &[bs, l, n_heads, self.shape.head_dim])?;
        let y = match norm {
            Some(nw) => b.rms_norm(&y, nw, self.shape.eps)?,
            None => y,
        };
        b.transpose(&y, 1, 2)
    }

    /// Queries of normed input `xn [1, L, H]`, `[1, hq, L, d]`, roped at `start..`.
    pub fn queries(
        &self,
        b: &B,
        xn: &B::Tensor,
        rope: &B::Rope,
        start: usize,
    ) -> BResult<B::Tensor> {
        let q = self.heads(b, xn, &self.q, &self.q_bias, self.shape.heads, &self.q_norm)?;
        b.rope(&q, rope, start)
    }

    /// Keys (normed and roped at `start..`) and values of `xn [1, L, H]`.
    pub fn keys_values(
        &self,
        b: &B,
        xn: &B::Tensor,
        rope: &B::Rope,
        start: usize,
    ) -> BResult<(B::Tensor, B::Tensor)> {
        let k = self.heads(
            b,
            xn,
            &self.k,
            &self.k_bias,
            self.shape.kv_heads,
            &self.k_norm,
        )?;
        let k = b.rope(&k, rope, start)?;
        let v = self.heads(b, xn, &self.v, &self.v_bias, self.shape.kv_heads, &None)?;
        Ok((k, v))
    }

    /// Attention over given keys/values, projected back: `[1, L, H]`.
    pub fn attend(
        &self,
        b: &B,
        q: &B::Tensor,
        k: &B::Tensor,
        v: &B::Tensor,
        mask: AttnMask,
    ) -> BResult<B::Tensor> {
        let scale = 1.0 / (self.shape.head_dim as f32).sqrt();
        let o = b.attention(q, k, v, mask, scale)?;
        let dims = b.dims(&o);
        let (bs, l) = (dims[0], dims[2]);
        let o = b.transpose(&o, 1, 2)?;
        let o = b.reshape(&o, &[bs, l, self.shape.heads * self.shape.head_dim])?;
        b.matmul(&o, &self.o)
    }

    /// Residual MLP half of the layer: `x + mlp(norm(x))`.
    pub fn mlp_residual(&self, b: &B, x: &B::Tensor) -> BResult<B::Tensor> {
        let xn = b.rms_norm(x, &self.post_norm, self.shape.eps)?;
        let g = b.silu(&b.matmul(&xn, &self.gate)?)?;
        let u = b.matmul(&xn, &self.up)?;
        let y = b.matmul(&b.mul(&g, &u)?, &self.down)?;
        b.add(x, &y)
    }
}
