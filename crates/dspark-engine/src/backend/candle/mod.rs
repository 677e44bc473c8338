//! [`Backend`] on candle: CPU here, CUDA with the `cuda` feature. Matmul weights and their
//! forms (dense, GGUF blocks, MLX affine) live in `linear.rs`, attention in `attention.rs`,
//! rotary tables and rotation in `rope.rs`, the glue to the CUDA row kernels (norms, norm +
//! rope) in `cuda_rows.rs`. On the CPU, few-row matmuls (decode and verify) and attention run
//! on our own batch-invariant kernels (`backend/cpu/`); on CUDA the same holds with
//! `backend/cuda/` (few-row GEMM, attention in place, norms, rope, argmax).

mod attention;
#[cfg(feature = "cuda")]
mod cuda_rows;
mod draft_rows;
mod linear;
mod rope;
mod setup;
mod steps;

use candle_core::{DType as CDType, Device, Tensor, D};

pub use linear::CandleLinear;
pub use rope::CandleRope;
pub use setup::CandleBackend;

use super::cpu::ops as cpu_ops;
#[cfg(feature = "cuda")]
use super::cuda as cuda_ops;
use super::{profile, AttnMask, BResult, Backend, BackendError, DType, QkvHeads, RopeSpec};
use crate::weights::HostTensor;

pub(crate) fn err(e: candle_core::Error) -> BackendError {
    BackendError {
        backend: "candle",
        message: e.to_string(),
    }
}

fn cdtype(d: DType) -> CDType {
    match d {
        DType::F32 => CDType::F32,
        DType::F16 => CDType::F16,
        DType::BF16 => CDType::BF16,
    }
}

impl Backend for CandleBackend {
    type Tensor = Tensor;
    type Linear = CandleLinear;
    type Rope = CandleRope;

