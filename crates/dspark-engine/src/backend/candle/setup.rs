//! [`CandleBackend`]'s state and construction: the device, the compute dtype, the switches
//! of our kernels, and what loading made of each weight (the load report). The [`Backend`]
//! operations are in `mod.rs`.

use candle_core::{Device, Tensor};

#[cfg(feature = "cuda")]
use super::cuda_ops;
use super::{cdtype, err};
#[cfg(doc)]
use crate::backend::Backend;
use crate::backend::{AttnMask, BResult, DType};
use crate::weights::HostTensor;

#[derive(Clone, Debug)]
pub struct CandleBackend {
    pub(super) device: Device,
    pub(super) dtype: DType,
    /// Keep GGUF block-quantized weights quantized (CPU `QMatMul`) instead of dequantizing.
    pub(super) keep_quantized: bool,
    /// Our kernels (`backend/cpu/`, or `backend/cuda/` on a GPU) for decode matmuls and
    /// attention; `DSPARK_CPU_KERNELS=0` / `DSPARK_CUDA_KERNELS=0` turns them off (candle's own
    /// ops), for before/after comparisons in one binary.
    pub(super) own_kernels: bool,
    /// Take the device-argmax paths on the CPU too ([`CandleBackend::with_device_argmax`]).
    pub(super) cpu_device_argmax: bool,
    /// Fuse SwiGLU's gate and up weights off CUDA too ([`CandleBackend::with_fused_swiglu`]).
    pub(super) cpu_fused_swiglu: bool,
    /// Hold dequantized GGUF Q8_0/Q4_0/Q4_1/Q4_K weights packed and run them by the exact kernel
    /// (`backend/cpu/qexact.rs`: the dense f32 copy's bits) where the CPU has it;
    /// `DSPARK_EXACT_PACKED=0` keeps the dense copy ([`CandleBackend::with_exact_packed`]).
    pub(super) exact_packed: bool,
    /// Dense and dequantized matmul weights as bf16 tiles, activations rounded to bf16 per
    /// matmul (`--matmul bf16`; [`CandleBackend::with_bf16_matmul`]), where the CPU has
    /// AMX-BF16 or AVX-512 BF16.
    pub(super) bf16_matmul: bool,
    /// Drafters' heads over exactly packed weights run the exact kernel too, instead of the
    /// faster 8-bit-activation one ([`CandleBackend::with_exact_drafts`]; `DSPARK_EXACT_DRAFTS=1`).
    pub(super) exact_drafts: bool,
    /// What each loaded weight became (see `take_load_report`).
    pub(super) report: std::sync::Arc<std::sync::Mutex<crate::backend::load_report::LoadReport>>,
    /// The last attention mask built, with its key: every layer of one forward asks for the
    /// same one, so it is built and copied to the device once per forward, not once per layer.
    pub(super) last_mask: std::sync::Arc<std::sync::Mutex<Option<(MaskKey, Tensor)>>>,
    /// Short forwards run as fixed-shape steps ([`Backend::run_step`]): captured and replayed
    /// as CUDA graphs on a GPU (`DSPARK_CUDA_GRAPHS=1`; see `cuda::graphs_configured`), on
    /// the CPU only the step path itself, for tests ([`CandleBackend::with_step_graphs`]).
    pub(super) step_graphs: bool,
    /// Captured forward steps (CUDA graphs) and the capture in progress.
    #[cfg(feature = "cuda")]
    pub(super) graphs: std::sync::Arc<cuda_ops::StepGraphs>,
}

/// What an attention mask tensor is a function of: the mask, lq, lk and the query-head group.
type MaskKey = (AttnMask, usize, usize, usize);

fn own_kernels_from_env() -> bool {
    std::env::var("DSPARK_CPU_KERNELS").map_or(true, |v| v != "0")
}

/// candle asks the OS for the CPU count on every parallel op unless `RAYON_NUM_THREADS` is
/// set (a cgroup file read each time); pin it once per process.
fn pin_thread_count() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RAYON_NUM_THREADS").is_none() {
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        }
    });
}

impl CandleBackend {
    pub fn cpu() -> Self {
        pin_thread_count();
        CandleBackend {
            device: Device::Cpu,
            dtype: DType::F32,
            keep_quantized: false,
            own_kernels: own_kernels_from_env(),
            cpu_device_argmax: false,
            cpu_fused_swiglu: false,
            exact_packed: std::env::var("DSPARK_EXACT_PACKED").map_or(true, |v| v != "0"),
            exact_drafts: std::env::var("DSPARK_EXACT_DRAFTS").is_ok_and(|v| v == "1"),
            bf16_matmul: false,
            step_graphs: false,
            report: Default::default(),
            last_mask: Default::default(),
            #[cfg(feature = "cuda")]
            graphs: Default::default(),
        }
    }

    /// `cuda:N` with the `cuda` feature, else an error.
    pub fn cuda(ordinal: usize) -> BResult<Self> {
        let device = Device::new_cuda(ordinal).map_err(err)?;
        #[cfg(feature = "cuda")]
        if let Device::Cuda(d) = &device {
            cuda_ops::tune_device(d).map_err(err)?;
        }
        if crate::backend::profile::enabled() {
            let d = device.clone();
            crate::backend::profile::set_sync(Box::new(move || {
                let _ = d.synchronize();
            }));
        }
        Ok(CandleBackend {
            device,
            dtype: DType::BF16,
            keep_quantized: false,
            cpu_device_argmax: false,
            cpu_fused_swiglu: false,
            exact_packed: false,
            exact_drafts: false,
            bf16_matmul: false,
            own_kernels: cfg!(feature = "cuda")
                && std::env::var("DSPARK_CUDA_KERNELS").map_or(true, |v| v != "0"),
            step_graphs: Self::step_graphs_from_env().unwrap_or(false),
            report: Default::default(),
            last_mask: Default::default(),
            #[cfg(feature = "cuda")]
            graphs: Default::default(),
        })
    }

    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// On the CPU, report [`Backend::device_argmax`] and take every row's argmax in
    /// [`Backend::argmax_last`] by `sampling::argmax`'s rule: the greedy loops then run the
    /// code they run on a GPU (ids instead of rows), so CPU tests cover it.
    pub fn with_device_argmax(mut self, on: bool) -> Self {
        self.cpu_device_argmax = on;
        self
    }

