//! The tensor-operations seam. Every model is written once over [`Backend`]; a backend
//! (candle here, MLX behind a feature) supplies the math on its own tensor type.
//!
//! Invariants: all tensors of one backend live on the engine worker thread; host data only
//! crosses the seam at explicit evaluation points (`to_f32_vec`, `to_u32_vec`, `eval`), so a
//! lazy backend (MLX) can build a whole forward graph before computing it.

pub mod candle;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod cuda_shapes;
pub mod load_report;
#[cfg(feature = "mlx")]
pub mod mlx;
pub mod profile;

use crate::weights::HostTensor;

/// Element type of tensors inside a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }
}

/// A failure inside a backend's tensor math or device handling.
#[derive(thiserror::Error, Debug)]
#[error("{backend} backend: {message}")]
pub struct BackendError {
    pub backend: &'static str,
    pub message: String,
}

pub type BResult<T> = std::result::Result<T, BackendError>;

/// Attention masking for [`Backend::attention`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnMask {
    /// Every query sees every key (drafter blocks).
    None,
    /// Query i (absolute position `offset + i`) sees keys `0..=offset + i`.
    Causal { offset: usize },
    /// Causal with a sliding window: query at p sees keys in `(p - window, p]`.
    SlidingCausal { offset: usize, window: usize },
}

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// HF "rotate half": dim i pairs with dim i + d/2.
    Half,
    /// Adjacent pairs (2i, 2i+1): llama.cpp's layout for GGUF llama weights.
    Interleaved,
}

/// Rotary embedding frequencies; `inv_freq.len() == head_dim / 2`.
#[derive(Clone, Debug)]
pub struct RopeSpec {
    pub inv_freq: Vec<f32>,
    pub style: RopeStyle,
}

impl RopeSpec {
    pub fn default_theta(theta: f64, head_dim: usize, style: RopeStyle) -> Self {
        let inv_freq = (0..head_dim / 2)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        RopeSpec { inv_freq, style }
    }
}

/// One forward's projected heads for [`Backend::qkv_rope_store`]: queries, keys and values
/// `[1, L, heads, d]` (views of a fused projection are fine), with the per-head RMSNorm
/// (weight, eps) of the queries and of the keys where the model has one.
pub struct QkvHeads<'a, T> {
    /// `None`: only the keys and values are wanted (the op's result is then not used).
    pub q: Option<&'a T>,
    pub k: &'a T,
    pub v: &'a T,
    pub q_norm: Option<(&'a T, f32)>,
    pub k_norm: Option<(&'a T, f32)>,
}

/// What a fixed-shape forward step depends on besides its ids and position: the cache buffers
/// it writes ([`crate::kv::KvCache::buffers_id`]), its row count and what else shapes it, as
/// its caller numbers it (a target: the logits wanted and the tapped layers; a drafter: its
/// draft rows). A backend with device graphs replays one per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepKey {
    /// The forward's kind ("transformer", or the drafter's name).
    pub who: &'static str,
    pub cache: (u64, u64),
    pub rows: usize,
    pub shape: Vec<usize>,
}

