//! [`RowsGemm`]: `x · wᵀ` for up to [`ROWS_MAX`] rows with our batch-invariant kernels
//! (`gemm.cuh`). The launch shape (columns per block, warps, K split) is a function of the
//! weight's shape alone (`backend/cuda_shapes.rs`, picked from the H200 micro-benchmark
//! `scripts/bench/cuda_kernel_bench.cu`), so a row's bits never depend on how many rows a call
//! has.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{CudaSlice, LaunchConfig};
use candle_core::{CpuStorage, CudaDevice, CudaStorage, CustomOp2, DType, Layout, Result, Shape};
use half::bf16;

use super::launch::Launch;
use super::{cpu_only, msg, row_stride, view, ROWS_MAX};
use crate::backend::cuda_shapes::{gemm_plan as plan, SPLIT_TILES_MAX};

/// `x[.., k] · w[n, k]ᵀ -> [.., n]` for at most [`ROWS_MAX`] rows; x and w of one dtype,
/// x rows at a unit inner stride, w contiguous. With `glu` (bf16 only), w's rows are the gate
/// and up projections interleaved and the result is `silu(gate) · up`, `[.., n / 2]`.
pub struct RowsGemm {
    pub glu: bool,
}

/// Whether the bf16 kernels load their first weights before the PDL wait (`gemm.cuh` PRE; the
/// same bits either way). `DSPARK_CUDA_PRE=0` takes the kernels that wait first, for runs side
/// by side.
fn preload() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_PRE").map_or(true, |v| v != "0"))
}

/// Per device: zeroed arrival counters of split launches (each launch's last block resets its
/// tile's counter, so they are zero again between launches on the one stream); `markov.rs`
/// takes the first for its rows' last-block reductions, on the same terms.
pub(super) fn counters(dev: &CudaDevice) -> Result<Arc<CudaSlice<u32>>> {
    type Map = HashMap<candle_core::cuda::DeviceId, Arc<CudaSlice<u32>>>;
    static C: Mutex<Option<Map>> = Mutex::new(None);
    let mut g = C.lock().unwrap_or_else(|p| p.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(&dev.id()) {
        return Ok(c.clone());
    }
    let c = Arc::new(dev.alloc_zeros::<u32>(SPLIT_TILES_MAX)?);
    map.insert(dev.id(), c.clone());
    Ok(c)
}

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
        if self.glu && (n % 2 != 0 || xs.dtype() != DType::BF16) {
            return Err(msg(format!(
                "gemm: the SwiGLU form needs bf16 and gate/up row pairs, got {:?} x {n}",
                xs.dtype()
            )));
        }
        let n_out = if self.glu { n / 2 } else { n };
        let ldx = row_stride(xl, "gemm")? as usize;
        let dt = xs.dtype();
        if ws.dtype() != dt {
            return Err(msg("gemm: x and w dtypes differ"));
        }
        let dev = xs.device().clone();
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = n_out;
        let slice = match dt {
            DType::BF16 => {
                let x = view::<bf16>(xs, xl)?;
                let w = view::<bf16>(ws, wl)?;
                // SAFETY: every element is written by the kernel below before anything reads it.
                let y = unsafe { dev.alloc::<bf16>(m * n_out)? };
                let aligned = k % 8 == 0
                    && ldx.is_multiple_of(8)
                    && xl.start_offset().is_multiple_of(8)
                    && wl.start_offset().is_multiple_of(8);
                let (nt, warps, splits) = plan(n, k);
                let tiles = n.div_ceil(8 * nt);
                let form = if self.glu { "glu_" } else { "" };
                let wait = if preload() { "" } else { "nopre_" };
                let f = func!(dev, &format!("gemm_rows_{wait}{form}bf16_nt{nt}_w{warps}"))?;
                let cfg = LaunchConfig {
                    grid_dim: (tiles as u32, splits as u32, 1),
                    block_dim: (32 * warps as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                let (mi, ni, ki, li, vi, si) = (
                    m as i32,
                    n as i32,
                    k as i32,
                    ldx as i32,
                    aligned as i32,
                    splits as i32,
                );
                let (partial, count);
                let null = 0u64;
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&f, &stream);
                b.buf(&x);
                b.buf(&w);
                b.buf(&y);
                b.val(&mi);
                b.val(&ni);
                b.val(&ki);
                b.val(&li);
                b.val(&vi);
                b.val(&si);
                if splits > 1 {
                    if tiles > SPLIT_TILES_MAX {
                        return Err(msg(format!("gemm: {tiles} tiles in a split launch")));
                    }
                    // SAFETY: each K range's block writes its rows before the last block reads them.
                    partial = unsafe { dev.alloc::<f32>(splits * m * n)? };
                    count = counters(&dev)?;
                    b.buf(&partial);
                    b.buf(&*count);
                } else {
                    b.val(&null);
                    b.val(&null);
                }
                // SAFETY: the arguments match the kernel's signature in gemm.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.run(cfg) }?;
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
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&f, &stream);
                b.buf(&x);
                b.buf(&w);
                b.buf(&y);
                let (mi, ni, ki, li) = (m as i32, n as i32, k as i32, ldx as i32);
                b.val(&mi);
                b.val(&ni);
                b.val(&ki);
                b.val(&li);
                // SAFETY: the arguments match the kernel's signature in gemm.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { b.run(cfg) }?;
                CudaStorage::wrap_cuda_slice(y, dev.clone())
            }
            other => return Err(msg(format!("gemm: {other:?} is not supported"))),
        };
        Ok((slice, Shape::from(od)))
    }
}