    fn name(&self) -> &'static str {
        "candle"
    }

    fn device_label(&self) -> String {
        match &self.device {
            Device::Cpu => "cpu".into(),
            Device::Cuda(_) => "cuda".into(),
            Device::Metal(_) => "metal".into(),
        }
    }

    fn compute_dtype(&self) -> DType {
        self.dtype
    }

    fn keeps_gguf_quantized(&self) -> bool {
        self.keep_quantized
    }

    fn holds_gguf_exact_packed(&self) -> bool {
        !self.keep_quantized
            && self.exact_packed
            && self.cpu_kernels()
            && crate::backend::cpu::qexact::available()
    }

    fn tensor(&self, host: &HostTensor) -> BResult<Tensor> {
        let t = self.device_tensor(host)?;
        self.record(
            host,
            "",
            (t.elem_count() * t.dtype().size_in_bytes()) as u64,
        );
        Ok(t)
    }

    fn linear_dense(&self, w: &CandleLinear) -> Option<Tensor> {
        match w {
            CandleLinear::Dense(t) if t.dtype() == cdtype(self.dtype) => Some(t.clone()),
            _ => None,
        }
    }

    fn take_load_report(&self) -> Option<crate::backend::load_report::LoadReport> {
        let mut r = self.report.lock().ok()?;
        Some(std::mem::take(&mut *r))
    }

    fn linear(&self, host: &HostTensor) -> BResult<CandleLinear> {
        self.load_linear(host)
    }

    fn swiglu_linear(&self, gate: &HostTensor, up: &HostTensor) -> Option<BResult<CandleLinear>> {
        self.glu_linear(gate, up)
    }

    fn swiglu_matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        self.glu_matmul(x, w)
    }

    fn has_rows(&self, w: &CandleLinear) -> bool {
        matches!(
            w,
            CandleLinear::Blocks(_) | CandleLinear::Exact(_) | CandleLinear::Bf16Blocks(_)
        ) && self.dtype == DType::F32
    }

    fn gather_rows(&self, w: &CandleLinear, ids: &[u32]) -> BResult<Tensor> {
        let (n, k, row) = w.packed_rows().ok_or_else(|| {
            err(candle_core::Error::Msg(
                "row gather needs packed blocks".into(),
            ))
        })?;
        let mut data = Vec::with_capacity(ids.len() * k);
        for &id in ids {
            if id as usize >= n {
                return Err(err(candle_core::Error::Msg(format!(
                    "token id {id} is outside the {n}-row table"
                ))));
            }
            data.extend(row(id as usize));
        }
        Tensor::from_vec(data, (1, ids.len(), k), &self.device).map_err(err)
    }

    fn draft_rows(&self, w: &CandleLinear, ids: &[u32]) -> BResult<Option<CandleLinear>> {
        self.rows_for_drafts(w, ids)
    }

    fn linear_from_tensor(&self, t: &Tensor) -> BResult<CandleLinear> {
        Ok(CandleLinear::Dense(t.clone()))
    }

    fn from_f32(&self, data: &[f32], shape: &[usize]) -> BResult<Tensor> {
        Tensor::from_slice(data, shape, &self.device)
            .and_then(|t| t.to_dtype(cdtype(self.dtype)))
            .map_err(err)
    }

    fn from_u32(&self, data: &[u32], shape: &[usize]) -> BResult<Tensor> {
        Tensor::from_slice(data, shape, &self.device).map_err(err)
    }

    fn zeros(&self, shape: &[usize]) -> BResult<Tensor> {
        Tensor::zeros(shape, cdtype(self.dtype), &self.device).map_err(err)
    }

    fn to_f32_vec(&self, t: &Tensor) -> BResult<Vec<f32>> {
        let _p = profile::span("to_host");
        t.to_dtype(CDType::F32)
            .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
            .map_err(err)
    }

    fn to_u32_vec(&self, t: &Tensor) -> BResult<Vec<u32>> {
        let _p = profile::span("to_host");
        t.to_dtype(CDType::U32)
            .and_then(|t| t.flatten_all()?.to_vec1::<u32>())
            .map_err(err)
    }

    fn eval(&self, _ts: &[&Tensor]) -> BResult<()> {
        // candle is eager; on CUDA a synchronize makes timings honest
        self.device.synchronize().map_err(err)
    }

    fn dims(&self, t: &Tensor) -> Vec<usize> {
        t.dims().to_vec()
    }

    fn to_dtype(&self, t: &Tensor, dtype: DType) -> BResult<Tensor> {
        let _p = profile::span("to_dtype");
        t.to_dtype(cdtype(dtype)).map_err(err)
    }

    fn matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        self.linear_matmul(x, w)
    }

    fn draft_matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        self.draft_linear_matmul(x, w)
    }

    fn embedding(&self, table: &Tensor, ids: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("embedding");
        // bounds-check on the host: an id past the table is an error, not garbage
        let host = ids
            .flatten_all()
            .and_then(|t| t.to_vec1::<u32>())
            .map_err(err)?;
        check_ids(table, &host)?;
        gather(table, ids)
    }

    fn embedding_below(&self, table: &Tensor, ids: &Tensor, bound: usize) -> BResult<Tensor> {
        let _p = profile::span("embedding");
        let vocab = table.dim(0).map_err(err)?;
        if bound > vocab {
            return Err(err(candle_core::Error::Msg(format!(
                "ids below {bound} may fall outside the table's {vocab} rows"
            ))));
        }
        gather(table, ids)
    }

    fn embedding_ids(&self, table: &Tensor, ids: &[u32], shape: &[usize]) -> BResult<Tensor> {
        let _p = profile::span("embedding");
        check_ids(table, ids)?;
        #[cfg(feature = "cuda")]
        if let Some(live) = self.live_step() {
            // a captured step reads its ids from the input buffer (checked on every replay)
            let dev_ids = live
                .ids
                .narrow(0, 0, ids.len())
                .and_then(|t| t.reshape(shape))
                .map_err(err)?;
            return gather(table, &dev_ids);
        }
        gather(table, &self.from_u32(ids, shape)?)
    }

    fn rms_norm(&self, x: &Tensor, w: &Tensor, eps: f32) -> BResult<Tensor> {
        let _p = profile::span("rms_norm");
        #[cfg(feature = "cuda")]
        if let Some(y) = self.cuda_rms_norm(x, None, w, eps) {
            return y;
        }
        let x = x.contiguous().map_err(err)?;
        if self.cpu_kernels() && x.dtype() == CDType::F32 && w.dtype() == CDType::F32 {
            let w = w.contiguous().map_err(err)?;
            return x
                .apply_op2_no_bwd(&w, &cpu_ops::RmsNorm { eps })
                .map_err(err);
        }
        candle_nn::ops::rms_norm(&x, w, eps).map_err(err)
    }

    fn add_rms_norm(
        &self,
        x: &Tensor,
        r: &Tensor,
        w: &Tensor,
        eps: f32,
    ) -> BResult<(Tensor, Tensor)> {
        #[cfg(feature = "cuda")]
        {
            let _p = profile::span("add_rms_norm");
            if let Some(sn) = self.cuda_rms_norm(x, Some(r), w, eps) {
                let sn = sn?;
                let part = |i| sn.get(i).map_err(err);
                return Ok((part(0)?, part(1)?));
            }
        }
        if self.cpu_kernels()
            && x.dims() == r.dims()
            && [x.dtype(), r.dtype(), w.dtype()] == [CDType::F32; 3]
        {
            let _p = profile::span("add_rms_norm");
            let contig = |t: &Tensor| t.contiguous().map_err(err);
            let (x, r, w) = (contig(x)?, contig(r)?, contig(w)?);
            let sn = x
                .apply_op3_no_bwd(&r, &w, &cpu_ops::AddRmsNorm { eps })
                .map_err(err)?;
            let part = |i| sn.get(i).map_err(err);
            return Ok((part(0)?, part(1)?));
        }
        let s = self.add(x, r)?;
        let n = self.rms_norm(&s, w, eps)?;
        Ok((s, n))
    }

    fn rope_prepare(&self, spec: &RopeSpec, max_positions: usize) -> BResult<CandleRope> {
        self.rope_tables(spec, max_positions)
    }

    fn rope(&self, x: &Tensor, rope: &CandleRope, start: usize) -> BResult<Tensor> {
        #[cfg(feature = "cuda")]
        self.not_capturable("a rotation at a host position")?;
        self.rotate(x, rope, start)
    }

    fn norm_rope(
        &self,
        y: Tensor,
        norm: Option<(&Tensor, f32)>,
        rope: &CandleRope,
        start: usize,
    ) -> BResult<Tensor> {
        #[cfg(feature = "cuda")]
        self.not_capturable("a rotation at a host position")?;
        #[cfg(feature = "cuda")]
        if let Some(out) = self.cuda_norm_rope(&y, norm, rope, start) {
            return out;
        }
        let y = match norm {
            Some((w, eps)) => self.rms_norm(&y, w, eps)?,
            None => y,
        };
        self.rope(&self.transpose(&y, 1, 2)?, rope, start)
    }

    fn qkv_rope_store(
        &self,
        heads: QkvHeads<'_, Tensor>,
        rope: &CandleRope,
        start: usize,
        cache: [&Tensor; 2],
        at: usize,
    ) -> Option<BResult<Tensor>> {
        #[cfg(feature = "cuda")]
        if let Some(out) = self.cuda_qkv_rope_store(&heads, rope, start, cache, at) {
            return Some(out);
        }
        let _ = (heads, rope, start, cache, at);
        None
    }

    fn attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: AttnMask,
        scale: f32,
    ) -> BResult<Tensor> {
        self.sdpa(q, k, v, mask, scale)
    }

    fn silu(&self, x: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("silu");
        x.silu().map_err(err)
    }

    fn swiglu(&self, gate: &Tensor, up: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("swiglu");
        if self.cpu_glu_fits(gate, up) {
            let glu = cpu_ops::Glu { gelu: false };
            return gate.apply_op2_no_bwd(up, &glu).map_err(err);
        }
        #[cfg(feature = "cuda")]
        if self.cuda_kernels()
            && gate.dtype() == up.dtype()
            && cuda_dtype(gate.dtype())
            && matches!(gate.stride().last(), Some(1 | 2))
            && up.stride().last() == gate.stride().last()
        {
            return gate.apply_op2_no_bwd(up, &cuda_ops::Swiglu).map_err(err);
        }
        gate.silu().and_then(|g| g.broadcast_mul(up)).map_err(err)
    }

    fn gelu_tanh(&self, x: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("gelu");
        x.gelu().map_err(err)
    }

    fn geglu(&self, gate: &Tensor, up: &Tensor) -> BResult<Tensor> {
        if self.cpu_glu_fits(gate, up) {
            let _p = profile::span("geglu");
            let glu = cpu_ops::Glu { gelu: true };
            return gate.apply_op2_no_bwd(up, &glu).map_err(err);
        }
        let g = self.gelu_tanh(gate)?;
        self.mul(&g, up)
    }

    fn sigmoid(&self, x: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("sigmoid");
        candle_nn::ops::sigmoid(x).map_err(err)
    }

    fn mul(&self, a: &Tensor, b: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("mul");
        a.broadcast_mul(b).map_err(err)
    }

    fn add(&self, a: &Tensor, b: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("add");
        a.broadcast_add(b).map_err(err)
    }

    fn scale(&self, x: &Tensor, s: f32) -> BResult<Tensor> {
        let _p = profile::span("scale");
        (x * s as f64).map_err(err)
    }

    fn softcap(&self, x: &Tensor, cap: f32) -> BResult<Tensor> {
        ((x / cap as f64)
            .and_then(|t| t.tanh())
            .and_then(|t| t * cap as f64))
        .map_err(err)
    }

    fn softmax_last(&self, x: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("softmax");
        candle_nn::ops::softmax_last_dim(&x.contiguous().map_err(err)?).map_err(err)
    }

    fn argmax_last(&self, x: &Tensor) -> BResult<Tensor> {
        let _p = profile::span("argmax");
        #[cfg(feature = "cuda")]
        if self.cuda_kernels() && cuda_dtype(x.dtype()) {
            return x
                .contiguous()
                .and_then(|x| x.apply_op1_no_bwd(&cuda_ops::ArgmaxRows))
                .map_err(err);
        }
        if self.cpu_device_argmax && !self.device.is_cuda() {
            if x.dtype() == CDType::F32 {
                let x = x.contiguous().map_err(err)?;
                return x.apply_op1_no_bwd(&cpu_ops::ArgmaxRows).map_err(err);
            }
            let dims = x.dims().to_vec();
            let n = *dims.last().unwrap_or(&1);
            let rows = x
                .to_dtype(CDType::F32)
                .and_then(|r| r.flatten_all())
                .and_then(|r| r.to_vec1::<f32>())
                .map_err(err)?;
            let ids: Vec<u32> = rows.chunks(n.max(1)).map(crate::sampling::argmax).collect();
            return Tensor::from_vec(ids, &dims[..dims.len() - 1], &self.device).map_err(err);
        }
        x.argmax(D::Minus1).map_err(err)
    }

    fn markov_greedy(
        &self,
        logits: &Tensor,
        w1: &Tensor,
        w2: &CandleLinear,
        pending: u32,
        n: usize,
    ) -> BResult<Option<Tensor>> {
        #[cfg(feature = "cuda")]
        if let Some(ids) = self.cuda_markov_greedy(logits, w1, w2, pending, n) {
            return ids.map(Some);
        }
        let _ = (logits, w1, w2, pending, n);
        Ok(None)
    }

    fn rows_batch_invariant(&self) -> bool {
        self.cpu_kernels() || self.cuda_kernels()
    }

    fn spec_row_cost(&self) -> f64 {
        // measured on the demo (SmolLM2-135M, 2-core Zen 4, exact packed f32): a round of a
        // trained drafter (its pass and the verify) costs 1.8-2.0 decode steps at 2 drafts and
        // 4.0-4.2 at 7 sampled drafts, about 1 + 0.35 (k + 1); on the H200 (Qwen3-8B shape) a
        // DFlash block of 16 costs 0.26 to draft and 1.13 to verify, 1 + 0.023 * 17
        if self.device.is_cuda() {
            0.023
        } else {
            0.35
        }
    }

    fn step_graph_rows(&self) -> usize {
        self.graph_rows()
    }

    fn run_step(
        &self,
        key: &super::StepKey,
        ids: &[u32],
        start: usize,
        step: &mut dyn FnMut() -> BResult<Vec<Tensor>>,
    ) -> BResult<Vec<Tensor>> {
        self.run_fixed_step(key, ids, start, step)
    }

    fn step_captures(&self) -> u64 {
        #[cfg(feature = "cuda")]
        if self.step_graphs {
            let s = self.step_graph_stats();
            return s.captured + s.failed;
        }
        0
    }

    fn device_argmax(&self) -> bool {
        // our argmax kernel (the host's tie rule) takes f32 and bf16 logits; candle's own
        // argmax, used for f16, is not held to that rule
        self.cpu_device_argmax && !self.device.is_cuda()
            || self.cuda_kernels() && matches!(self.dtype, DType::F32 | DType::BF16)
    }

    fn topk_last(&self, x: &Tensor, k: usize) -> BResult<(Tensor, Tensor)> {
        let _p = profile::span("topk");
        let idx = x
            .contiguous()
            .and_then(|x| x.arg_sort_last_dim(false))
            .and_then(|i| i.narrow(D::Minus1, 0, k))
            .and_then(|i| i.contiguous())
            .map_err(err)?;
        let vals = x
            .contiguous()
            .and_then(|x| x.gather(&idx, D::Minus1))
            .map_err(err)?;
        Ok((vals, idx))
    }

    fn concat(&self, ts: &[&Tensor], dim: usize) -> BResult<Tensor> {
        let _p = profile::span("concat");
        Tensor::cat(ts, dim).map_err(err)
    }

    fn narrow(&self, t: &Tensor, dim: usize, start: usize, len: usize) -> BResult<Tensor> {
        t.narrow(dim, start, len).map_err(err)
    }

    fn reshape(&self, t: &Tensor, shape: &[usize]) -> BResult<Tensor> {
        t.reshape(shape).map_err(err)
    }

    fn transpose(&self, t: &Tensor, d1: usize, d2: usize) -> BResult<Tensor> {
        t.transpose(d1, d2).map_err(err)
    }

    fn slice_update(
        &self,
        dst: &Tensor,
        src: &Tensor,
        dim: usize,
        offset: usize,
    ) -> BResult<Tensor> {
        let _p = profile::span("kv_write");
        #[cfg(feature = "cuda")]
        self.not_capturable("a cache write at a host position")?;
        #[cfg(feature = "cuda")]
        if self.cuda_kernels()
            && dim == 2
            && cuda_dtype(dst.dtype())
            && src.dtype() == dst.dtype()
            && cuda_ops::CacheWrite::fits(dst.layout(), src.layout(), offset)
        {
            let op = cuda_ops::CacheWrite { at: offset };
            dst.inplace_op2(src, &op).map_err(err)?;
            return Ok(dst.clone());
        }
        let src = src.contiguous().map_err(err)?;
        dst.slice_set(&src, dim, offset).map_err(err)?;
        Ok(dst.clone())
    }
}

/// An error naming the first id of `ids` past `table`'s rows.
fn check_ids(table: &Tensor, ids: &[u32]) -> BResult<()> {
    let vocab = table.dim(0).map_err(err)?;
    match ids.iter().find(|&&i| i as usize >= vocab) {
        Some(bad) => Err(err(candle_core::Error::Msg(format!(
            "token id {bad} is outside the vocabulary of {vocab}"
        )))),
        None => Ok(()),
    }
}

/// Rows `ids` (checked) of `table`, shaped `[ids.., H]`.
fn gather(table: &Tensor, ids: &Tensor) -> BResult<Tensor> {
    let mut dims = ids.dims().to_vec();
    dims.push(table.dim(1).map_err(err)?);
    table
        .index_select(&ids.flatten_all().map_err(err)?, 0)
        .and_then(|t| t.reshape(dims))
        .map_err(err)
}

/// The dtypes our CUDA kernels take.
#[cfg(feature = "cuda")]
fn cuda_dtype(d: CDType) -> bool {
    matches!(d, CDType::F32 | CDType::BF16)
}
