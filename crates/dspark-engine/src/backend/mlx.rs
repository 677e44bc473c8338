//! [`Backend`] on MLX through mlx-rs 0.33 (MLX 0.32.2): Metal on Apple Silicon, CPU elsewhere
//! (Linux builds use the PyPI `mlx-cpu` wheel through `scripts/with-mlx`).
//!
//! * **Lazy.** Every op only extends MLX's graph; work happens at the seam's evaluation points
//!   (`to_f32_vec`, `to_u32_vec`, `eval`), so a whole forward pass (or draft round) is one
//!   graph. The one exception is [`Backend::embedding`], which reads the ids on the host to
//!   reject ids outside the table (MLX's gather does not check bounds).
//! * **Native kernels.** MLX-quantized (mlx-community) weights stay packed and go through
//!   `quantized_matmul`; norms, rotary embeddings and attention use `mlx::fast`. GGUF
//!   block-quantized weights have no MLX kernel and are dequantized on load.
//! * **Threads.** mlx-rs marks `Array` as `Send` (it is a reference-counted handle), which is
//!   what the seam's `Tensor: Clone + Send` bound needs. MLX graphs are not meant to be
//!   shared across threads, so the engine's invariant applies: one worker thread owns every
//!   array of a model and runs every op on it; arrays only move between threads whole (e.g.
//!   a model built on one thread and handed to the worker), never concurrently.
//!   [`MlxBackend`] itself holds no MLX object, only plain settings.

use std::ffi::c_void;
use std::fmt::Display;

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::{ArrayIndex, ArrayIndexOp, TryIndexMutOp, TryIndexOp};
use mlx_rs::ops::{self};
use mlx_rs::{Array, Device, Dtype};

use super::{AttnMask, BResult, Backend, BackendError, DType, RopeSpec, RopeStyle};
use crate::weights::mlx_quant::MlxQuantized;
use crate::weights::HostTensor;

fn err(e: impl Display) -> BackendError {
    BackendError {
        backend: "mlx",
        message: e.to_string(),
    }
}

fn msg(m: impl Into<String>) -> BackendError {
    BackendError {
        backend: "mlx",
        message: m.into(),
    }
}

fn mdtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::Float32,
        DType::F16 => Dtype::Float16,
        DType::BF16 => Dtype::Bfloat16,
    }
}

fn shape_i32(shape: &[usize]) -> BResult<Vec<i32>> {
    shape
        .iter()
        .map(|&d| i32::try_from(d).map_err(|_| msg(format!("dimension {d} is too large for MLX"))))
        .collect()
}

/// Which MLX device the backend runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlxDevice {
    Cpu,
    /// Metal (Apple Silicon).
    Gpu,
}

/// The MLX backend: a device and the activation dtype. Creating one makes its device MLX's
/// process-wide default device.
#[derive(Clone, Debug)]
pub struct MlxBackend {
    device: MlxDevice,
    dtype: DType,
}

impl MlxBackend {
    /// MLX on the CPU, f32 activations.
    pub fn cpu() -> Self {
        Self::new(MlxDevice::Cpu, DType::F32)
    }

    /// MLX on the GPU (Metal), bf16 activations.
    pub fn gpu() -> Self {
        Self::new(MlxDevice::Gpu, DType::BF16)
    }

