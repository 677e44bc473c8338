//! One Llama/Qwen-style decoder layer (pre-norm attention + SwiGLU MLP), shared by the target
//! models and the DFlash/DSpark drafters, which differ only in where keys and values come from.
//! The Gemma form ([`GemmaLayer`]) adds sandwich norms (after attention and after the MLP), a
//! GELU-tanh MLP, `(1 + w)` norm weights and its own attention scale; Gemma 4 also normalizes
//! values (no weight), may take values from the key projection, and scales the layer output.
//! Projections that read the same input are fused at load (q/k/v for targets, gate/up always):
//! one weight pass and one thread hand-off instead of two or three, same values per column.

use crate::backend::{AttnMask, BResult, Backend, QkvHeads};
use crate::kv::KvCache;
use crate::weights::{HostTensor, LoadError, WeightSource};

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
    /// Gemma numerics; `None` for Llama/Qwen layers.
    pub gemma: Option<GemmaLayer>,
}

/// What a Gemma layer does differently.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmaLayer {
    /// Attention-score scale (`query_pre_attn_scalar^-0.5`).
    pub attn_scale: f32,
    /// Added to every norm weight at load (1 for HF `(1 + w)` weights, 0 for GGUF).
    pub norm_offset: f32,
    /// Values are the key projection (no `v_proj`; Gemma 4 full-attention layers).
    pub k_eq_v: bool,
    /// Gemma 4: RMS-normalize values without a weight, and multiply the layer's output by its
    /// stored `layer_scalar`.
    pub v4: bool,
}

/// The named `[out, in]` weights of `parts`, as stored.
fn read_parts(
    src: &dyn WeightSource,
    parts: &[(String, [usize; 2])],
) -> Result<Vec<HostTensor>, LoadError> {
    parts
        .iter()
        .map(|(name, shape)| src.get_shaped(name, shape))
        .collect()
}

/// Several projections of one input: one fused `[sum out_i, in]` weight, or apart when their
/// storage differs (or the caller needs them one at a time).
enum Proj<B: Backend> {
    Fused { w: B::Linear, sizes: Vec<usize> },
    Split(Vec<B::Linear>),
}

impl<B: Backend> Proj<B> {
    fn load(
        b: &B,
        src: &dyn WeightSource,
        parts: &[(String, [usize; 2])],
        fuse: bool,
    ) -> Result<Self, LoadError> {
        Self::from_hosts(b, src, parts, read_parts(src, parts)?, fuse)
    }

