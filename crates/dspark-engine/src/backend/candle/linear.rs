//! Matmul weights on candle: dense (f32, or bf16 / f16 kept under f32 compute), GGUF blocks repacked
//! and run by our kernels (Q8_0/Q4_0/Q4_1/Q4_K/Q6_K), other K-quants through candle's
//! `QMatMul`, MLX affine 4/8-bit run packed; and the matmul that dispatches on the form (GEMV
//! for few rows, GEMM for prefill).

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{DType as CDType, Device, Module, Tensor};

use super::{err, CandleBackend};
use crate::backend::cpu::affine::{self, Affine, OwnedParams};
use crate::backend::cpu::qpack::{QFormat, QPacked};
use crate::backend::cpu::{bf16_rebuild, bf16_tiles, gemv, ops as cpu_ops, qexact, qgemv, qpanel};
use crate::backend::{profile, BResult, Backend, DType};
use crate::weights::HostTensor;

/// Our kernels run Q8_0, Q4_0, Q4_1, Q4_K and Q6_K (`backend/cpu/qgemv.rs`); candle has SIMD
/// kernels for the other K-quants but only scalar code for Q5_0/Q5_1: re-quantize those to Q8_0
/// (near-lossless from 5 bits, and still ~4x smaller than f32).
fn fast_cpu_format(
    q: &Arc<candle_core::quantized::QTensor>,
) -> BResult<Arc<candle_core::quantized::QTensor>> {
    match q.dtype() {
        GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
            let dense = q.dequantize(&Device::Cpu).map_err(err)?;
            candle_core::quantized::QTensor::quantize(&dense, GgmlDType::Q8_0)
                .map(Arc::new)
                .map_err(err)
        }
        _ => Ok(Arc::clone(q)),
    }
}

pub enum CandleLinear {
    Dense(Tensor),
    /// GGUF formats without a kernel of ours (Q2_K, Q3_K, Q5_K, Q8_K): candle's quantized matmul.
    Quant(QMatMul),
    /// GGUF blocks repacked at load (`backend/cpu/qpack.rs`), run by `backend/cpu/qgemv.rs`.
    Blocks(Arc<QPacked>),
    /// GGUF blocks held packed for a dequantized model (Q8_0/Q4_0/Q4_1/Q4_K), run by
    /// `backend/cpu/qexact.rs` with the
    /// bits of the dense f32 copy (at the quantized file's memory traffic).
    Exact(Arc<QPacked>),
    /// bf16 weights in tiles (`--matmul bf16`), run by `backend/cpu/bf16_tiles.rs` (AMX, or
    /// AVX-512 BF16 dot products): the activations rounded to bf16, products summed in f32.
    Bf16Tiles(Arc<bf16_tiles::Bf16Tiles>),
    /// GGUF blocks held packed under `--matmul bf16` (`backend/cpu/bf16_rebuild.rs`), rebuilt
    /// into those tiles for each call: the bits of the dequantized weights as bf16 tiles.
    Bf16Blocks(Arc<bf16_rebuild::QTiles>),
    /// MLX affine 4/8-bit codes as stored, run by `backend/cpu/affine.rs` (f32 activations).
    Affine {
        codes: Vec<u8>,
        bits: usize,
        group: usize,
        scales: OwnedParams,
        biases: OwnedParams,
        out: usize,
    },
}

/// One row's f32 values of a weight, by row index.
pub(super) type RowFn<'a> = Box<dyn Fn(usize) -> Vec<f32> + 'a>;

impl CandleLinear {
    /// `(rows, row length, one row's values)` of a packed form (GGUF blocks, bf16 tiles): each
    /// row exactly as the dense table would hold it.
    pub(super) fn packed_rows(&self) -> Option<(usize, usize, RowFn<'_>)> {
        match self {
            CandleLinear::Blocks(p) | CandleLinear::Exact(p) => {
                Some((p.n, p.k, Box::new(|j| p.dequantize_row(j))))
            }
            CandleLinear::Bf16Blocks(t) => Some((t.n, t.k, Box::new(|j| t.dequantize_row(j)))),
            CandleLinear::Bf16Tiles(t) => Some((t.n, t.k, Box::new(|j| t.row(j)))),
            _ => None,
        }
    }
}