    /// The GPU on Apple Silicon, else the CPU.
    pub fn default_device() -> Self {
        if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            Self::gpu()
        } else {
            Self::cpu()
        }
    }

    fn new(device: MlxDevice, dtype: DType) -> Self {
        let b = MlxBackend { device, dtype };
        b.activate();
        b
    }

    /// Makes this backend's device MLX's default (ops run on the default device's stream).
    pub fn activate(&self) {
        match self.device {
            MlxDevice::Cpu => Device::set_default(&Device::cpu()),
            MlxDevice::Gpu => Device::set_default(&Device::gpu()),
        }
    }

    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    pub fn device(&self) -> MlxDevice {
        self.device
    }

    fn cast(&self, a: Array, dtype: DType) -> BResult<Array> {
        if a.dtype() == mdtype(dtype) {
            Ok(a)
        } else {
            a.as_dtype(mdtype(dtype)).map_err(err)
        }
    }

    /// A 0-d array of `v` in `dtype`, so binary ops keep the other operand's dtype.
    fn scalar(&self, v: f32, dtype: Dtype) -> BResult<Array> {
        Array::from_f32(v).as_dtype(dtype).map_err(err)
    }

    fn dense_raw(shape: &[usize], dtype: DType, bytes: &[u8]) -> BResult<Array> {
        let n: usize = shape.iter().product();
        if bytes.len() != n * dtype.size_in_bytes() {
            return Err(msg(format!(
                "{} bytes for shape {shape:?} of {dtype:?}",
                bytes.len()
            )));
        }
        let shape = shape_i32(shape)?;
        // SAFETY: `bytes` holds exactly `n` little-endian elements of `dtype` (checked above);
        // MLX copies them into its own buffer before returning.
        Ok(unsafe { Array::from_raw_data(bytes.as_ptr() as *const c_void, &shape, mdtype(dtype)) })
    }

    /// Packed codes, scales and biases of an MLX-quantized weight, as MLX arrays.
    fn quant_parts(&self, m: &MlxQuantized) -> BResult<(Array, Array, Array)> {
        m.validate().map_err(msg)?;
        let words = m.in_features * m.bits / 32;
        let w = Array::from_slice(&m.packed[..], &shape_i32(&[m.out_features, words])?);
        let gshape = [m.out_features, m.in_features / m.group_size];
        let scales = self.cast(
            Self::dense_raw(&gshape, m.scales.0, &m.scales.1)?,
            self.dtype,
        )?;
        let biases = self.cast(
            Self::dense_raw(&gshape, m.biases.0, &m.biases.1)?,
            self.dtype,
        )?;
        Ok((w, scales, biases))
    }

    fn bool_mask(mask: AttnMask, lq: usize, lk: usize) -> BResult<Option<Array>> {
        let allowed = |i: usize, j: usize| match mask {
            AttnMask::None => true,
            AttnMask::Causal { offset } => j <= offset + i,
            AttnMask::SlidingCausal { offset, window } => {
                let p = offset + i;
                j <= p && j + window > p
            }
        };
        let m: Vec<bool> = (0..lq)
            .flat_map(|i| (0..lk).map(move |j| allowed(i, j)))
            .collect();
        if m.iter().all(|&a| a) {
            return Ok(None);
        }
        Ok(Some(Array::from_slice(&m, &shape_i32(&[lq, lk])?)))
    }

    /// Index ops selecting `start..start + len` along `dim` of a rank-`ndim` array.
    fn range_ops(
        ndim: usize,
        dim: usize,
        start: usize,
        len: usize,
    ) -> BResult<Vec<ArrayIndexOp<'static>>> {
        if dim >= ndim {
            return Err(msg(format!("dimension {dim} out of range for rank {ndim}")));
        }
        let (s, e) = (start as i32, (start + len) as i32);
        Ok((0..ndim)
            .map(|d| {
                if d == dim {
                    (s..e).index_op()
                } else {
                    (..).index_op()
                }
            })
            .collect())
    }
}

/// A weight for `x @ w^T`.
pub enum MlxLinear {
    /// `[out, in]`.
    Dense(Array),
    /// MLX affine quantization, used as is by `quantized_matmul`.
    Quant {
        w: Array,
        scales: Array,
        biases: Array,
        group_size: i32,
        bits: i32,
    },
}

/// Frequencies for `mlx::fast::rope` (MLX takes periods, `1 / inv_freq`).
pub struct MlxRope {
    freqs: Array,
    dims: i32,
    traditional: bool,
    max: usize,
}

impl Backend for MlxBackend {
    type Tensor = Array;
    type Linear = MlxLinear;
    type Rope = MlxRope;

