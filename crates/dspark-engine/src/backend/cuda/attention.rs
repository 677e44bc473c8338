//! [`CacheAttention`]: attention over the KV cache views in place (`attention.cuh`,
//! `attention_mma.cuh`). bf16 heads of 64 or 128 with 16-byte aligned rows run on tensor cores,
//! one block per (key split, kv head, 16-row tile of query rows x the group's query heads), so
//! each K/V row is read once per kv head; other heads and f32 take one (split, head, row) per
//! block. Both write the same per-split scratch, merged in split order by one combine kernel;
//! up to 16 splits the tensor-core kernel runs as clusters of its splits and merges them itself.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::{CpuStorage, CudaStorage, CustomOp3, DType, Layout, Result, Shape};
use half::bf16;

use super::launch::Launch;
use super::{cpu_only, msg, suffix, view};
use crate::backend::AttnMask;

/// Keys per split (the kernels' `SPLIT`): a row's reduction order depends only on the keys it
/// sees.
const SPLIT: usize = 128;

/// Up to this many key splits, with more than one 16-row tile of query rows, or in the 8-warp
/// form, the bf16 tensor-core attention loads its K/V rows below the new ones before the PDL
/// wait (`attention_mma.cuh` PRE, the same bits). Measured in `scripts/bench/cuda_chain_bench.cu`
/// (H200, 8B-shaped step, session 26, ms per step without / with): 1 row, 4 warps, at 1025 keys
/// (9 splits) 4.958 / 4.865, at 2049 (17) 5.013 / 4.965, at 8193 (65) 5.749 / 5.990 (slower);
/// 16 rows (4 tiles) 5.565 / 5.417, 5.852 / 5.712 and 8.119 / 7.781; 1 row, 8 warps, at 8193
/// keys 5.536 with (the engine, without, decoded 167.6 tok/s against 170.5 with 4 warps).
const PRE_SPLITS_MAX: usize = 32;

/// Up to this many key splits (`CLUSTER_MAX` in attention_mma.cuh) the bf16 tensor-core
/// attention runs as thread-block clusters of its splits and merges them itself
/// (`attention_mma.cuh` CL: the combine's arithmetic in its order, so the same bits, one launch
/// fewer per layer). Chain bench, same session, PRE both ways (ms per step, split launch +
/// combine / clusters): 1 row at 1025 keys 4.865 / 4.856, 16 rows 5.417 / 5.272; at 2049 keys
/// (17 splits, past the limit) clusters were not used.
const CLUSTER_SPLITS_MAX: usize = 16;

/// With one 16-row tile of query rows (a decode step), the bf16 tensor-core attention takes its
/// 8-warp form (`attention_mma.cuh` `*_h2_*`: two warps per 32 keys, each multiplying half the
/// dims of V; the same bits). Chain bench, session 26 (ms per step, 4 / 8 warps): 1 row at
/// 1025 keys 4.854 / 4.802, at 8193 5.755 / 5.536; 16 rows (4 tiles) were slower with 8 warps
/// (5.271 / 6.170 at 1025 keys), so verify blocks keep 4.
fn h2_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_H2").map_or(true, |v| v != "0"))
}