    /// Load SwiGLU MLPs as one interleaved gate/up weight ([`Backend::swiglu_linear`]) on the
    /// CPU too, where [`Backend::swiglu_matmul`] takes its portable path: CPU tests then cover
    /// the loading and wiring that the CUDA GEMM's fused epilogue relies on.
    pub fn with_fused_swiglu(mut self, on: bool) -> Self {
        self.cpu_fused_swiglu = on;
        self
    }

    /// Whether dequantized GGUF Q8_0/Q4_0/Q4_1/Q4_K weights stay packed under the dense copy's
    /// arithmetic (on by default where the CPU runs it; off: the dense f32 copy).
    pub fn with_exact_packed(mut self, on: bool) -> Self {
        self.exact_packed = on;
        self
    }

    /// Whether a drafter's head over exactly packed weights ([`Backend::draft_matmul`]) runs
    /// the exact kernel (the target head's arithmetic, as a reference evaluator drafts) rather
    /// than the faster 8-bit-activation kernel (the default).
    pub fn with_exact_drafts(mut self, on: bool) -> Self {
        self.exact_drafts = on;
        self
    }

    /// Whether matmul weights load as bf16 tiles (`--matmul bf16`: activations rounded to
    /// bf16 for each matmul, products summed in f32) on CPUs with AMX-BF16 or AVX-512 BF16;
    /// elsewhere, and for weights kept quantized, nothing changes. The load report names the
    /// tiles.
    pub fn with_bf16_matmul(mut self, on: bool) -> Self {
        self.bf16_matmul = on;
        self
    }

    pub fn keep_quantized(mut self, keep: bool) -> Self {
        self.keep_quantized = keep;
        self
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `host` dense in the compute dtype on this device (not noted in the load report).
    pub(super) fn device_tensor(&self, host: &HostTensor) -> BResult<Tensor> {
        self.dense_f32_host(host)?
            .to_dtype(cdtype(self.dtype))
            .and_then(|t| t.to_device(&self.device))
            .map_err(err)
    }

    /// Notes what `host` became: `form` (empty: named from the host and this backend's dtype)
    /// and the bytes it holds.
    pub(super) fn record(&self, host: &HostTensor, form: &str, held: u64) {
        let (stored, src) = match host {
            HostTensor::Dense { dtype, bytes, .. } => (bytes.len() as u64, format!("{dtype:?}")),
            HostTensor::Ggml(q) => (q.storage_size_in_bytes() as u64, format!("{:?}", q.dtype())),
            HostTensor::MlxQuant(m) => (
                (m.packed.len() * 4 + m.scales.1.len() + m.biases.1.len()) as u64,
                format!("MLX {}-bit", m.bits),
            ),
        };
        let form = if !form.is_empty() {
            form.to_string()
        } else {
            let to = format!("{:?}", self.dtype);
            let quantized = matches!(host, HostTensor::MlxQuant(_))
                || matches!(host, HostTensor::Ggml(q) if !matches!(q.dtype(),
                    candle_core::quantized::GgmlDType::F32 | candle_core::quantized::GgmlDType::F16 | candle_core::quantized::GgmlDType::BF16));
            if quantized {
                format!("dequantized {src} -> {to}")
            } else if src == to {
                format!("dense {to}")
            } else {
                format!("{src} -> {to}")
            }
        };
        if let Ok(mut r) = self.report.lock() {
            r.add(form, stored, held);
        }
    }

    /// Our CPU kernels apply (CPU device, f32 compute, not turned off).
    pub(super) fn cpu_kernels(&self) -> bool {
        self.own_kernels && self.device.is_cpu() && self.dtype == DType::F32
    }

    /// Whether the CPU gated-activation kernel (`cpu::glu`) takes `gate` and `up`: our CPU
    /// kernels on, f32 views of one shape with a contiguous last axis.
    pub(super) fn cpu_glu_fits(&self, gate: &Tensor, up: &Tensor) -> bool {
        let inner = |t: &Tensor| t.stride().last() == Some(&1) || t.dims().last() == Some(&1);
        self.cpu_kernels()
            && gate.dtype() == candle_core::DType::F32
            && up.dtype() == candle_core::DType::F32
            && gate.dims() == up.dims()
            && inner(gate)
            && inner(up)
    }

    /// Our CUDA kernels apply (CUDA device, built with them, not turned off).
    pub(super) fn cuda_kernels(&self) -> bool {
        self.own_kernels && self.device.is_cuda()
    }

    pub(super) fn dense_f32_host(&self, host: &HostTensor) -> BResult<Tensor> {
        match host {
            HostTensor::Dense {
                shape,
                dtype,
                bytes,
            } => Tensor::from_raw_buffer(bytes, cdtype(*dtype), shape, &Device::Cpu).map_err(err),
            HostTensor::Ggml(q) => q.dequantize(&Device::Cpu).map_err(err),
            HostTensor::MlxQuant(m) => {
                let v = m.dequantize();
                Tensor::from_vec(v, (m.out_features, m.in_features), &Device::Cpu).map_err(err)
            }
        }
    }
}
