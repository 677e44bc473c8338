//! [`CacheWrite`]: the KV cache write (`cache.cuh`) as a candle in-place op: a `[1, h, n, d]`
//! source with any two levels of row strides (a projection's slice, or `norm_rope`'s output)
//! copied into rows `at..at + n` of a contiguous `[1, h, cap, d]` cache, in one PDL launch.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::{CpuStorage, CudaStorage, DType, InplaceOp2, Layout, Result};
use half::bf16;

use super::launch::Launch;
use super::{msg, row_levels, suffix, view};

/// Writes the source into the cache at row `at` (dim 2).
pub struct CacheWrite {
    pub at: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CacheWriteArgs {
    ni: i64,
    si: i64,
    so: i64,
    n: i32,
    cap: i32,
    at: i32,
    d: i32,
}
// SAFETY: plain old data laid out as `CacheWriteArgs` in cache.cuh.
unsafe impl DeviceRepr for CacheWriteArgs {}

impl CacheWrite {
    /// Whether the op takes these tensors' shapes and layouts (else the caller copies).
    pub fn fits(cache: &Layout, src: &Layout, at: usize) -> bool {
        let (c, s) = (cache.dims(), src.dims());
        c.len() == 4
            && s.len() == 4
            && c[0] == 1
            && s[0] == 1
            && c[1] == s[1]
            && c[3] == s[3]
            && at + s[2] <= c[2]
            && cache.is_contiguous()
            && src.stride()[3] == 1
            && row_levels(src).is_some()
    }
}

impl InplaceOp2 for CacheWrite {
    fn name(&self) -> &'static str {
        "dspark-cuda-cache-write"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<()> {
        Err(msg("cache write runs on CUDA only"))
    }

    fn cuda_fwd(
        &self,
        cs: &mut CudaStorage,
        cl: &Layout,
        ss: &CudaStorage,
        sl: &Layout,
    ) -> Result<()> {
        if !Self::fits(cl, sl, self.at) || cs.dtype() != ss.dtype() {
            return Err(msg(format!(
                "cache write: {:?} into {:?} at {} does not fit",
                sl.dims(),
                cl.dims(),
                self.at
            )));
        }
        let (ni, si, so) = row_levels(sl).ok_or_else(|| msg("cache write: source rows"))?;
        let (h, n, d, cap) = (sl.dims()[1], sl.dims()[2], sl.dims()[3], cl.dims()[2]);
        let args = CacheWriteArgs {
            ni,
            si,
            so,
            n: n as i32,
            cap: cap as i32,
            at: self.at as i32,
            d: d as i32,
        };
        let rows = h * n;
        if rows == 0 {
            return Ok(());
        }
        let dt = ss.dtype();
        let dev = ss.device().clone();
        let f = func!(dev, &format!("cache_write_{}", suffix(dt, "cache write")?))?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (d.clamp(32, 128) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let stream = dev.cuda_stream();
        macro_rules! run {
            ($t:ty) => {{
                let src = view::<$t>(ss, sl)?;
                let cache = view::<$t>(cs, cl)?;
                let mut b = Launch::new(&f, &stream);
                b.buf(&src);
                b.buf(&cache);
                b.val(&args);
                // SAFETY: the arguments match cache_write's signature in cache.cuh; `fits` keeps
                // every write inside the cache's rows; buffers outlive the launch in stream order.
                unsafe { b.run(cfg) }
            }};
        }
        match dt {
            DType::BF16 => run!(bf16),
            DType::F32 => run!(f32),
            other => Err(msg(format!("cache write: {other:?}"))),
        }
    }
}
