//! Row-wise ops on our kernels (`rows.cuh`): [`ArgmaxRows`], [`Swiglu`], [`RmsNorm`] and
//! [`AddRmsNorm`] (the residual add fused in front of the next norm: one launch instead of two,
//! and one op less for the host to enqueue).

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape,
};
use half::bf16;

use super::launch::Launch;
use super::{cpu_only, msg, row_levels, row_stride, suffix, view};
use crate::backend::cuda_shapes::{norm_threads, NORM_CH};

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
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&f, &stream);
                b.buf(&x);
                b.buf(&out);
                b.val(&ni);
                b.val(&ld);
                // SAFETY: the arguments match the kernel's signature in rows.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.run(cfg) }?;
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
        // element stride 2: the gate and up columns of one interleaved GEMM output
        let es = *gl.stride().last().unwrap_or(&1);
        if ul.stride().last() != Some(&es) || !matches!(es, 1 | 2) {
            return Err(msg("swiglu: gate and up need one element stride, 1 or 2"));
        }
        let (ldg, ldu) = if es == 2 {
            (pair_rows(gl)?, pair_rows(ul)?)
        } else {
            (row_stride(gl, "swiglu")?, row_stride(ul, "swiglu")?)
        };
        let es = es as i32;
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
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&f, &stream);
                b.buf(&g);
                b.buf(&u);
                b.buf(&o);
                b.val(&r);
                b.val(&c);
                b.val(&ldg);
                b.val(&ldu);
                b.val(&es);
                // SAFETY: the arguments match the kernel's signature in rows.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.run(cfg) }?;
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

/// The row stride of `[.., cols]` values at element stride 2 that lie as whole rows of `2 cols`
/// (one interleaved GEMM output's gate or up columns).
fn pair_rows(l: &Layout) -> Result<i64> {
    let (d, s) = (l.dims(), l.stride());
    let cols = *d.last().ok_or_else(|| msg("swiglu: scalar"))?;
    let mut want = 2 * cols;
    for i in (0..d.len() - 1).rev() {
        if d[i] > 1 && s[i] != want {
            return Err(msg("swiglu: interleaved rows must lie back to back"));
        }
        want *= d[i];
    }
    Ok(2 * cols as i64)
}

/// Kernel arguments of `add_rms_norm` (layout shared with `NormRows` in rows.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct NormRows {
    xin: i64,
    xsi: i64,
    xso: i64,
    rin: i64,
    rsi: i64,
    rso: i64,
    h: i32,
    vec: i32,
    eps: f32,
}

// SAFETY: plain old data with the C layout the kernel reads.
unsafe impl DeviceRepr for NormRows {}

/// Launches `add_rms_norm_{sfx}`: `r` (residual) and `sum` absent for a plain norm. Returns the
/// output buffer: `y` alone, or `sum` then `y`.
fn launch_norm(
    xs: &CudaStorage,
    xl: &Layout,
    res: Option<(&CudaStorage, &Layout)>,
    ws: &CudaStorage,
    wl: &Layout,
    eps: f32,
    op: &str,
) -> Result<CudaStorage> {
    let dims = xl.dims();
    let h = *dims.last().ok_or_else(|| msg(format!("{op}: scalar")))?;
    let rows: usize = dims[..dims.len() - 1].iter().product();
    let levels = |l: &Layout| row_levels(l).ok_or_else(|| msg(format!("{op}: row layout")));
    let (xin, xsi, xso) = levels(xl)?;
    let dt = xs.dtype();
    if ws.dtype() != dt || wl.dims() != [h] || !wl.is_contiguous() {
        return Err(msg(format!("{op}: weight {:?} for rows of {h}", wl.dims())));
    }
    let (rin, rsi, rso) = match res {
        Some((rs, rl)) => {
            if rs.dtype() != dt || rl.dims() != dims {
                return Err(msg(format!("{op}: residual differs from x")));
            }
            levels(rl)?
        }
        None => (1, 0, 0),
    };
    // 8-value vector accesses: every row start (and the weight) 16-byte aligned, h a multiple
    // of 8, and the row fits the kernel's registers at the block size picked from h
    let threads = norm_threads(h);
    let al = if dt == DType::BF16 { 8 } else { 4 };
    let starts = [
        xl.start_offset() as i64,
        res.map_or(0, |(_, rl)| rl.start_offset() as i64),
        wl.start_offset() as i64,
        xsi,
        xso,
        rsi,
        rso,
    ];
    let vec = h % 8 == 0 && h <= 8 * NORM_CH * threads && starts.iter().all(|&o| o % al == 0);
    let args = NormRows {
        xin,
        xsi,
        xso,
        rin,
        rsi,
        rso,
        h: h as i32,
        vec: vec as i32,
        eps,
    };
    let dev = xs.device().clone();
    let f = func!(dev, &format!("add_rms_norm_{}", suffix(dt, op)?))?;
    let cfg = LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let outs = if res.is_some() { 2 } else { 1 };
    let null = 0u64;
    macro_rules! run {
        ($t:ty) => {{
            let x = view::<$t>(xs, xl)?;
            let w = view::<$t>(ws, wl)?;
            let r = match res {
                Some((rs, rl)) => Some(view::<$t>(rs, rl)?),
                None => None,
            };
            // SAFETY: every element is written by the kernel below before anything reads it.
            let out = unsafe { dev.alloc::<$t>((outs * rows * h).max(1))? };
            {
                let (sum, y) = (out.slice(..rows * h), out.slice((outs - 1) * rows * h..));
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&f, &stream);
                b.buf(&x);
                match &r {
                    Some(r) => b.buf(r),
                    None => b.val(&null),
                };
                b.buf(&w);
                if res.is_some() {
                    b.buf(&sum);
                } else {
                    b.val(&null);
                }
                b.buf(&y);
                b.val(&args);
                // SAFETY: the arguments match add_rms_norm's signature in rows.cuh and every
                // buffer outlives the launch in stream order (one stream; stream-ordered frees).
                unsafe { b.run(cfg) }?;
            }
            CudaStorage::wrap_cuda_slice(out, dev.clone())
        }};
    }
    Ok(match dt {
        DType::BF16 => run!(bf16),
        _ => run!(f32),
    })
}

/// `x · rsqrt(mean(x²) + eps) · w` over the last axis (rows at one stride, unit inner stride).
pub struct RmsNorm {
    pub eps: f32,
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "dspark-cuda-rms-norm"
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
        let out = launch_norm(xs, xl, None, ws, wl, self.eps, "rms_norm")?;
        Ok((out, Shape::from(xl.dims().to_vec())))
    }
}

/// `s = x + r` (rounded to the dtype, as an add stores it) and `rms_norm(s) · w`, stacked as
/// `[2, ..dims]`: index 0 is the sum, 1 the normed rows.
pub struct AddRmsNorm {
    pub eps: f32,
}

impl CustomOp3 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "dspark-cuda-add-rms-norm"
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
        xs: &CudaStorage,
        xl: &Layout,
        rs: &CudaStorage,
        rl: &Layout,
        ws: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let out = launch_norm(xs, xl, Some((rs, rl)), ws, wl, self.eps, "add_rms_norm")?;
        let mut dims = vec![2];
        dims.extend_from_slice(xl.dims());
        Ok((out, Shape::from(dims)))
    }
}
