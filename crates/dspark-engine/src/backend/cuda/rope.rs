//! [`NormRope`]: a per-head RMSNorm (optional) and the rotary embedding in one launch
//! (`rope.cuh`), reading the `[b, L, heads, d]` view of a projection in place and writing
//! `[b, heads, L, d]` contiguous: it replaces a norm, a transposing copy and a rope.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, DType, Layout, Result, Shape, Storage, Tensor,
};
use half::bf16;

use super::launch::Launch;
use super::{cpu_only, msg, suffix, view};

/// Kernel arguments (layout shared with `RopeArgs` in rope.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RopeArgs {
    sb: i64,
    sl: i64,
    sh: i64,
    heads: i32,
    len: i32,
    d: i32,
    start: i32,
    interleaved: i32,
    has_norm: i32,
    eps: f32,
}

// SAFETY: plain old data with the C layout the kernel reads.
unsafe impl DeviceRepr for RopeArgs {}

/// Normed (with `norm`: `(weight [d], eps)`) and rotated rows of `x [b, L, heads, d]` at
/// positions `start..`, as `[b, heads, L, d]`. `cos` / `sin`: `[positions, d / 2]` contiguous
/// tables in x's dtype; `d` a multiple of 64 (whole warps).
pub struct NormRope<'a> {
    pub norm: Option<(&'a Tensor, f32)>,
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub start: usize,
    pub interleaved: bool,
}

impl NormRope<'_> {
    /// Whether the kernel takes `x` (layout, head size, dtypes and table shapes).
    pub fn fits(&self, x: &Tensor) -> bool {
        let (d, s) = (x.dims(), x.stride());
        let dt = x.dtype();
        let table = |t: &Tensor| {
            t.dtype() == dt && t.is_contiguous() && t.rank() == 2 && t.dims()[1] * 2 == d[3]
        };
        d.len() == 4
            && s[3] == 1
            && d[3] % 64 == 0
            && d[3] <= 256
            && matches!(dt, DType::F32 | DType::BF16)
            && table(self.cos)
            && table(self.sin)
            && self.start + d[1] <= self.cos.dims()[0]
            && self
                .norm
                .is_none_or(|(w, _)| w.dtype() == dt && w.dims() == [d[3]] && w.is_contiguous())
    }
}

/// The CUDA buffer of `t` from its start, with its storage guard held by the closure's caller.
fn with_slice<R>(t: &Tensor, f: impl FnOnce(&CudaStorage, &Layout) -> Result<R>) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cuda(c) => f(c, l),
        _ => Err(msg("norm_rope: a table is not on the CUDA device")),
    }
}

impl CustomOp1 for NormRope<'_> {
    fn name(&self) -> &'static str {
        "dspark-cuda-norm-rope"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_only(self.name())
    }

    fn cuda_fwd(&self, xs: &CudaStorage, xl: &Layout) -> Result<(CudaStorage, Shape)> {
        let (dims, st) = (xl.dims(), xl.stride());
        if dims.len() != 4 || st[3] != 1 || dims[3] % 64 != 0 || dims[3] > 256 {
            return Err(msg(format!("norm_rope: x {dims:?} strides {st:?}")));
        }
        let (b, l, heads, d) = (dims[0], dims[1], dims[2], dims[3]);
        let args = RopeArgs {
            sb: st[0] as i64,
            sl: st[1] as i64,
            sh: st[2] as i64,
            heads: heads as i32,
            len: l as i32,
            d: d as i32,
            start: self.start as i32,
            interleaved: self.interleaved as i32,
            has_norm: self.norm.is_some() as i32,
            eps: self.norm.map_or(0.0, |(_, e)| e),
        };
        let dt = xs.dtype();
        let dev = xs.device().clone();
        let f = func!(dev, &format!("norm_rope_{}", suffix(dt, "norm_rope")?))?;
        let cfg = LaunchConfig {
            grid_dim: ((b * l * heads).max(1) as u32, 1, 1),
            block_dim: ((d / 2) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let null = 0u64;
        macro_rules! run {
            ($t:ty) => {{
                let x = view::<$t>(xs, xl)?;
                // SAFETY: every element is written by the kernel below before anything reads it.
                let out = unsafe { dev.alloc::<$t>((b * heads * l * d).max(1))? };
                with_slice(self.cos, |cs, cl| {
                    with_slice(self.sin, |ss, sl| {
                        let (cos, sin) = (view::<$t>(cs, cl)?, view::<$t>(ss, sl)?);
                        let launch = |w: Option<&candle_core::cuda::cudarc::driver::CudaView<'_, $t>>| {
                            let stream = dev.cuda_stream();
                            let mut bld = Launch::new(&f, &stream);
                            bld.buf(&x);
                            match w {
                                Some(w) => bld.buf(w),
                                None => bld.val(&null),
                            };
                            bld.buf(&cos);
                            bld.buf(&sin);
                            bld.buf(&out);
                            bld.val(&args);
                            // SAFETY: the arguments match norm_rope's signature in rope.cuh and every
                            // buffer outlives the launch in stream order (one stream).
                            unsafe { bld.run(cfg) }
                        };
                        match self.norm {
                            Some((w, _)) => with_slice(w, |ws, wl| launch(Some(&view::<$t>(ws, wl)?))),
                            None => launch(None),
                        }
                    })
                })?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = match dt {
            DType::BF16 => run!(bf16),
            _ => run!(f32),
        };
        Ok((out, Shape::from(vec![b, heads, l, d])))
    }
}
