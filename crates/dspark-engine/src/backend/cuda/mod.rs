//! Our CUDA kernels (`kernels.cu`, compiled to PTX by `build.rs`) as candle custom ops, for the
//! candle backend on `cuda:N`. Every one is batch-invariant: a row's result does not depend on
//! how many rows the call carries, so verification rows reproduce decode steps bit for bit.
//! - [`RowsGemm`]: `x · wᵀ` for up to [`ROWS_MAX`] rows (bf16 tensor cores, f32 CUDA cores);
//! - [`CacheAttention`]: attention reading the KV cache views in place (no copies), fixed
//!   256-key splits; its output is laid out `[b, l, h, d]` so the layer's transpose is free;
//! - [`ArgmaxRows`]: first index of the largest value per row, on the device;
//! - [`Swiglu`]: `silu(gate) · up` in one pass over strided halves.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda::{CudaDType, WrapErr};
use candle_core::{
    CpuStorage, CudaDevice, CudaStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result,
    Shape,
};
use half::bf16;

use crate::backend::AttnMask;

/// The kernels' PTX (empty when built with `DSPARK_PTX_STUB`, the type-check mode).
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/dspark_kernels.ptx"));
const MODULE: &str = "dspark_kernels";
/// Rows [`RowsGemm`] takes in one call (the verify block of DFlash b16 is 16).
pub const ROWS_MAX: usize = 16;
const SPLIT: usize = 128;

fn msg(m: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(m.to_string())
}

fn cpu_only(name: &str) -> Result<(CpuStorage, Shape)> {
    Err(msg(format!("{name} runs on CUDA only")))
}

/// Loads kernel `$name` of our module on `$dev` (an error in a build without kernels).
macro_rules! func {
    ($dev:expr, $name:expr) => {{
        if PTX.is_empty() {
            Err(msg(
                "this build has no dspark CUDA kernels (built with DSPARK_PTX_STUB)",
            ))
        } else {
            $dev.get_or_load_custom_func($name, MODULE, PTX)
        }
    }};
}

/// Host-side settings for a device candle drives on one stream, made before any tensor exists:
/// - per-buffer event tracking off: candle runs every op, cuBLAS call and copy on its one
///   stream, so stream order alone keeps reads, writes and frees apart, while the events cost
///   two creations and destructions per allocation and records per launch;
/// - the default memory pool keeps what it has: with the release threshold at 0 (CUDA's
///   default) every synchronization (each step's copy of ids to the host) hands freed memory
///   back to the OS and the next step maps it again, which showed as system time on the host.
pub fn tune_device(dev: &CudaDevice) -> Result<()> {
    use candle_core::cuda::cudarc::driver::sys;
    // SAFETY: no tensor of this device exists yet; see above for why one stream needs no events.
    unsafe { dev.disable_event_tracking() };
    let cu_dev = dev.cuda_stream().context().cu_device();
    // SAFETY: plain driver calls on a valid device handle with live out-pointers.
    unsafe {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let r = sys::cuDeviceGetDefaultMemPool(&mut pool, cu_dev);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(msg(format!("cuDeviceGetDefaultMemPool: {r:?}")));
        }
        let mut keep: u64 = u64::MAX;
        let r = sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut keep as *mut u64 as *mut std::ffi::c_void,
        );
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(msg(format!("cuMemPoolSetAttribute: {r:?}")));
        }
    }
    Ok(())
}

/// The view of `s` that `l` starts at (any strides; the kernel is told them).
fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?;
    Ok(slice.slice(l.start_offset()..))
}

fn suffix(dt: DType, op: &str) -> Result<&'static str> {
    match dt {
        DType::F32 => Ok("f32"),
        DType::BF16 => Ok("bf16"),
        other => Err(msg(format!(
            "{op}: {other:?} is not supported by our kernels"
        ))),
    }
}