    fn from_hosts(
        b: &B,
        src: &dyn WeightSource,
        parts: &[(String, [usize; 2])],
        hosts: Vec<HostTensor>,
        fuse: bool,
    ) -> Result<Self, LoadError> {
        if fuse {
            let refs: Vec<&HostTensor> = hosts.iter().collect();
            if let Some(cat) = HostTensor::concat_rows(&refs) {
                let w = b.linear(&cat).map_err(|e| load_err(src, &parts[0].0, e))?;
                let sizes = parts.iter().map(|(_, s)| s[0]).collect();
                return Ok(Proj::Fused { w, sizes });
            }
        }
        let ws = hosts
            .iter()
            .zip(parts)
            .map(|(h, (name, _))| b.linear(h).map_err(|e| load_err(src, name, e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Proj::Split(ws))
    }

    /// The projections `which` of `x`, in that order.
    fn apply(&self, b: &B, x: &B::Tensor, which: &[usize]) -> BResult<Vec<B::Tensor>> {
        match self {
            Proj::Split(ws) => which.iter().map(|&i| b.matmul(x, &ws[i])).collect(),
            Proj::Fused { w, sizes } => {
                let y = b.matmul(x, w)?;
                let last = b.dims(&y).len() - 1;
                which
                    .iter()
                    .map(|&i| b.narrow(&y, last, sizes[..i].iter().sum(), sizes[i]))
                    .collect()
            }
        }
    }

    /// The projections of `x [bs, L, in]` that `parts` name (`(index, heads, bias)`), as heads
    /// `[bs, L, heads, d]`. An unbiased part of a fused projection whose parts are all whole
    /// heads is a view of the fused output (rows of all parts apart, no copy), which the
    /// one-launch attention-input op reads in place; other parts are their own tensors.
    fn heads(
        &self,
        b: &B,
        x: &B::Tensor,
        parts: &[(usize, usize, Option<&B::Tensor>)],
        d: usize,
    ) -> BResult<Vec<B::Tensor>> {
        let split = |y: B::Tensor, heads: usize, bias: Option<&B::Tensor>| {
            let dims = b.dims(&y);
            let y = match bias {
                Some(bias) => b.add(&y, bias)?,
                None => y,
            };
            b.reshape(&y, &[dims[0], dims[1], heads, d])
        };
        match self {
            Proj::Split(ws) => parts
                .iter()
                .map(|&(i, heads, bias)| split(b.matmul(x, &ws[i])?, heads, bias))
                .collect(),
            Proj::Fused { w, sizes } => {
                let y = b.matmul(x, w)?;
                let dims = b.dims(&y);
                let total: usize = sizes.iter().sum();
                let whole = dims.len() == 3 && d > 0 && sizes.iter().all(|s| s % d == 0);
                let grid = if whole {
                    Some(b.reshape(&y, &[dims[0], dims[1], total / d, d])?)
                } else {
                    None
                };
                parts
                    .iter()
                    .map(|&(i, heads, bias)| {
                        let at: usize = sizes[..i].iter().sum();
                        match (&grid, bias) {
                            (Some(g), None) if sizes[i] == heads * d => {
                                b.narrow(g, 2, at / d, heads)
                            }
                            _ => split(b.narrow(&y, dims.len() - 1, at, sizes[i])?, heads, bias),
                        }
                    })
                    .collect()
            }
        }
    }
}

/// A layer's attention inputs: the queries where asked for, the keys and the values.
type Inputs<B> = (
    Option<<B as Backend>::Tensor>,
    <B as Backend>::Tensor,
    <B as Backend>::Tensor,
);

/// The MLP's input projections: gate and up (fused or apart), or, where the backend has a
/// GEMM that computes the SwiGLU activation itself ([`Backend::swiglu_linear`]), one weight
/// with their rows interleaved.
enum GateUp<B: Backend> {
    Proj(Proj<B>),
    Swiglu(B::Linear),
}

impl<B: Backend> GateUp<B> {
    /// Gemma's MLP (a GELU-tanh gate) always keeps the projections.
    fn load(
        b: &B,
        src: &dyn WeightSource,
        parts: &[(String, [usize; 2])],
        swiglu: bool,
    ) -> Result<Self, LoadError> {
        let hosts = read_parts(src, parts)?;
        if swiglu {
            if let Some(w) = b.swiglu_linear(&hosts[0], &hosts[1]) {
                return w
                    .map(GateUp::Swiglu)
                    .map_err(|e| load_err(src, &parts[0].0, e));
            }
        }
        Proj::from_hosts(b, src, parts, hosts, true).map(GateUp::Proj)
    }
}

pub struct DecoderLayer<B: Backend> {
    pub shape: LayerShape,
    /// q, k, v
    qkv: Proj<B>,
    o: B::Linear,
    q_bias: Option<B::Tensor>,
    k_bias: Option<B::Tensor>,
    v_bias: Option<B::Tensor>,
    q_norm: Option<B::Tensor>,
    k_norm: Option<B::Tensor>,
    /// gate, up
    gate_up: GateUp<B>,
    down: B::Linear,
    input_norm: B::Tensor,
    /// The MLP's input norm (`post_attention_layernorm`; Gemma: `pre_feedforward_layernorm`).
    post_norm: B::Tensor,
    /// Gemma sandwich norms: on the attention output and on the MLP output.
    post_attn_norm: Option<B::Tensor>,
    post_ff_norm: Option<B::Tensor>,
    /// Gemma 4: a ones weight for the unscaled value norm, and the output scalar.
    v_norm: Option<B::Tensor>,
    layer_scalar: Option<f32>,
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

/// An RMSNorm weight with `offset` added to every element (Gemma's `1 + w`).
pub(crate) fn norm_weight<B: Backend>(
    b: &B,
    src: &dyn WeightSource,
    name: &str,
    len: usize,
    offset: f32,
) -> Result<B::Tensor, LoadError> {
    if offset == 0.0 {
        return tensor(b, src, name, &[len]);
    }
    let h = src.get_shaped(name, &[len])?;
    let vals: Vec<f32> = h
        .to_f32()
        .map_err(|m| LoadError::parse(src.path(), format!("tensor `{name}`: {m}")))?
        .into_iter()
        .map(|w| w + offset)
        .collect();
    b.tensor(&HostTensor::from_f32(vec![len], &vals))
        .map_err(|e| load_err(src, name, e))
}

impl<B: Backend> DecoderLayer<B> {
    /// Loads `{prefix}.self_attn.*`, `{prefix}.mlp.*` and the two norms. `fuse_qkv` when
    /// queries, keys and values always come from the same input (targets).
    pub fn load(
        b: &B,
        src: &dyn WeightSource,
        prefix: &str,
        s: LayerShape,
        fuse_qkv: bool,
    ) -> Result<Self, LoadError> {
        let (h, qd, kd) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let n = |x: &str| format!("{prefix}.{x}");
        let offset = s.gemma.map_or(0.0, |g| g.norm_offset);
        let opt = |name: String, len: usize, on: bool| -> Result<Option<B::Tensor>, LoadError> {
            if on {
                tensor(b, src, &name, &[len]).map(Some)
            } else {
                Ok(None)
            }
        };
        let norm = |name: String, len: usize, on: bool| -> Result<Option<B::Tensor>, LoadError> {
            if on {
                norm_weight(b, src, &name, len, offset).map(Some)
            } else {
                Ok(None)
            }
        };
        let gemma = s.gemma.is_some();
        let k_eq_v = s.gemma.is_some_and(|g| g.k_eq_v);
        let v4 = s.gemma.is_some_and(|g| g.v4);
        let mut qkv_parts = vec![
            (n("self_attn.q_proj.weight"), [qd, h]),
            (n("self_attn.k_proj.weight"), [kd, h]),
        ];
        if !k_eq_v {
            qkv_parts.push((n("self_attn.v_proj.weight"), [kd, h]));
        }
        let v_norm = if v4 {
            let ones = HostTensor::from_f32(vec![s.head_dim], &vec![1.0; s.head_dim]);
            Some(b.tensor(&ones).map_err(|e| load_err(src, "v_norm", e))?)
        } else {
            None
        };
        let layer_scalar = if v4 {
            let name = n("layer_scalar");
            let host = src.get_shaped(&name, &[1])?;
            let x = host
                .to_f32()
                .map_err(|m| LoadError::parse(src.path(), format!("tensor `{name}`: {m}")))?;
            Some(x[0])
        } else {
            None
        };
        let mlp_norm = if gemma {
            "pre_feedforward_layernorm.weight"
        } else {
            "post_attention_layernorm.weight"
        };
        Ok(DecoderLayer {
            shape: s,
            qkv: Proj::load(b, src, &qkv_parts, fuse_qkv)?,
            o: linear(b, src, &n("self_attn.o_proj.weight"), &[h, qd])?,
            q_bias: opt(n("self_attn.q_proj.bias"), qd, s.qkv_bias)?,
            k_bias: opt(n("self_attn.k_proj.bias"), kd, s.qkv_bias)?,
            v_bias: opt(n("self_attn.v_proj.bias"), kd, s.qkv_bias)?,
            q_norm: norm(n("self_attn.q_norm.weight"), s.head_dim, s.qk_norm)?,
            k_norm: norm(n("self_attn.k_norm.weight"), s.head_dim, s.qk_norm)?,
            gate_up: GateUp::load(
                b,
                src,
                &[
                    (n("mlp.gate_proj.weight"), [s.intermediate, h]),
                    (n("mlp.up_proj.weight"), [s.intermediate, h]),
                ],
                !gemma,
            )?,
            down: linear(b, src, &n("mlp.down_proj.weight"), &[h, s.intermediate])?,
            input_norm: norm_weight(b, src, &n("input_layernorm.weight"), h, offset)?,
            post_norm: norm_weight(b, src, &n(mlp_norm), h, offset)?,
            post_attn_norm: norm(n("post_attention_layernorm.weight"), h, gemma)?,
            post_ff_norm: norm(n("post_feedforward_layernorm.weight"), h, gemma)?,
            v_norm,
            layer_scalar,
        })
    }

    pub fn input_norm(&self, b: &B, x: &B::Tensor) -> BResult<B::Tensor> {
        b.rms_norm(x, &self.input_norm, self.shape.eps)
    }

    /// This layer's projections `which` of `xn` as heads `[bs, L, heads, d]`, biases added
    /// (see [`Proj::heads`]).
    fn project_heads<const N: usize>(
        &self,
        b: &B,
        xn: &B::Tensor,
        which: [usize; N],
    ) -> BResult<[B::Tensor; N]> {
        let biases = [&self.q_bias, &self.k_bias, &self.v_bias];
        let counts = [self.shape.heads, self.shape.kv_heads, self.shape.kv_heads];
        let parts: Vec<_> = which
            .iter()
            .map(|&i| (i, counts[i], biases[i].as_ref()))
            .collect();
        let v = self.qkv.heads(b, xn, &parts, self.shape.head_dim)?;
        Ok(v.try_into()
            .unwrap_or_else(|_| unreachable!("one output per projection")))
    }

    /// Queries of `xn` at positions `start..`, with its keys and values appended to layer
    /// `layer` of `cache`: `(q, keys, values)`, the last two over every cached position. The
    /// per-head norms, the rotation and both cache writes are one backend op where it has one
    /// ([`Backend::qkv_rope_store`]), else separate ops (norm + rope of each, two cache writes).
    pub fn attention_inputs(
        &self,
        b: &B,
        xn: &B::Tensor,
        rope: &B::Rope,
        start: usize,
        cache: &mut KvCache<B>,
        layer: usize,
    ) -> BResult<(B::Tensor, B::Tensor, B::Tensor)> {
        let (q, ka, va) = self.inputs(b, xn, rope, start, cache, layer, true)?;
        let q = q.unwrap_or_else(|| unreachable!("queries were asked for"));
        Ok((q, ka, va))
    }

    /// The keys and values of `xn` at positions `start..` written into layer `layer` of `cache`
    /// (a drafter's context: no queries needed), as [`Self::attention_inputs`] writes them.
    pub fn store_keys_values(
        &self,
        b: &B,
        xn: &B::Tensor,
        rope: &B::Rope,
        start: usize,
        cache: &mut KvCache<B>,
        layer: usize,
    ) -> BResult<()> {
        self.inputs(b, xn, rope, start, cache, layer, false)
            .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    fn inputs(
        &self,
        b: &B,
        xn: &B::Tensor,
        rope: &B::Rope,
        start: usize,
        cache: &mut KvCache<B>,
        layer: usize,
        queries: bool,
    ) -> BResult<Inputs<B>> {
        // heads [bs, L, n, d], biases added; views of the fused projection where unbiased (a
        // split projection computes no queries when none are wanted)
        let (qs, ks, vs) = if queries {
            let [q, k, v] = self.project_heads(b, xn, [0, 1, self.v_index()])?;
            (Some(q), k, v)
        } else {
            let [k, v] = self.project_heads(b, xn, [1, self.v_index()])?;
            (None, k, v)
        };
        let (kvh, d) = (self.shape.kv_heads, self.shape.head_dim);
        let l = b.dims(&ks)[1];
        let eps = self.shape.eps;
        let (qn, kn) = (
            self.q_norm.as_ref().map(|w| (w, eps)),
            self.k_norm.as_ref().map(|w| (w, eps)),
        );
        let mut q = None;
        let (ka, va) = cache.append_with(b, layer, [kvh, l, d], |kb, vb, at| {
            // the one-launch op has run on the GPU for unbiased models without a value norm
            let plain = [&self.q_bias, &self.k_bias, &self.v_bias, &self.v_norm]
                .iter()
                .all(|t| t.is_none());
            if plain {
                let heads = QkvHeads {
                    q: qs.as_ref(),
                    k: &ks,
                    v: &vs,
                    q_norm: qn,
                    k_norm: kn,
                };
                if let Some(out) = b.qkv_rope_store(heads, rope, start, [kb, vb], at) {
                    let out = out?;
                    q = qs.as_ref().map(|_| out);
                    return Ok((kb.clone(), vb.clone()));
                }
            }
            if let Some(qs) = &qs {
                q = Some(b.norm_rope(qs.clone(), qn, rope, start)?);
            }
            let k = b.norm_rope(ks.clone(), kn, rope, start)?;
            let v = match &self.v_norm {
                Some(nw) => b.rms_norm(&vs, nw, eps)?,
                None => vs.clone(),
            };
            let v = b.transpose(&v, 1, 2)?;
            Ok((
                b.slice_update(kb, &k, 2, at)?,
                b.slice_update(vb, &v, 2, at)?,
            ))
        })?;
        Ok((q, ka, va))
    }

    /// Which projection gives the values: the key projection when `k_eq_v`.
    fn v_index(&self) -> usize {
        if self.shape.gemma.is_some_and(|g| g.k_eq_v) {
            1
        } else {
            2
        }
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
        let scale = match self.shape.gemma {
            Some(g) => g.attn_scale,
            None => 1.0 / (self.shape.head_dim as f32).sqrt(),
        };
        let o = b.attention(q, k, v, mask, scale)?;
        let dims = b.dims(&o);
        let (bs, l) = (dims[0], dims[2]);
        let o = b.transpose(&o, 1, 2)?;
        let o = b.reshape(&o, &[bs, l, self.shape.heads * self.shape.head_dim])?;
        b.matmul(&o, &self.o)
    }

    /// The attention half's residual `h = x + a` (Gemma: `x + norm(a)`) and the MLP's input
    /// norm of it, `(h, norm(h))` (one fused op where the backend has it).
    pub fn attn_residual(
        &self,
        b: &B,
        x: &B::Tensor,
        a: &B::Tensor,
    ) -> BResult<(B::Tensor, B::Tensor)> {
        let eps = self.shape.eps;
        match &self.post_attn_norm {
            Some(w) => b.add_rms_norm(x, &b.rms_norm(a, w, eps)?, &self.post_norm, eps),
            None => b.add_rms_norm(x, a, &self.post_norm, eps),
        }
    }

    /// Residual MLP half of the layer: `x + mlp(xn)` with `xn = norm(x)` from
    /// [`Self::attn_residual`] (Gemma: `x + norm(mlp(xn))` with a GELU-tanh gate). With `next`,
    /// the next layer's input norm is applied too and returned (fused with the add where the
    /// backend can, and when no layer scalar comes between them).
    pub fn mlp_residual(
        &self,
        b: &B,
        x: &B::Tensor,
        xn: &B::Tensor,
        next: Option<&Self>,
    ) -> BResult<(B::Tensor, Option<B::Tensor>)> {
        let act = match &self.gate_up {
            GateUp::Swiglu(w) => b.swiglu_matmul(xn, w)?,
            GateUp::Proj(p) => {
                let [g, u]: [B::Tensor; 2] = p
                    .apply(b, xn, &[0, 1])?
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("two outputs"));
                match self.shape.gemma {
                    Some(_) => b.geglu(&g, &u)?,
                    None => b.swiglu(&g, &u)?,
                }
            }
        };
        let mut y = b.matmul(&act, &self.down)?;
        if let Some(w) = &self.post_ff_norm {
            y = b.rms_norm(&y, w, self.shape.eps)?;
        }
        match (self.layer_scalar, next) {
            (None, Some(n)) => {
                let (out, on) = b.add_rms_norm(x, &y, &n.input_norm, n.shape.eps)?;
                Ok((out, Some(on)))
            }
            (scalar, next) => {
                let mut out = b.add(x, &y)?;
                if let Some(s) = scalar {
                    out = b.scale(&out, s)?;
                }
                let on = next.map(|n| n.input_norm(b, &out)).transpose()?;
                Ok((out, on))
            }
        }
    }
}