/// The operations the models need. Shapes follow `[batch, heads, seq, head_dim]` for attention
/// inputs and `[.., features]` elsewhere. Implementations must not panic on bad shapes: they
/// return a [`BackendError`].
pub trait Backend: Clone + Send + 'static {
    type Tensor: Clone + Send;
    /// A weight for `x @ w^T`: dense or quantized, in the backend's preferred layout.
    type Linear: Send;
    /// Prepared rotary tables (or frequencies) for one [`RopeSpec`].
    type Rope: Send;

    fn name(&self) -> &'static str;
    fn device_label(&self) -> String;
    /// Activation dtype used by models on this backend.
    fn compute_dtype(&self) -> DType;
    /// Whether GGUF block-quantized weights stay quantized in memory (else they are
    /// dequantized to [`Backend::compute_dtype`] at load).
    fn keeps_gguf_quantized(&self) -> bool {
        false
    }
    /// Whether a dequantized GGUF's Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matmul weights stay packed
    /// (the exact kernel, `backend/cpu/qexact.rs`), so that the memory check counts them at
    /// their packed size.
    fn holds_gguf_exact_packed(&self) -> bool {
        false
    }
    /// What the weights loaded since the last call became (forms and bytes), then cleared.
    fn take_load_report(&self) -> Option<load_report::LoadReport> {
        None
    }

    // ---- host <-> backend ----
    /// A dense tensor from host weights (quantized host weights are dequantized).
    fn tensor(&self, host: &HostTensor) -> BResult<Self::Tensor>;
    /// A matmul weight; quantized host weights may stay quantized.
    fn linear(&self, host: &HostTensor) -> BResult<Self::Linear>;
    /// A dense matmul weight from an existing `[out, in]` tensor (tied embeddings).
    fn linear_from_tensor(&self, t: &Self::Tensor) -> BResult<Self::Linear>;
    #[allow(clippy::wrong_self_convention)] // the backend picks device and dtype
    fn from_f32(&self, data: &[f32], shape: &[usize]) -> BResult<Self::Tensor>;
    #[allow(clippy::wrong_self_convention)]
    fn from_u32(&self, data: &[u32], shape: &[usize]) -> BResult<Self::Tensor>;
    fn zeros(&self, shape: &[usize]) -> BResult<Self::Tensor>;
    /// Evaluation point: copies to host as f32.
    fn to_f32_vec(&self, t: &Self::Tensor) -> BResult<Vec<f32>>;
    /// Evaluation point: copies an integer tensor to host.
    fn to_u32_vec(&self, t: &Self::Tensor) -> BResult<Vec<u32>>;
    /// Evaluation point with no copy: forces pending work (no-op on eager backends).
    fn eval(&self, ts: &[&Self::Tensor]) -> BResult<()>;
    fn dims(&self, t: &Self::Tensor) -> Vec<usize>;
    fn to_dtype(&self, t: &Self::Tensor, dtype: DType) -> BResult<Self::Tensor>;

    // ---- math ----
    /// `x[.., in] @ w^T -> [.., out]`.
    fn matmul(&self, x: &Self::Tensor, w: &Self::Linear) -> BResult<Self::Tensor>;
    /// `x @ w^T` for a result that only proposes drafts and never decides an output token (a
    /// parallel drafter's head): the target verifies every draft, so a backend may use faster,
    /// inexact arithmetic here. Default: [`Backend::matmul`].
    fn draft_matmul(&self, x: &Self::Tensor, w: &Self::Linear) -> BResult<Self::Tensor> {
        self.matmul(x, w)
    }
    /// Rows of `table[V, H]` picked by `ids` (u32) -> `[ids.., H]`.
    /// The weight as a dense tensor in the compute dtype when that is how it is held (a tied
    /// embedding table then shares its storage instead of holding a second copy).
    fn linear_dense(&self, _w: &Self::Linear) -> Option<Self::Tensor> {
        None
    }
    /// A weight whose matmul ([`Backend::swiglu_matmul`]) gives the SwiGLU MLP's activation
    /// `silu(x · gateᵀ) · (x · upᵀ)` in one pass, where the backend has such a GEMM. `None`:
    /// it has not (the model keeps gate and up as projections and calls [`Backend::swiglu`]).
    fn swiglu_linear(&self, _gate: &HostTensor, _up: &HostTensor) -> Option<BResult<Self::Linear>> {
        None
    }
    /// `silu(x · gateᵀ) · (x · upᵀ)` for a weight made by [`Backend::swiglu_linear`]; the same
    /// values as [`Backend::matmul`] of each and [`Backend::swiglu`].
    fn swiglu_matmul(&self, _x: &Self::Tensor, _w: &Self::Linear) -> BResult<Self::Tensor> {
        Err(BackendError {
            backend: self.name(),
            message: "this backend has no fused SwiGLU matmul".into(),
        })
    }
    /// Whether [`Backend::gather_rows`] can read rows of this matmul weight (a tied embedding
    /// then needs no dense copy of its table).
    fn has_rows(&self, _w: &Self::Linear) -> bool {
        false
    }
    /// Rows `ids` of the `[out, in]` weight `w` as a `[1, ids.len(), in]` tensor, each exactly
    /// as the dense table would hold it.
    fn gather_rows(&self, _w: &Self::Linear, _ids: &[u32]) -> BResult<Self::Tensor> {
        Err(BackendError {
            backend: self.name(),
            message: "this weight form has no row gather".into(),
        })
    }
    /// Rows `ids` of the `[out, in]` weight `w` as a new `[ids.len(), in]` weight for
    /// [`Backend::draft_matmul`] only (a drafter's head over its draft vocabulary: every draft
    /// is verified, so the rows may be held in a faster, inexact form). `None`: this weight
    /// form has no rows to take (the drafter keeps the whole head), the default.
    fn draft_rows(&self, w: &Self::Linear, ids: &[u32]) -> BResult<Option<Self::Linear>> {
        let _ = (w, ids);
        Ok(None)
    }
    fn embedding(&self, table: &Self::Tensor, ids: &Self::Tensor) -> BResult<Self::Tensor>;
    /// [`Backend::embedding`] of host ids shaped `shape`; a backend may check them on the host
    /// instead of reading a device tensor back.
    fn embedding_ids(
        &self,
        table: &Self::Tensor,
        ids: &[u32],
        shape: &[usize],
    ) -> BResult<Self::Tensor> {
        self.embedding(table, &self.from_u32(ids, shape)?)
    }
    /// [`Backend::embedding`] of device ids known to be below `bound` (an argmax over `bound`
    /// values): a backend may check `bound` against the table instead of reading the ids back,
    /// so the ids never cross the bus.
    fn embedding_below(
        &self,
        table: &Self::Tensor,
        ids: &Self::Tensor,
        bound: usize,
    ) -> BResult<Self::Tensor> {
        let _ = bound;
        self.embedding(table, ids)
    }
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Tensor, eps: f32) -> BResult<Self::Tensor>;
    /// `(x + r, rms_norm(x + r) · w)`: a residual add and the norm after it (backends may fuse
    /// them; the sum is what [`Backend::add`] would give).
    fn add_rms_norm(
        &self,
        x: &Self::Tensor,
        r: &Self::Tensor,
        w: &Self::Tensor,
        eps: f32,
    ) -> BResult<(Self::Tensor, Self::Tensor)> {
        let s = self.add(x, r)?;
        let n = self.rms_norm(&s, w, eps)?;
        Ok((s, n))
    }
    fn rope_prepare(&self, spec: &RopeSpec, max_positions: usize) -> BResult<Self::Rope>;
    /// Rotates `x[b, h, L, d]` for absolute positions `start..start + L`.
    fn rope(&self, x: &Self::Tensor, rope: &Self::Rope, start: usize) -> BResult<Self::Tensor>;
    /// Heads `y[b, L, h, d]` -> `[b, h, L, d]`, RMS-normed per head by `norm` (weight, eps) when
    /// given, then rotated for positions `start..` (backends may do it in one pass).
    fn norm_rope(
        &self,
        y: Self::Tensor,
        norm: Option<(&Self::Tensor, f32)>,
        rope: &Self::Rope,
        start: usize,
    ) -> BResult<Self::Tensor> {
        let y = match norm {
            Some((w, eps)) => self.rms_norm(&y, w, eps)?,
            None => y,
        };
        self.rope(&self.transpose(&y, 1, 2)?, rope, start)
    }
    /// [`Backend::norm_rope`] of the queries and the keys of one forward, with the keys and the
    /// values written straight into a layer's cache buffers (`[1, hkv, cap, d]`) at rows
    /// `at..at + L`, in one pass where the backend has it; returns the queries `[1, hq, L, d]`.
    /// `None`: not done for these inputs, nothing written (the caller takes the separate ops).
    fn qkv_rope_store(
        &self,
        _heads: QkvHeads<'_, Self::Tensor>,
        _rope: &Self::Rope,
        _start: usize,
        _cache: [&Self::Tensor; 2],
        _at: usize,
    ) -> Option<BResult<Self::Tensor>> {
        None
    }
    /// Scaled dot-product attention with grouped-query heads (`hq % hkv == 0`).
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        mask: AttnMask,
        scale: f32,
    ) -> BResult<Self::Tensor>;
    fn silu(&self, x: &Self::Tensor) -> BResult<Self::Tensor>;
    /// `silu(gate) · up` (the SwiGLU MLP's activation); backends may fuse it.
    fn swiglu(&self, gate: &Self::Tensor, up: &Self::Tensor) -> BResult<Self::Tensor> {
        let g = self.silu(gate)?;
        self.mul(&g, up)
    }
    fn gelu_tanh(&self, x: &Self::Tensor) -> BResult<Self::Tensor>;
    /// `gelu_tanh(gate) · up` (Gemma's MLP activation); backends may fuse it.
    fn geglu(&self, gate: &Self::Tensor, up: &Self::Tensor) -> BResult<Self::Tensor> {
        let g = self.gelu_tanh(gate)?;
        self.mul(&g, up)
    }
    fn sigmoid(&self, x: &Self::Tensor) -> BResult<Self::Tensor>;
    fn mul(&self, a: &Self::Tensor, b: &Self::Tensor) -> BResult<Self::Tensor>;
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> BResult<Self::Tensor>;
    /// `x * s` for a scalar `s`.
    fn scale(&self, x: &Self::Tensor, s: f32) -> BResult<Self::Tensor>;
    /// `cap * tanh(x / cap)` (logit soft-capping).
    fn softcap(&self, x: &Self::Tensor, cap: f32) -> BResult<Self::Tensor>;
    fn softmax_last(&self, x: &Self::Tensor) -> BResult<Self::Tensor>;
    /// Index of the largest value along the last axis (u32), first index on ties (NaN never
    /// chosen): the rule of `sampling::argmax`.
    fn argmax_last(&self, x: &Self::Tensor) -> BResult<Self::Tensor>;
    /// DSpark's greedy Markov chain in one fused form, where the backend has one: the ids `[n]`
    /// of the first `n` rows of `logits` (`[1, n', vocab]`), row i's the [`Backend::argmax_last`]
    /// of `f32(row i) + f32(w2 · w1[prev])` with `prev` = `pending` for row 0 and row i - 1's id
    /// after it: exactly what the ops one by one give (`drafters/dspark.rs`). `None`: no fused
    /// form for these tensors; the caller runs the ops.
    fn markov_greedy(
        &self,
        logits: &Self::Tensor,
        w1: &Self::Tensor,
        w2: &Self::Linear,
        pending: u32,
        n: usize,
    ) -> BResult<Option<Self::Tensor>> {
        let _ = (logits, w1, w2, pending, n);
        Ok(None)
    }
    /// The most rows a [`Backend::run_step`] may replay from a captured graph (0: the backend
    /// has no graphs; every step runs its ops one by one).
    fn step_graph_rows(&self) -> usize {
        0
    }
    /// Runs one forward step of `ids` at position `start`, built by `step` (its outputs). A
    /// backend with device graphs captures the step once per `key` and afterwards replays it
    /// with the new ids and position without calling `step`; the outputs then live in the
    /// graph's memory and hold their values until the same key runs again. The caller must
    /// have made room in the cache for the step (no buffer may change inside it).
    fn run_step(
        &self,
        _key: &StepKey,
        _ids: &[u32],
        _start: usize,
        step: &mut dyn FnMut() -> BResult<Vec<Self::Tensor>>,
    ) -> BResult<Vec<Self::Tensor>> {
        step()
    }
    /// Whether greedy loops should take [`Backend::argmax_last`] on the device and copy only
    /// the ids instead of whole logit rows (a GPU, where rows cross a bus).
    fn device_argmax(&self) -> bool {
        false
    }
    /// Fixed-shape steps captured so far (CUDA graphs; their failed captures included): a step
    /// of a new shape first runs eagerly and is then captured, several times a steady step's
    /// time, so a speculative round during which this count moved is not timed as a round of
    /// its draft count (`spec::decode`). 0 where nothing is captured.
    fn step_captures(&self) -> u64 {
        0
    }
    /// Whether a forward over L rows gives every row the bits of L one-row steps (our CPU and
    /// CUDA kernels). Then greedy output cannot depend on how many drafts a round verifies,
    /// and the loop may choose that count from measured costs.
    fn rows_batch_invariant(&self) -> bool {
        false
    }
    /// A fixed prior for what one more row of a speculative round costs (a drafted row and
    /// its verify row together), as a fraction of a target decode step. Used only where the
    /// draft count may not follow measured time (seeded sampling), so that the count is a
    /// function of the request alone. On an accelerator extra rows are nearly free; on a CPU
    /// the few-row kernels are compute-bound and each row costs a good part of a step.
    fn spec_row_cost(&self) -> f64 {
        0.05
    }
    /// The `k` largest values along the last axis and their indices, descending.
    fn topk_last(&self, x: &Self::Tensor, k: usize) -> BResult<(Self::Tensor, Self::Tensor)>;

    // ---- shape ----
    fn concat(&self, ts: &[&Self::Tensor], dim: usize) -> BResult<Self::Tensor>;
    fn narrow(
        &self,
        t: &Self::Tensor,
        dim: usize,
        start: usize,
        len: usize,
    ) -> BResult<Self::Tensor>;
    fn reshape(&self, t: &Self::Tensor, shape: &[usize]) -> BResult<Self::Tensor>;
    fn transpose(&self, t: &Self::Tensor, d1: usize, d2: usize) -> BResult<Self::Tensor>;
    /// `dst` with `src` written at `offset` along `dim`. May update `dst` in place; callers
    /// must use the returned tensor.
    fn slice_update(
        &self,
        dst: &Self::Tensor,
        src: &Self::Tensor,
        dim: usize,
        offset: usize,
    ) -> BResult<Self::Tensor>;
}