    fn name(&self) -> &'static str {
        "mlx"
    }

    fn device_label(&self) -> String {
        match self.device {
            MlxDevice::Cpu => "cpu".into(),
            MlxDevice::Gpu => "metal".into(),
        }
    }

    fn compute_dtype(&self) -> DType {
        self.dtype
    }

    fn tensor(&self, host: &HostTensor) -> BResult<Array> {
        let a = match host {
            HostTensor::Dense {
                shape,
                dtype,
                bytes,
            } => Self::dense_raw(shape, *dtype, bytes)?,
            HostTensor::Ggml(q) => {
                let v = q
                    .dequantize(&candle_core::Device::Cpu)
                    .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                    .map_err(err)?;
                Array::from_slice(&v, &shape_i32(q.shape().dims())?)
            }
            HostTensor::MlxQuant(m) => {
                let (w, scales, biases) = self.quant_parts(m)?;
                let gs = m.group_size as i32;
                ops::dequantize(&w, &scales, &biases, gs, m.bits as i32).map_err(err)?
            }
        };
        self.cast(a, self.dtype)
    }

    fn linear(&self, host: &HostTensor) -> BResult<MlxLinear> {
        match host {
            HostTensor::MlxQuant(m) => {
                let (w, scales, biases) = self.quant_parts(m)?;
                Ok(MlxLinear::Quant {
                    w,
                    scales,
                    biases,
                    group_size: m.group_size as i32,
                    bits: m.bits as i32,
                })
            }
            _ => self.tensor(host).map(MlxLinear::Dense),
        }
    }

    fn draft_rows(&self, w: &MlxLinear, ids: &[u32]) -> BResult<Option<MlxLinear>> {
        match w {
            MlxLinear::Dense(a) => {
                let rows = self.embedding_ids(a, ids, &[ids.len()])?;
                Ok(Some(MlxLinear::Dense(rows)))
            }
            MlxLinear::Quant { .. } => Ok(None),
        }
    }

    fn linear_from_tensor(&self, t: &Array) -> BResult<MlxLinear> {
        Ok(MlxLinear::Dense(t.clone()))
    }

    fn from_f32(&self, data: &[f32], shape: &[usize]) -> BResult<Array> {
        check_len(data.len(), shape)?;
        self.cast(Array::from_slice(data, &shape_i32(shape)?), self.dtype)
    }

    fn from_u32(&self, data: &[u32], shape: &[usize]) -> BResult<Array> {
        check_len(data.len(), shape)?;
        Ok(Array::from_slice(data, &shape_i32(shape)?))
    }

    fn zeros(&self, shape: &[usize]) -> BResult<Array> {
        ops::zeros_dtype(&shape_i32(shape)?, mdtype(self.dtype)).map_err(err)
    }

    fn to_f32_vec(&self, t: &Array) -> BResult<Vec<f32>> {
        let a = self
            .cast(t.clone(), DType::F32)?
            .contiguous()
            .map_err(err)?;
        a.eval().map_err(err)?;
        a.try_as_slice::<f32>().map(<[f32]>::to_vec).map_err(err)
    }

    fn to_u32_vec(&self, t: &Array) -> BResult<Vec<u32>> {
        let a = if t.dtype() == Dtype::Uint32 {
            t.clone()
        } else {
            t.as_dtype(Dtype::Uint32).map_err(err)?
        };
        let a = a.contiguous().map_err(err)?;
        a.eval().map_err(err)?;
        a.try_as_slice::<u32>().map(<[u32]>::to_vec).map_err(err)
    }

    fn eval(&self, ts: &[&Array]) -> BResult<()> {
        mlx_rs::transforms::eval(ts.iter().copied()).map_err(err)
    }

    fn dims(&self, t: &Array) -> Vec<usize> {
        t.shape().iter().map(|&d| d as usize).collect()
    }

    fn to_dtype(&self, t: &Array, dtype: DType) -> BResult<Array> {
        self.cast(t.clone(), dtype)
    }

    fn matmul(&self, x: &Array, w: &MlxLinear) -> BResult<Array> {
        match w {
            MlxLinear::Dense(w) => ops::matmul(x, w.transpose().map_err(err)?).map_err(err),
            MlxLinear::Quant {
                w,
                scales,
                biases,
                group_size,
                bits,
            } => ops::quantized_matmul(x, w, scales, biases, true, *group_size, *bits).map_err(err),
        }
    }

    fn embedding(&self, table: &Array, ids: &Array) -> BResult<Array> {
        let vocab = table.dim(0) as usize;
        let host = self.to_u32_vec(ids)?;
        if let Some(bad) = host.iter().find(|&&i| i as usize >= vocab) {
            return Err(msg(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let mut dims: Vec<i32> = ids.shape().to_vec();
        dims.push(table.dim(1));
        let flat = ids.reshape(&[-1]).map_err(err)?;
        table
            .take_axis(&flat, 0)
            .and_then(|t| t.reshape(&dims))
            .map_err(err)
    }

    fn rms_norm(&self, x: &Array, w: &Array, eps: f32) -> BResult<Array> {
        fast::rms_norm(x, Some(w), eps).map_err(err)
    }

    fn rope_prepare(&self, spec: &RopeSpec, max_positions: usize) -> BResult<MlxRope> {
        let periods: Vec<f32> = spec.inv_freq.iter().map(|&f| period_of(f)).collect();
        Ok(MlxRope {
            freqs: Array::from_slice(&periods, &shape_i32(&[periods.len()])?),
            dims: 2 * periods.len() as i32,
            traditional: spec.style == RopeStyle::Interleaved,
            max: max_positions,
        })
    }

    fn rope(&self, x: &Array, rope: &MlxRope, start: usize) -> BResult<Array> {
        let l = x.dim(-2) as usize;
        if start + l > rope.max {
            return Err(msg(format!(
                "position {} is past the RoPE table of {} positions",
                start + l,
                rope.max
            )));
        }
        fast::rope(
            x,
            rope.dims,
            rope.traditional,
            None::<f32>,
            1.0,
            start as i32,
            &rope.freqs,
        )
        .map_err(err)
    }

    fn attention(
        &self,
        q: &Array,
        k: &Array,
        v: &Array,
        mask: AttnMask,
        scale: f32,
    ) -> BResult<Array> {
        if q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 {
            return Err(msg(format!(
                "attention wants rank-4 q/k/v, got {:?} {:?}",
                q.shape(),
                k.shape()
            )));
        }
        let (hq, lq, hkv, lk) = (q.dim(1), q.dim(2) as usize, k.dim(1), k.dim(2) as usize);
        if hkv == 0 || hq % hkv != 0 {
            return Err(msg(format!("{hq} query heads vs {hkv} kv heads")));
        }
        // MLX's "causal" mode aligns the last query with the last key, which is our
        // `Causal { offset }` exactly when the keys end at the last query's position.
        let arr;
        let m = match mask {
            AttnMask::Causal { offset } if offset + lq == lk => {
                Some(ScaledDotProductAttentionMask::Causal)
            }
            _ => match Self::bool_mask(mask, lq, lk)? {
                Some(a) => {
                    arr = a;
                    Some(ScaledDotProductAttentionMask::Array(&arr))
                }
                None => None,
            },
        };
        fast::scaled_dot_product_attention(q, k, v, scale, m, None::<&Array>).map_err(err)
    }

    fn silu(&self, x: &Array) -> BResult<Array> {
        ops::multiply(x, ops::sigmoid(x).map_err(err)?).map_err(err)
    }

    fn gelu_tanh(&self, x: &Array) -> BResult<Array> {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        let dt = x.dtype();
        let c = |v: f32| self.scalar(v, dt);
        let x3 = ops::multiply(ops::multiply(x, x).map_err(err)?, x).map_err(err)?;
        let inner = ops::add(x, ops::multiply(&x3, c(0.044715)?).map_err(err)?).map_err(err)?;
        let inner = ops::multiply(&inner, c((2.0f64 / std::f64::consts::PI).sqrt() as f32)?)
            .map_err(err)?;
        let t = ops::add(ops::tanh(&inner).map_err(err)?, c(1.0)?).map_err(err)?;
        ops::multiply(ops::multiply(x, c(0.5)?).map_err(err)?, &t).map_err(err)
    }

    fn sigmoid(&self, x: &Array) -> BResult<Array> {
        ops::sigmoid(x).map_err(err)
    }

    fn mul(&self, a: &Array, b: &Array) -> BResult<Array> {
        ops::multiply(a, b).map_err(err)
    }

    fn add(&self, a: &Array, b: &Array) -> BResult<Array> {
        ops::add(a, b).map_err(err)
    }

    fn scale(&self, x: &Array, s: f32) -> BResult<Array> {
        ops::multiply(x, self.scalar(s, x.dtype())?).map_err(err)
    }

    fn softcap(&self, x: &Array, cap: f32) -> BResult<Array> {
        let dt = x.dtype();
        let t = ops::tanh(ops::divide(x, self.scalar(cap, dt)?).map_err(err)?).map_err(err)?;
        ops::multiply(&t, self.scalar(cap, dt)?).map_err(err)
    }

    fn softmax_last(&self, x: &Array) -> BResult<Array> {
        ops::softmax_axis(x, -1, true).map_err(err)
    }

    fn argmax_last(&self, x: &Array) -> BResult<Array> {
        let i = ops::indexing::argmax_axis(x, -1, false).map_err(err)?;
        self.as_u32(i)
    }

    fn topk_last(&self, x: &Array, k: usize) -> BResult<(Array, Array)> {
        let n = x.dim(-1) as usize;
        if k > n {
            return Err(msg(format!("top-{k} of {n} values")));
        }
        // a stable ascending sort of -x: descending values, lower index first on ties
        let order = ops::argsort_axis(ops::negative(x).map_err(err)?, -1).map_err(err)?;
        let idx = self.narrow(&order, x.ndim() - 1, 0, k)?;
        let vals = x.take_along_axis(&idx, -1).map_err(err)?;
        Ok((vals, self.as_u32(idx)?))
    }

    fn concat(&self, ts: &[&Array], dim: usize) -> BResult<Array> {
        ops::concatenate(ts, dim as i32).map_err(err)
    }

    fn narrow(&self, t: &Array, dim: usize, start: usize, len: usize) -> BResult<Array> {
        let n = t.shape().get(dim).copied().unwrap_or(0) as usize;
        if start + len > n {
            return Err(msg(format!(
                "narrow {start}..{} of dimension {dim} (size {n})",
                start + len
            )));
        }
        let idx = Self::range_ops(t.ndim(), dim, start, len)?;
        t.try_index(&idx[..]).map_err(err)
    }

    fn reshape(&self, t: &Array, shape: &[usize]) -> BResult<Array> {
        t.reshape(&shape_i32(shape)?).map_err(err)
    }

    fn transpose(&self, t: &Array, d1: usize, d2: usize) -> BResult<Array> {
        t.swap_axes(d1 as i32, d2 as i32).map_err(err)
    }

    fn slice_update(&self, dst: &Array, src: &Array, dim: usize, offset: usize) -> BResult<Array> {
        let len = src.shape().get(dim).copied().unwrap_or(0) as usize;
        let n = dst.shape().get(dim).copied().unwrap_or(0) as usize;
        if offset + len > n {
            return Err(msg(format!(
                "slice_update {offset}..{} of dimension {dim} (size {n})",
                offset + len
            )));
        }
        let idx = Self::range_ops(dst.ndim(), dim, offset, len)?;
        // functional update: `out` becomes a new array; `dst` keeps its old contents
        let mut out = dst.clone();
        out.try_index_mut(&idx[..], src).map_err(err)?;
        Ok(out)
    }
}

impl MlxBackend {
    fn as_u32(&self, a: Array) -> BResult<Array> {
        if a.dtype() == Dtype::Uint32 {
            Ok(a)
        } else {
            a.as_dtype(Dtype::Uint32).map_err(err)
        }
    }
}

/// A period `p` with `1 / p == inv_freq` in f32 (MLX inverts the periods it is given), so the
/// rotation frequencies are exactly the spec's, not off by a double rounding.
fn period_of(inv_freq: f32) -> f32 {
    let p = (1.0 / inv_freq as f64) as f32;
    let candidates = [
        p,
        f32::from_bits(p.to_bits() + 1),
        f32::from_bits(p.to_bits().saturating_sub(1)),
    ];
    candidates
        .into_iter()
        .find(|&c| 1.0 / c == inv_freq)
        .unwrap_or(p)
}

fn check_len(len: usize, shape: &[usize]) -> BResult<()> {
    let n: usize = shape.iter().product();
    if len != n {
        return Err(msg(format!("{len} values for shape {shape:?}")));
    }
    Ok(())
}

/// mlx-rs seeds its PRNG with the macOS-only `mach_approximate_time()`; elsewhere the symbol
/// is missing at link time, so provide it from the system clock (nanoseconds).
#[cfg(not(target_os = "macos"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