/// The one stride between consecutive rows of `l` (rows = all dims but the last, which must have
/// a unit stride): that of its one non-unit leading dim, or the row length when contiguous.
fn row_stride(l: &Layout, op: &str) -> Result<i64> {
    let (d, s) = (l.dims(), l.stride());
    if s.last() != Some(&1) {
        return Err(msg(format!("{op}: rows need a unit inner stride")));
    }
    let lead: Vec<(usize, usize)> = d[..d.len() - 1]
        .iter()
        .zip(&s[..s.len() - 1])
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &st)| (n, st))
        .collect();
    match lead.as_slice() {
        [] => Ok(*d.last().unwrap_or(&1) as i64),
        [(_, st)] => Ok(*st as i64),
        _ if l.is_contiguous() => Ok(*d.last().unwrap_or(&1) as i64),
        _ => Err(msg(format!("{op}: rows must share one stride"))),
    }
}

/// `x[.., k] · w[n, k]ᵀ -> [.., n]` for at most [`ROWS_MAX`] rows; x and w of one dtype,
/// x rows at a unit inner stride, w contiguous.
pub struct RowsGemm;

impl CustomOp2 for RowsGemm {
    fn name(&self) -> &'static str {
        "dspark-cuda-rows-gemm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(
        &self,
        xs: &CudaStorage,
        xl: &Layout,
        ws: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (xd, wd) = (xl.dims(), wl.dims());
        let (&k, lead) = xd.split_last().ok_or_else(|| msg("gemm: x is a scalar"))?;
        if wd.len() != 2 || wd[1] != k || !wl.is_contiguous() {
            return Err(msg(format!("gemm: x {xd:?} does not fit w {wd:?}")));
        }
        let (m, n) = (lead.iter().product::<usize>(), wd[0]);
        if m == 0 || m > ROWS_MAX {
            return Err(msg(format!("gemm: {m} rows (1..={ROWS_MAX})")));
        }
        let ldx = row_stride(xl, "gemm")? as usize;
        let dt = xs.dtype();
        if ws.dtype() != dt {
            return Err(msg("gemm: x and w dtypes differ"));
        }
        let dev = xs.device().clone();
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = n;
        let slice = match dt {
            DType::BF16 => {
                let x = view::<bf16>(xs, xl)?;
                let w = view::<bf16>(ws, wl)?;
                // SAFETY: every element is written by the kernel below before anything reads it.
                let y = unsafe { dev.alloc::<bf16>(m * n)? };
                let aligned = k % 8 == 0
                    && ldx % 8 == 0
                    && xl.start_offset() % 8 == 0
                    && wl.start_offset() % 8 == 0;
                // columns per block from n alone (a column's sums do not depend on it)
                let nt = match n {
                    n if n >= 16384 => 4,
                    n if n >= 6144 => 2,
                    _ => 1,
                };
                let f = func!(dev, &format!("gemm_rows_bf16_nt{nt}"))?;
                let cfg = LaunchConfig {
                    grid_dim: (n.div_ceil(8 * nt) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = f.builder();
                b.arg(&x);
                b.arg(&w);
                b.arg(&y);
                let (mi, ni, ki, li, vi) =
                    (m as i32, n as i32, k as i32, ldx as i32, aligned as i32);
                b.arg(&mi);
                b.arg(&ni);
                b.arg(&ki);
                b.arg(&li);
                b.arg(&vi);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(y, dev.clone())
            }
            DType::F32 => {
                let x = view::<f32>(xs, xl)?;
                let w = view::<f32>(ws, wl)?;
                // SAFETY: every element is written by the kernel below before anything reads it.
                let y = unsafe { dev.alloc::<f32>(m * n)? };
                let f = func!(dev, "gemm_rows_f32")?;
                let cfg = LaunchConfig {
                    grid_dim: (n.div_ceil(8) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = f.builder();
                b.arg(&x);
                b.arg(&w);
                b.arg(&y);
                let (mi, ni, ki, li) = (m as i32, n as i32, k as i32, ldx as i32);
                b.arg(&mi);
                b.arg(&ni);
                b.arg(&ki);
                b.arg(&li);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(y, dev.clone())
            }
            other => return Err(msg(format!("gemm: {other:?} is not supported"))),
        };
        Ok((slice, Shape::from(od)))
    }
}

/// Kernel arguments of the attention kernels (layout shared with `AttnArgs` in kernels.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AttnArgs {
    q_b: i64,
    q_h: i64,
    q_r: i64,
    k_b: i64,
    k_h: i64,
    k_r: i64,
    v_b: i64,
    v_h: i64,
    v_r: i64,
    hq: i32,
    hkv: i32,
    lq: i32,
    lk: i32,
    d: i32,
    kind: i32,
    off: i32,
    window: i32,
    splits: i32,
    vec: i32,
    scale: f32,
}

// SAFETY: plain old data with the C layout the kernel reads.
unsafe impl DeviceRepr for AttnArgs {}

/// Scaled dot-product attention of `q[b, hq, lq, d]` over `k, v[b, hkv, lk, d]` (views of the
/// cache: any batch/head/row strides, unit inner stride). Output: `[b, lq, hq, d]` contiguous.
pub struct CacheAttention {
    pub mask: AttnMask,
    pub scale: f32,
}

fn strides4(l: &Layout, what: &str) -> Result<(i64, i64, i64)> {
    let s = l.stride();
    if s.len() != 4 || s[3] != 1 {
        return Err(msg(format!(
            "attention: {what} needs 4 dims with a unit inner stride"
        )));
    }
    Ok((s[0] as i64, s[1] as i64, s[2] as i64))
}

impl CustomOp3 for CacheAttention {
    fn name(&self) -> &'static str {
        "dspark-cuda-attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(
        &self,
        qs: &CudaStorage,
        ql: &Layout,
        ks: &CudaStorage,
        kl: &Layout,
        vs: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (qd, kd, vd) = (ql.dims(), kl.dims(), vl.dims());
        if qd.len() != 4 || kd.len() != 4 || kd != vd || qd[0] != kd[0] || qd[3] != kd[3] {
            return Err(msg(format!("attention: q {qd:?} k {kd:?} v {vd:?}")));
        }
        let (b, hq, lq, d) = (qd[0], qd[1], qd[2], qd[3]);
        let (hkv, lk) = (kd[1], kd[2]);
        if hkv == 0 || hq % hkv != 0 || d > 256 || d % 16 != 0 || lk == 0 {
            return Err(msg(format!(
                "attention: {hq} q heads, {hkv} kv heads, d {d}, {lk} keys"
            )));
        }
        let (kind, off, window) = match self.mask {
            AttnMask::None => (0, 0, 0),
            AttnMask::Causal { offset } => (1, offset, 0),
            AttnMask::SlidingCausal { offset, window } => (2, offset, window),
        };
        let dt = qs.dtype();
        if ks.dtype() != dt || vs.dtype() != dt {
            return Err(msg("attention: q, k, v dtypes differ"));
        }
        let sfx = suffix(dt, "attention")?;
        let splits = lk.div_ceil(SPLIT);
        let (q_b, q_h, q_r) = strides4(ql, "q")?;
        let (k_b, k_h, k_r) = strides4(kl, "k")?;
        let (v_b, v_h, v_r) = strides4(vl, "v")?;
        // 16-byte loads of 16 values: every row start aligned (bf16: 8 elements, f32: 4)
        let al = if dt == DType::BF16 { 8 } else { 4 };
        let vec = [q_b, q_h, q_r, k_b, k_h, k_r].iter().all(|&x| x % al == 0)
            && [ql.start_offset(), kl.start_offset()]
                .iter()
                .all(|&o| o % al as usize == 0);
        let args = AttnArgs {
            q_b,
            q_h,
            q_r,
            k_b,
            k_h,
            k_r,
            v_b,
            v_h,
            v_r,
            hq: hq as i32,
            hkv: hkv as i32,
            lq: lq as i32,
            lk: lk as i32,
            d: d as i32,
            kind,
            off: off as i32,
            window: window as i32,
            splits: splits as i32,
            vec: vec as i32,
            scale: self.scale,
        };
        let dev = qs.device().clone();
        // SAFETY: every element is written by the kernel below before anything reads it.
        let scratch = unsafe { dev.alloc::<f32>(b * lq * hq * splits * (d + 2))? };
        let split_cfg = LaunchConfig {
            grid_dim: (splits as u32, hq as u32, (b * lq) as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let comb_cfg = LaunchConfig {
            grid_dim: (hq as u32, (b * lq) as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let split_fn = func!(dev, &format!("attn_split_{sfx}_l{}", d / 16))?;
        let comb_fn = func!(dev, &format!("attn_combine_{sfx}"))?;
        macro_rules! run {
            ($t:ty) => {{
                let (q, k, v) = (
                    view::<$t>(qs, ql)?,
                    view::<$t>(ks, kl)?,
                    view::<$t>(vs, vl)?,
                );
                let mut bld = split_fn.builder();
                bld.arg(&q);
                bld.arg(&k);
                bld.arg(&v);
                bld.arg(&scratch);
                bld.arg(&args);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { bld.launch(split_cfg) }.w()?;
                // SAFETY: every element is written by the kernel below before anything reads it.
                let o = unsafe { dev.alloc::<$t>(b * lq * hq * d)? };
                let mut bld = comb_fn.builder();
                bld.arg(&scratch);
                bld.arg(&o);
                bld.arg(&args);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { bld.launch(comb_cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(o, dev.clone())
            }};
        }
        let out = match dt {
            DType::BF16 => run!(bf16),
            _ => run!(f32),
        };
        Ok((out, Shape::from(vec![b, lq, hq, d])))
    }
}

/// Index of the largest value of each row of `x[.., n]` (u32, shape `[..]`), first on ties.
pub struct ArgmaxRows;

impl CustomOp1 for ArgmaxRows {
    fn name(&self) -> &'static str {
        "dspark-cuda-argmax"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let dims = l.dims();
        let (&n, lead) = dims.split_last().ok_or_else(|| msg("argmax: scalar"))?;
        if !l.is_contiguous() {
            return Err(msg("argmax: rows must be contiguous"));
        }
        let rows: usize = lead.iter().product();
        let dev = s.device().clone();
        let sfx = suffix(s.dtype(), "argmax")?;
        // SAFETY: every element is written by the kernel below before anything reads it.
        let out = unsafe { dev.alloc::<u32>(rows.max(1))? };
        let f = func!(dev, &format!("argmax_rows_{sfx}"))?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ni, ld) = (n as i32, n as i64);
        macro_rules! run {
            ($t:ty) => {{
                let x = view::<$t>(s, l)?;
                let mut b = f.builder();
                b.arg(&x);
                b.arg(&out);
                b.arg(&ni);
                b.arg(&ld);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.launch(cfg) }.w()?;
            }};
        }
        match s.dtype() {
            DType::BF16 => run!(bf16),
            _ => run!(f32),
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from(lead.to_vec()),
        ))
    }
}

/// `silu(gate) · up` over `[.., c]` halves with unit inner strides (contiguous output).
pub struct Swiglu;

impl CustomOp2 for Swiglu {
    fn name(&self) -> &'static str {
        "dspark-cuda-swiglu"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(
        &self,
        gs: &CudaStorage,
        gl: &Layout,
        us: &CudaStorage,
        ul: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if gl.dims() != ul.dims() || gs.dtype() != us.dtype() {
            return Err(msg("swiglu: gate and up differ in shape or dtype"));
        }
        let dims = gl.dims().to_vec();
        let cols = *dims.last().ok_or_else(|| msg("swiglu: scalar"))?;
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let (ldg, ldu) = (row_stride(gl, "swiglu")?, row_stride(ul, "swiglu")?);
        let dev = gs.device().clone();
        let sfx = suffix(gs.dtype(), "swiglu")?;
        let f = func!(dev, &format!("swiglu_{sfx}"))?;
        let total = rows * cols;
        let cfg = LaunchConfig {
            grid_dim: (total.div_ceil(256).clamp(1, 65535) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (r, c) = (rows as i64, cols as i32);
        macro_rules! run {
            ($t:ty) => {{
                let (g, u) = (view::<$t>(gs, gl)?, view::<$t>(us, ul)?);
                // SAFETY: every element is written by the kernel below before anything reads it.
                let o = unsafe { dev.alloc::<$t>(total.max(1))? };
                let mut b = f.builder();
                b.arg(&g);
                b.arg(&u);
                b.arg(&o);
                b.arg(&r);
                b.arg(&c);
                b.arg(&ldg);
                b.arg(&ldu);
                // SAFETY: the arguments match the kernel's signature in kernels.cu and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(o, dev.clone())
            }};
        }
        let out = match gs.dtype() {
            DType::BF16 => run!(bf16),
            _ => run!(f32),
        };
        Ok((out, Shape::from(dims)))
    }
}
