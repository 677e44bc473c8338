//! Our CUDA kernels (`kernels.cu` and its family headers, compiled to PTX by `build.rs`) as
//! candle custom ops, for the candle backend on `cuda:N`. Every one is batch-invariant: a row's
//! result does not depend on how many rows the call carries, so verification rows reproduce
//! decode steps bit for bit.
//! - [`RowsGemm`] (`gemm.rs`): `x · wᵀ` for up to [`ROWS_MAX`] rows (bf16 tensor cores, with a
//!   fixed split of K over blocks for narrow outputs; f32 on CUDA cores);
//! - [`CacheAttention`] (`attention.rs`): attention reading the KV cache views in place (no
//!   copies), fixed 128-key splits, on tensor cores for bf16 heads of 64/128 (all query heads of
//!   a kv head in one tile); output laid out `[b, l, h, d]` so the layer's transpose is free;
//! - [`ArgmaxRows`], [`Swiglu`], [`RmsNorm`], [`AddRmsNorm`] (`rows.rs`): argmax per row on the
//!   device, `silu(gate) · up` over strided halves, RMSNorm alone or with the residual add fused
//!   in front;
//! - [`NormRope`] (`rope.rs`): per-head RMSNorm and the rotary embedding in one launch, from a
//!   projection's strided view to `[b, heads, L, d]`;
//! - [`CacheWrite`] (`cache_write.rs`): the KV cache write from a strided source, in place;
//! - [`QkvRopeStore`] (`qkv_store.rs`): a layer's attention inputs in one launch (queries normed
//!   and rotated, keys normed and rotated into the key cache, values into the value cache);
//! - [`MarkovGreedy`] (`markov.rs`): DSpark's greedy draft chain, a launch per draft row;
//!
//! all put on the stream with programmatic dependent launch (`launch.rs`); a model's fixed-shape
//! steps are captured as CUDA graphs and replayed ([`StepGraphs`], `graph.rs`).

use candle_core::cuda::cudarc::driver::CudaView;
use candle_core::cuda::CudaDType;
use candle_core::{CpuStorage, CudaDevice, CudaStorage, DType, Layout, Result, Shape};

/// The kernels' PTX (empty when built with `DSPARK_PTX_STUB`, the type-check mode).
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/dspark_kernels.ptx"));
const MODULE: &str = "dspark_kernels";
/// Rows [`RowsGemm`] takes in one call (the verify block of DFlash b16 is 16).
pub const ROWS_MAX: usize = 16;

fn msg(m: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(m.to_string())
}

fn cpu_only(name: &str) -> Result<(CpuStorage, Shape)> {
    Err(msg(format!("{name} runs on CUDA only")))
}

/// Loads kernel `$name` of our module on `$dev` (an error in a build without kernels).
macro_rules! func {
    ($dev:expr, $name:expr) => {{
        if $crate::backend::cuda::PTX.is_empty() {
            Err(msg(
                "this build has no dspark CUDA kernels (built with DSPARK_PTX_STUB)",
            ))
        } else {
            $crate::backend::cuda::load_func(&$dev, $name)
        }
    }};
}

/// Kernel `name` of our module on `dev`, looked up once per device: candle's lookup makes a C
/// string and asks the driver at every call, which is host time on every launch.
fn load_func(
    dev: &CudaDevice,
    name: &str,
) -> Result<candle_core::cuda::cudarc::driver::CudaFunction> {
    use candle_core::cuda::cudarc::driver::CudaFunction;
    use std::collections::HashMap;
    type Map = HashMap<candle_core::cuda::DeviceId, HashMap<String, CudaFunction>>;
    static FUNCS: std::sync::Mutex<Option<Map>> = std::sync::Mutex::new(None);
    let mut g = FUNCS.lock().unwrap_or_else(|p| p.into_inner());
    let per = g
        .get_or_insert_with(HashMap::new)
        .entry(dev.id())
        .or_default();
    if let Some(f) = per.get(name) {
        return Ok(f.clone());
    }
    let f: CudaFunction = (*dev.get_or_load_custom_func(name, MODULE, PTX)?).clone();
    allow_large_clusters(dev, &f, name)?;
    per.insert(name.to_string(), f.clone());
    Ok(f)
}

/// Lets a kernel launch clusters past the portable 8 blocks (up to 16 on sm_90): a function
/// attribute, set once when the handle is first loaded, so no launch pays for it.
fn allow_large_clusters(
    dev: &CudaDevice,
    f: &candle_core::cuda::cudarc::driver::CudaFunction,
    name: &str,
) -> Result<()> {
    use candle_core::cuda::cudarc::driver::sys;
    dev.cuda_stream()
        .context()
        .bind_to_thread()
        .map_err(|e| msg(format!("{e:?}")))?;
    // SAFETY: a valid function handle of the context bound above; the attribute takes 0 or 1.
    let r = unsafe {
        sys::cuFuncSetAttribute(
            f.cu_function(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            1,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(msg(format!("kernel {name}: cluster size attribute: {r:?}")));
    }
    Ok(())
}

// after the macro, which the kernel families use
mod attention;
mod cache_write;
mod gemm;
mod graph;
mod launch;
mod markov;
mod qkv_store;
mod rope;
mod rows;

pub use attention::CacheAttention;
pub use cache_write::CacheWrite;
pub use gemm::RowsGemm;
pub use graph::{configured as graphs_configured, GraphStats, Live, StepGraphs};
pub use markov::{enabled as markov_enabled, fits as markov_fits, MarkovGreedy};
pub use qkv_store::{enabled as qkv_rope_store_enabled, QkvRopeStore};
pub use rope::NormRope;
pub use rows::{AddRmsNorm, ArgmaxRows, RmsNorm, Swiglu};

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

/// Rows of `l` (all dims but the last, which has a unit stride) as two levels of strides:
/// `(inner count, inner stride, outer stride)`; `None` when they need more.
pub fn row_levels(l: &Layout) -> Option<(i64, i64, i64)> {
    let (d, s) = (l.dims(), l.stride());
    let h = *d.last()?;
    if s.last() != Some(&1) && h > 1 {
        return None;
    }
    if l.is_contiguous() {
        let rows: usize = d[..d.len() - 1].iter().product();
        return Some((rows.max(1) as i64, h as i64, 0));
    }
    let lead: Vec<(usize, usize)> = d[..d.len() - 1]
        .iter()
        .zip(&s[..s.len() - 1])
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &st)| (n, st))
        .collect();
    match lead.as_slice() {
        [] => Some((1, h as i64, 0)),
        [(n, st)] => Some((*n as i64, *st as i64, 0)),
        [(_, so), (n, si)] => Some((*n as i64, *si as i64, *so as i64)),
        _ => None,
    }
}

/// The one stride between consecutive rows of `l` (rows = all dims but the last, which must have
/// a unit stride): that of its one non-unit leading dim, or the row length when contiguous.
fn row_stride(l: &Layout, op: &str) -> Result<i64> {
    if l.stride().last() != Some(&1) {
        return Err(msg(format!("{op}: rows need a unit inner stride")));
    }
    let d = l.dims();
    let rows: usize = d[..d.len() - 1].iter().product();
    match row_levels(l) {
        Some((n, st, 0)) if n as usize == rows.max(1) => Ok(st),
        _ => Err(msg(format!("{op}: rows must share one stride"))),
    }
}