/// Kernel arguments of the attention kernels (layout shared with `AttnArgs` in attention.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AttnArgs {
    step: u64,
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
    /// A captured step's device position (`graph.rs`): the kernels take the live key count and
    /// the causal offset from it, over a grid that covers the cache's whole capacity.
    pub step: Option<u64>,
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
        let (q_b, q_h, q_r) = strides4(ql, "q")?;
        let (k_b, k_h, k_r) = strides4(kl, "k")?;
        let (v_b, v_h, v_r) = strides4(vl, "v")?;
        // a captured step reads its keys' count on the device: size everything for the capacity
        // of the cache the views come from (`[1, hkv, cap, d]` buffers)
        let lk = match self.step {
            None => lk,
            Some(_) => {
                let cap = if k_r > 0 && k_h % k_r == 0 {
                    k_h / k_r
                } else {
                    0
                } as usize;
                let fits = b == 1
                    && matches!(self.mask, AttnMask::Causal { .. } | AttnMask::None)
                    && cap >= lk
                    && (k_h, k_r) == (v_h, v_r);
                if !fits {
                    return Err(msg(format!(
                        "attention: a captured step needs causal or full attention over one \
                         cache ({b} sequences, {lk} keys, mask {:?})",
                        self.mask
                    )));
                }
                cap
            }
        };
        let splits = lk.div_ceil(SPLIT);
        // 16-byte loads of 16 values: every row start aligned (bf16: 8 elements, f32: 4)
        let al = if dt == DType::BF16 { 8 } else { 4 };
        let vec = [q_b, q_h, q_r, k_b, k_h, k_r].iter().all(|&x| x % al == 0)
            && [ql.start_offset(), kl.start_offset()]
                .iter()
                .all(|&o| o % al as usize == 0);
        // the tensor-core kernel also stages V rows with 16-byte loads
        let mma = dt == DType::BF16
            && (d == 64 || d == 128)
            && vec
            && [v_b, v_h, v_r].iter().all(|&x| x % 8 == 0)
            && vl.start_offset().is_multiple_of(8)
            && mma_enabled();
        let args = AttnArgs {
            step: self.step.unwrap_or(0),
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
        let cluster = mma && splits <= CLUSTER_SPLITS_MAX && cluster_enabled();
        let tiles = (lq * (hq / hkv)).div_ceil(16);
        let h2 = mma && b * tiles == 1 && h2_enabled();
        // the split sums for the combine (a cluster merges its splits in shared memory)
        let scratch_len = if cluster {
            1
        } else {
            b * lq * hq * splits * (d + 2)
        };
        // SAFETY: every element is written by the kernel below before anything reads it.
        let scratch = unsafe { dev.alloc::<f32>(scratch_len)? };
        let split_cfg = if mma {
            LaunchConfig {
                grid_dim: (splits as u32, hkv as u32, (b * tiles) as u32),
                block_dim: (if h2 { 256 } else { 128 }, 1, 1),
                shared_mem_bytes: 0,
            }
        } else {
            LaunchConfig {
                grid_dim: (splits as u32, hq as u32, (b * lq) as u32),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            }
        };
        let comb_cfg = LaunchConfig {
            grid_dim: (hq as u32, (b * lq) as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let split_fn = if mma {
            let pre = if (splits <= PRE_SPLITS_MAX || b * tiles > 1 || h2) && pre_enabled() {
                "pre_"
            } else {
                ""
            };
            let cl = if cluster { "cl_" } else { "" };
            let h2 = if h2 { "h2_" } else { "" };
            func!(dev, &format!("attn_mma_{pre}{cl}{h2}bf16_d{d}"))?
        } else {
            func!(dev, &format!("attn_split_{sfx}_l{}", d / 16))?
        };
        let comb_fn = func!(dev, &format!("attn_combine_{sfx}"))?;
        macro_rules! run {
            ($t:ty) => {{
                let (q, k, v) = (
                    view::<$t>(qs, ql)?,
                    view::<$t>(ks, kl)?,
                    view::<$t>(vs, vl)?,
                );
                let stream = dev.cuda_stream();
                // SAFETY: every element is written by the kernels below before anything reads it.
                let o = unsafe { dev.alloc::<$t>(b * lq * hq * d)? };
                let mut bld = Launch::new(&split_fn, &stream);
                bld.buf(&q);
                bld.buf(&k);
                bld.buf(&v);
                bld.buf(&scratch);
                if mma {
                    bld.buf(&o);
                }
                if cluster {
                    bld.cluster(splits as u32);
                }
                bld.val(&args);
                // SAFETY: the arguments match the kernel's signature in attention*.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { bld.run(split_cfg) }?;
                // the cluster kernel merged its splits itself
                if !cluster {
                    let mut bld = Launch::new(&comb_fn, &stream);
                    bld.buf(&scratch);
                    bld.buf(&o);
                    bld.val(&args);
                    // SAFETY: the arguments match the kernel's signature in attention*.cuh and every buffer
                    // outlives the launch in stream order (one stream; frees are stream-ordered).
                    unsafe { bld.run(comb_cfg) }?;
                }
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

/// Whether bf16 attention may take the tensor-core kernel (`DSPARK_CUDA_ATTN_MMA=0` keeps the
/// one-row kernel, for side-by-side runs).
fn mma_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_MMA").map_or(true, |v| v != "0"))
}

/// `DSPARK_CUDA_ATTN_CLUSTER=0` never takes the cluster kernels (split launch + combine
/// instead), for runs side by side.
fn cluster_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_CLUSTER").map_or(true, |v| v != "0"))
}

/// `DSPARK_CUDA_ATTN_PRE=0` never takes the PRE kernels, for runs side by side.
fn pre_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_PRE").map_or(true, |v| v != "0"))
}