fn owned_params(dtype: DType, bytes: &[u8]) -> OwnedParams {
    match dtype {
        DType::F32 => OwnedParams::F32(crate::weights::dense_to_f32(dtype, bytes)),
        DType::F16 => OwnedParams::F16(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        DType::BF16 => OwnedParams::Bf16(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
    }
}

/// A CPU weight whose data starts on a 64-byte line (same values, same shape): the GEMV
/// kernels' vector loads then never straddle two cache lines (every row of a `[n, k]` weight
/// with `k` a multiple of 16 starts on a line too). The global allocator only promises 16
/// bytes for large blocks, so the data is copied once, at load, into a buffer with a few
/// elements of slack in front and viewed from the first aligned one.
fn aligned(t: Tensor) -> BResult<Tensor> {
    /// `src` copied after enough default elements that it starts on a line, and their count;
    /// `None` when `src` already does.
    fn realign<T: Copy + Default>(src: &[T]) -> Option<(Vec<T>, usize)> {
        if (src.as_ptr() as usize).is_multiple_of(64) {
            return None;
        }
        let size = std::mem::size_of::<T>();
        let mut v: Vec<T> = Vec::with_capacity(src.len() + 64 / size);
        let pad = (64 - v.as_ptr() as usize % 64) % 64 / size;
        v.resize(pad, T::default());
        v.extend_from_slice(src);
        Some((v, pad))
    }
    if !t.device().is_cpu() || !t.is_contiguous() {
        return Ok(t);
    }
    let (dims, n) = (t.dims().to_vec(), t.elem_count());
    let copied = {
        let (s, l) = t.storage_and_layout();
        let o = l.start_offset();
        match &*s {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => realign(&v[o..o + n])
                .map(|(v, pad)| (Tensor::from_vec(v, pad + n, &Device::Cpu), pad)),
            candle_core::Storage::Cpu(candle_core::CpuStorage::BF16(v)) => realign(&v[o..o + n])
                .map(|(v, pad)| (Tensor::from_vec(v, pad + n, &Device::Cpu), pad)),
            candle_core::Storage::Cpu(candle_core::CpuStorage::F16(v)) => realign(&v[o..o + n])
                .map(|(v, pad)| (Tensor::from_vec(v, pad + n, &Device::Cpu), pad)),
            _ => None,
        }
    };
    match copied {
        None => Ok(t),
        Some((flat, pad)) => flat
            .and_then(|f| f.narrow(0, pad, n))
            .and_then(|f| f.reshape(dims))
            .map_err(err),
    }
}

/// Whether `q` holds GGUF blocks (anything but plain f32 / f16 / bf16).
fn block_quantized(q: &candle_core::quantized::QTensor) -> bool {
    !matches!(q.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

fn our_block_format(d: GgmlDType) -> Option<QFormat> {
    match d {
        GgmlDType::Q8_0 => Some(QFormat::Q8_0),
        GgmlDType::Q4_0 => Some(QFormat::Q4_0),
        GgmlDType::Q4_1 => Some(QFormat::Q4_1),
        GgmlDType::Q4K => Some(QFormat::Q4K),
        GgmlDType::Q6K => Some(QFormat::Q6K),
        _ => None,
    }
}

/// `q`'s blocks repacked for our kernels by `pack` (`QPacked::from_gguf` for the exact kernel,
/// `qgemv::pack` for the 8-bit-activation kernels, which picks their layout,
/// `QTiles::from_gguf` for the bf16 tiles).
fn packed<T>(
    q: &candle_core::quantized::QTensor,
    fmt: QFormat,
    pack: fn(QFormat, &[u8], usize, usize) -> Result<T, String>,
) -> BResult<Arc<T>> {
    let (n, k) = q.shape().dims2().map_err(err)?;
    let bytes = q.data().map_err(err)?;
    pack(fmt, &bytes, n, k)
        .map(Arc::new)
        .map_err(|e| err(candle_core::Error::Msg(e)))
}

impl CandleBackend {
    /// A matmul weight in the best form this backend can run (see [`CandleLinear`]), noted in
    /// the load report.
    pub(super) fn load_linear(&self, host: &HostTensor) -> BResult<CandleLinear> {
        let w = self.pick_linear(host)?;
        let (form, held) = match &w {
            CandleLinear::Blocks(p) => {
                let tiles = match (p.panels, qpanel::amx_available()) {
                    (true, true) => " in panels (+ AMX tiles)",
                    (true, false) => " in panels",
                    _ => "",
                };
                (format!("packed {:?}{tiles}", p.fmt), p.bytes() as u64)
            }
            CandleLinear::Exact(p) => (format!("packed {:?}, exact F32", p.fmt), p.bytes() as u64),
            CandleLinear::Bf16Tiles(t) => {
                (format!("BF16 {}", bf16_tiles::unit()), t.bytes() as u64)
            }
            CandleLinear::Bf16Blocks(t) => (
                format!("packed {:?}, BF16 {}", t.fmt, bf16_tiles::unit()),
                t.bytes() as u64,
            ),
            CandleLinear::Quant(_) => match host {
                HostTensor::Ggml(q) => (
                    format!("candle {:?}", q.dtype()),
                    q.storage_size_in_bytes() as u64,
                ),
                _ => (String::new(), 0),
            },
            CandleLinear::Affine {
                codes,
                bits,
                scales,
                biases,
                ..
            } => (
                format!("packed MLX {bits}-bit"),
                (codes.len() + scales.nbytes() + biases.nbytes()) as u64,
            ),
            CandleLinear::Dense(t) => (
                String::new(),
                (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            ),
        };
        self.record(host, &form, held);
        Ok(w)
    }

    fn pick_linear(&self, host: &HostTensor) -> BResult<CandleLinear> {
        if let Some(t) = self.bf16_tiles(host)? {
            return Ok(t);
        }
        if let HostTensor::Ggml(q) = host {
            let quantized = block_quantized(q);
            if self.keep_quantized && quantized && self.device.is_cpu() && self.dtype == DType::F32
            {
                let q = fast_cpu_format(q)?;
                let ours = our_block_format(q.dtype()).filter(|_| self.cpu_kernels());
                if let Some(fmt) = ours {
                    return packed(&q, fmt, qgemv::pack).map(CandleLinear::Blocks);
                }
                return QMatMul::from_arc(q).map(CandleLinear::Quant).map_err(err);
            }
            // dequantized: Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K stay packed where the exact kernel
            // runs (the dense copy's bits, a fifth to an eighth of its bytes)
            let exact = qexact::exact_format(q.dtype()).filter(|_| {
                self.exact_packed && quantized && self.cpu_kernels() && qexact::available()
            });
            if let Some(fmt) = exact {
                return packed(q, fmt, QPacked::from_gguf).map(CandleLinear::Exact);
            }
        }
        // MLX affine 4/8-bit weights stay packed on the CPU (f32 activations, so the results
        // are the dequantized matmul's up to f32 rounding)
        if let HostTensor::MlxQuant(m) = host {
            if self.cpu_kernels() && affine::supported(m.bits, m.group_size, m.in_features) {
                m.validate().map_err(|e| err(candle_core::Error::Msg(e)))?;
                return Ok(CandleLinear::Affine {
                    codes: m.packed.iter().flat_map(|w| w.to_le_bytes()).collect(),
                    bits: m.bits,
                    group: m.group_size,
                    scales: owned_params(m.scales.0, &m.scales.1),
                    biases: owned_params(m.biases.0, &m.biases.1),
                    out: m.out_features,
                });
            }
        }
        // bf16 and f16 weights under f32 compute on the CPU stay as stored (half the memory and
        // bandwidth): the GEMV widens them in registers, exactly (both convert to f32 losslessly),
        // so the products have the bits of an f32 copy's. The trained drafters are f16.
        let half = matches!(
            host,
            HostTensor::Dense {
                dtype: DType::BF16 | DType::F16,
                ..
            }
        );
        if !self.cpu_kernels() {
            return self.device_tensor(host).map(CandleLinear::Dense);
        }
        let t = if half {
            self.dense_f32_host(host)?
        } else {
            self.device_tensor(host)?
        };
        aligned(t).map(CandleLinear::Dense)
    }

    /// `host` as bf16 tiles where `--matmul bf16` asked for them and this CPU runs them
    /// (weights kept quantized by `--keep-quantized` stay so).
    fn bf16_tiles(&self, host: &HostTensor) -> BResult<Option<CandleLinear>> {
        let kept = matches!(host, HostTensor::Ggml(q) if self.keep_quantized && block_quantized(q));
        if !(self.bf16_matmul
            && !kept
            && self.device.is_cpu()
            && self.dtype == DType::F32
            && self.cpu_kernels()
            && bf16_tiles::available())
        {
            return Ok(None);
        }
        // Q8_0/Q4_0/Q4_1/Q4_K stay packed, rebuilt into the tiles for each call
        if let HostTensor::Ggml(q) = host {
            let fmt = our_block_format(q.dtype()).filter(|f| bf16_rebuild::takes(*f));
            if let Some(fmt) = fmt {
                let t = packed(q, fmt, bf16_rebuild::QTiles::from_gguf)?;
                return Ok(Some(CandleLinear::Bf16Blocks(t)));
            }
        }
        let t = self.dense_f32_host(host)?;
        let (n, k) = t.dims2().map_err(err)?;
        let tiles = match t.dtype() {
            CDType::BF16 => {
                let v = t.flatten_all().and_then(|v| v.to_vec1::<half::bf16>());
                bf16_tiles::Bf16Tiles::from_bf16(&v.map_err(err)?, n, k)
            }
            _ => {
                let v = t
                    .to_dtype(CDType::F32)
                    .and_then(|v| v.flatten_all())
                    .and_then(|v| v.to_vec1::<f32>());
                bf16_tiles::Bf16Tiles::from_f32(&v.map_err(err)?, n, k)
            }
        };
        Ok(Some(CandleLinear::Bf16Tiles(Arc::new(tiles))))
    }

    /// `x[.., in] @ w^T`.
    /// [`Backend::swiglu_linear`]: gate and up rows interleaved into one dense weight, on CUDA
    /// with our kernels and bf16 compute (`DSPARK_CUDA_GLU=0`: not, for side-by-side runs), or
    /// where a test asked for it ([`CandleBackend::with_fused_swiglu`]).
    pub(super) fn glu_linear(
        &self,
        gate: &HostTensor,
        up: &HostTensor,
    ) -> Option<BResult<CandleLinear>> {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let env = *ON.get_or_init(|| std::env::var("DSPARK_CUDA_GLU").map_or(true, |v| v != "0"));
        let cuda = self.cuda_kernels() && self.dtype == DType::BF16 && env;
        let cpu = self.cpu_fused_swiglu && !self.device.is_cuda();
        if !(cuda || cpu) {
            return None;
        }
        let host = HostTensor::interleave_rows(gate, up)?;
        Some(self.load_linear(&host).and_then(|w| match w {
            CandleLinear::Dense(_) => Ok(w),
            _ => Err(err(candle_core::Error::Msg(
                "the fused gate/up weight did not load dense".into(),
            ))),
        }))
    }

    /// [`Backend::swiglu_matmul`]: on CUDA, for the few rows of decode and verify, our GEMM
    /// with the SwiGLU epilogue (the bits of the plain GEMM and `swiglu`); elsewhere the plain
    /// product, its gate and up columns taken apart, and [`Backend::swiglu`].
    pub(super) fn glu_matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        let CandleLinear::Dense(wt) = w else {
            return Err(err(candle_core::Error::Msg(
                "a fused gate/up weight is dense".into(),
            )));
        };
        let dims = x.dims().to_vec();
        let rows: usize = dims[..dims.len().saturating_sub(1)].iter().product();
        #[cfg(feature = "cuda")]
        if self.cuda_kernels()
            && rows <= crate::backend::cuda::ROWS_MAX
            && x.dtype() == CDType::BF16
            && wt.dtype() == CDType::BF16
        {
            let _p = profile::span("matmul.swiglu");
            return rows_gemm(x, wt, true);
        }
        let _ = (rows, wt);
        let y = self.linear_matmul(x, w)?;
        let mut pairs = y.dims().to_vec();
        let last = pairs.len() - 1;
        pairs[last] /= 2;
        pairs.push(2);
        let y = y.reshape(pairs).map_err(err)?;
        // on CUDA, `swiglu` reads the two halves in place (element stride 2)
        let half = |i: usize| {
            y.narrow(last + 1, i, 1)
                .and_then(|t| t.squeeze(last + 1))
                .and_then(|t| match self.device.is_cuda() {
                    true => Ok(t),
                    false => t.contiguous(),
                })
                .map_err(err)
        };
        self.swiglu(&half(0)?, &half(1)?)
    }

    /// A drafter's head over weights held packed for exact f32 arithmetic: the same packed
    /// blocks through the 8-bit-activation kernel (`qgemv.rs`), which reads them at the same
    /// traffic with a fraction of the exact kernel's instructions. Drafts are only proposals
    /// (the target verifies each with its exact head), so greedy output and sampled
    /// distributions are unchanged; a draft may differ from the exact head's where two logits
    /// nearly tie. [`CandleBackend::with_exact_drafts`] keeps drafting on the exact kernel.
    pub(super) fn draft_linear_matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        match w {
            CandleLinear::Exact(p) if x.dtype() == CDType::F32 && !self.exact_drafts => {
                let _p = profile::span("matmul.draft-blocks");
                on_f32(x, &cpu_ops::QGemv { w: p, exact: false })
            }
            _ => self.linear_matmul(x, w),
        }
    }

    pub(super) fn linear_matmul(&self, x: &Tensor, w: &CandleLinear) -> BResult<Tensor> {
        let _p = profile::span(match w {
            CandleLinear::Dense(_) => "matmul.dense",
            CandleLinear::Quant(_) => "matmul.candle-quant",
            CandleLinear::Blocks(_) => "matmul.blocks",
            CandleLinear::Exact(_) => "matmul.exact",
            CandleLinear::Bf16Tiles(_) => "matmul.bf16-tiles",
            CandleLinear::Bf16Blocks(_) => "matmul.bf16-blocks",
            CandleLinear::Affine { .. } => "matmul.affine",
        });
        match w {
            CandleLinear::Affine {
                codes,
                bits,
                group,
                scales,
                biases,
                out,
            } => {
                let op = cpu_ops::AffineGemv {
                    w: Affine {
                        codes,
                        bits: *bits,
                        group: *group,
                        scales: scales.view(),
                        biases: biases.view(),
                    },
                    n: *out,
                };
                on_f32(x, &op)
            }
            CandleLinear::Blocks(w) => on_f32(x, &cpu_ops::QGemv { w, exact: false }),
            CandleLinear::Bf16Tiles(w) => on_f32(x, &cpu_ops::Bf16Gemm { w: &**w }),
            CandleLinear::Bf16Blocks(w) => on_f32(x, &cpu_ops::Bf16Gemm { w: &**w }),
            CandleLinear::Exact(w) => {
                let rows = x.elem_count() / w.k.max(1);
                if x.dtype() == CDType::F32 && !gemv::takes_rows(rows) {
                    // a prefill chunk on a CPU whose tiles do not take it: the dense copy's
                    // blocked GEMM, on the same f32 weights rebuilt for this call
                    let dense = Tensor::from_vec(qexact::dequantize(w), (w.n, w.k), x.device())
                        .map_err(err)?;
                    return gemm(x, &dense);
                }
                on_f32(x, &cpu_ops::QGemv { w, exact: true })
            }
            CandleLinear::Quant(q) => {
                let xin = x.to_dtype(CDType::F32).map_err(err)?;
                q.forward(&xin)
                    .and_then(|y| y.to_dtype(x.dtype()))
                    .map_err(err)
            }
            CandleLinear::Dense(w) => {
                let dims = x.dims();
                if dims.is_empty() {
                    return Err(err(candle_core::Error::Msg("matmul on a scalar".into())));
                }
                let rows: usize = dims[..dims.len() - 1].iter().product();
                let cpu_kernel = self.cpu_kernels()
                    && x.dtype() == CDType::F32
                    && matches!(w.dtype(), CDType::F32 | CDType::BF16 | CDType::F16);
                #[cfg(feature = "cuda")]
                if self.cuda_kernels()
                    && rows <= crate::backend::cuda::ROWS_MAX
                    && x.dtype() == w.dtype()
                    && matches!(w.dtype(), CDType::F32 | CDType::BF16)
                {
                    return rows_gemm(x, w, false);
                }
                if cpu_kernel && gemv::takes_rows(rows) {
                    return x
                        .contiguous()
                        .and_then(|x| x.apply_op2_no_bwd(w, &cpu_ops::Gemv))
                        .map_err(err);
                }
                gemm(x, w)
            }
        }
    }
}

/// `x[.., k] · w[n, k]ᵀ` by candle's blocked GEMM (prefill without AVX-512; bf16 and f16
/// weights widened for the call).
fn gemm(x: &Tensor, w: &Tensor) -> BResult<Tensor> {
    let dims = x.dims().to_vec();
    let k = *dims
        .last()
        .ok_or_else(|| err(candle_core::Error::Msg("matmul on a scalar".into())))?;
    let rows: usize = dims[..dims.len() - 1].iter().product();
    let w = if w.dtype() != x.dtype() {
        w.to_dtype(x.dtype()).map_err(err)?
    } else {
        w.clone()
    };
    let out = w.dim(0).map_err(err)?;
    let y = x
        .reshape((rows, k))
        .and_then(|x2| x2.matmul(&w.t()?))
        .map_err(err)?;
    let mut od = dims;
    *od.last_mut().unwrap() = out;
    y.reshape(od).map_err(err)
}

/// Runs a custom op of ours on `x` as contiguous f32, giving the result in `x`'s dtype.
fn on_f32(x: &Tensor, op: &impl candle_core::CustomOp1) -> BResult<Tensor> {
    x.to_dtype(CDType::F32)
        .and_then(|x| x.contiguous())
        .and_then(|x| x.apply_op1_no_bwd(op))
        .and_then(|y| y.to_dtype(x.dtype()))
        .map_err(err)
}

/// Our few-row CUDA GEMM (`RowsGemm`, with the SwiGLU epilogue when `glu`), `x` rows at a unit
/// inner stride (copied contiguous otherwise).
#[cfg(feature = "cuda")]
fn rows_gemm(x: &Tensor, w: &Tensor, glu: bool) -> BResult<Tensor> {
    let x = if x.stride().last() == Some(&1) {
        x.clone()
    } else {
        x.contiguous().map_err(err)?
    };
    x.apply_op2_no_bwd(w, &crate::backend::cuda::RowsGemm { glu })
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever offset the data starts at, the weight comes back on a 64-byte line with the
    /// same shape and values.
    #[test]
    fn aligned_weights_start_on_a_line_with_the_same_values() {
        let vals: Vec<f32> = (0..4 * 48 + 5).map(|i| i as f32 * 0.5 - 7.0).collect();
        for skip in 0..5 {
            let t = Tensor::from_vec(vals.clone(), vals.len(), &Device::Cpu)
                .and_then(|t| t.narrow(0, skip, 4 * 48))
                .and_then(|t| t.reshape((4, 48)))
                .unwrap();
            let a = aligned(t).unwrap();
            assert_eq!(a.dims(), &[4, 48]);
            let (s, l) = a.storage_and_layout();
            let candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) = &*s else {
                panic!("not f32 on the cpu");
            };
            assert_eq!(
                (v[l.start_offset()..].as_ptr() as usize) % 64,
                0,
                "skip {skip}"
            );
            drop(s);
            let got: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(got, vals[skip..skip + 4 * 48]);
        }
    }
}
