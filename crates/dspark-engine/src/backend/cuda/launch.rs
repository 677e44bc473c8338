//! [`Launch`]: how our kernels are put on the stream. Each launch carries the programmatic
//! stream serialization attribute (programmatic dependent launch, sm_90), so a kernel's blocks
//! may start while the kernel before it on the stream finishes its last wave; every kernel
//! waits for that kernel's completion (`pdl_enter` in `common.cuh`) before it reads an earlier
//! result or writes anything, so what is computed and in what order stays exactly as with plain
//! launches, and only the gap between kernels shrinks (measured on the H200 with
//! `scripts/bench/cuda_chain_bench.cu`: a Qwen3-8B-shaped decode step of these kernels, 6.47 ms
//! with plain launches, 5.99 with PDL, the same bits). `DSPARK_CUDA_PDL=0` launches plainly, for
//! side-by-side runs in one binary.

use std::ffi::c_void;

use candle_core::cuda::cudarc::driver::{sys, CudaFunction, CudaStream, DevicePtr, DeviceRepr};
use candle_core::cuda::cudarc::driver::{LaunchConfig, SyncOnDrop};
use candle_core::Result;

use super::msg;

/// Whether launches carry the PDL attribute (`DSPARK_CUDA_PDL=0` turns it off).
pub fn pdl_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_PDL").map_or(true, |v| v != "0"))
}

enum Arg {
    /// Index into `Launch::ptrs`.
    Dev(usize),
    /// A host value the caller keeps alive until the launch.
    Val(*const c_void),
}

/// The arguments of one kernel launch, in the kernel's parameter order.
pub struct Launch<'a> {
    func: &'a CudaFunction,
    stream: &'a CudaStream,
    ptrs: Vec<u64>,
    args: Vec<Arg>,
    /// Read-event records of the buffers (no-ops with event tracking off, see `tune_device`),
    /// kept until the kernel is enqueued, as cudarc's own launch does.
    guards: Vec<SyncOnDrop<'a>>,
    /// Blocks per thread-block cluster along x (1: no clusters).
    cluster_x: u32,
}

impl<'a> Launch<'a> {
    pub fn new(func: &'a CudaFunction, stream: &'a CudaStream) -> Self {
        Self {
            func,
            stream,
            ptrs: Vec::new(),
            args: Vec::new(),
            guards: Vec::new(),
            cluster_x: 1,
        }
    }

    /// Launches the grid as thread-block clusters of `x` blocks along x (sm_90; at most 16, and
    /// a divisor of the grid's x; past the portable 8 the kernel is allowed larger clusters).
    pub fn cluster(&mut self, x: u32) -> &mut Self {
        self.cluster_x = x;
        self
    }

    /// A device buffer (slice or view): its device address is the argument.
    pub fn buf<T, P: DevicePtr<T>>(&mut self, p: &'a P) -> &mut Self {
        let (ptr, guard) = p.device_ptr(self.stream);
        self.args.push(Arg::Dev(self.ptrs.len()));
        self.ptrs.push(ptr);
        self.guards.push(guard);
        self
    }

    /// A plain value (scalar or `#[repr(C)]` struct) passed by value.
    pub fn val<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.args.push(Arg::Val(v as *const T as *const c_void));
        self
    }

    /// Enqueues the kernel on the stream (and ends the borrows of its buffers).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and every
    /// buffer must outlive the kernel in stream order.
    pub unsafe fn run(mut self, cfg: LaunchConfig) -> Result<()> {
        let mut raw: Vec<*mut c_void> = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Dev(i) => &self.ptrs[*i] as *const u64 as *mut c_void,
                Arg::Val(p) => *p as *mut c_void,
            })
            .collect();
        // SAFETY: a zeroed attribute is a valid C struct; the union field set is the one `id` names.
        let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        if pdl_enabled() {
            attrs[n].id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n].value.programmaticStreamSerializationAllowed = 1;
            n += 1;
        }
        if self.cluster_x > 1 {
            if !cfg.grid_dim.0.is_multiple_of(self.cluster_x) || self.cluster_x > 16 {
                return Err(msg(format!(
                    "kernel launch: clusters of {} blocks over a grid of {}",
                    self.cluster_x, cfg.grid_dim.0
                )));
            }
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = self.cluster_x;
            attrs[n].value.clusterDim.y = 1;
            attrs[n].value.clusterDim.z = 1;
            n += 1;
        }
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| msg(format!("{e:?}")))?;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        };
        // SAFETY: `raw` points at live argument values (the caller's, or `self.ptrs`, which is
        // not touched until the call returns); the caller vouches for their types.
        let r = unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                raw.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.guards.clear();
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(msg(format!("kernel launch: {r:?}")));
        }
        Ok(())
    }
}
