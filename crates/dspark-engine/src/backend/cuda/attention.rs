//! [`CacheAttention`]: attention over the KV cache views in place (`attention.cuh`,
//! `attention_mma.cuh`). bf16 heads of 64 or 128 with 16-byte aligned rows run on tensor cores,
//! one block per (key split, kv head, 16-row tile of query rows x the group's query heads), so
//! each K/V row is read once per kv head; other heads and f32 take one (split, head, row) per
//! block. Both write the same per-split scratch, and the last block of each group of splits to
//! finish merges them in split order, so one launch does the whole attention. The scratch and the
//! groups' arrival counters are per-device buffers kept between calls (one stream: a call's use
//! of them ends before the next call's starts).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda::WrapErr;
use candle_core::{CpuStorage, CudaDevice, CudaStorage, CustomOp3, DType, Layout, Result, Shape};
use half::bf16;

use super::{cpu_only, msg, suffix, view};
use crate::backend::AttnMask;

/// Keys per split (the kernels' `SPLIT`): a row's reduction order depends only on the keys it
/// sees.
const SPLIT: usize = 128;

/// Floats ahead of a split's values in its scratch entry (`SCR_ACC`: m, l and padding, so the
/// values are 16-byte aligned).
const SCR_ACC: usize = 4;

/// Scratch (f32 values) kept per device between calls; a call needing more (a long prefill)
/// allocates its own for that call.
const SCRATCH_KEEP: usize = 1 << 25;

/// A device's kept buffers: split scratch (grown on demand up to [`SCRATCH_KEEP`]) and zeroed
/// arrival counters (grown on demand; each group's last block resets its own, so they are zero
/// again between launches on the one stream).
#[derive(Default)]
struct Kept {
    scratch: Option<Arc<CudaSlice<f32>>>,
    counters: Option<Arc<CudaSlice<u32>>>,
}

/// The buffers one call launches with.
struct Bufs {
    scratch: Arc<CudaSlice<f32>>,
    counters: Arc<CudaSlice<u32>>,
}

/// Scratch of at least `floats` values and at least `groups` zeroed counters on `dev`. A buffer
/// replaced by a larger one is freed in stream order, after the launches that used it.
fn buffers(dev: &CudaDevice, floats: usize, groups: usize) -> Result<Bufs> {
    static KEPT: Mutex<Option<HashMap<candle_core::cuda::DeviceId, Kept>>> = Mutex::new(None);
    let mut g = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let kept = g
        .get_or_insert_with(HashMap::new)
        .entry(dev.id())
        .or_default();
    let counters = match &kept.counters {
        Some(c) if c.len() >= groups => c.clone(),
        _ => {
            let c = Arc::new(dev.alloc_zeros::<u32>(groups.next_power_of_two().max(1024))?);
            kept.counters = Some(c.clone());
            c
        }
    };
    let scratch = match &kept.scratch {
        Some(s) if s.len() >= floats => s.clone(),
        // SAFETY: every value a merge reads is written by its split's block earlier in the launch.
        _ if floats > SCRATCH_KEEP => Arc::new(unsafe { dev.alloc::<f32>(floats)? }),
        _ => {
            let len = floats.next_power_of_two().max(1 << 16);
            // SAFETY: as above.
            let s = Arc::new(unsafe { dev.alloc::<f32>(len)? });
            kept.scratch = Some(s.clone());
            s
        }
    };
    Ok(Bufs { scratch, counters })
}

/// Kernel arguments of the attention kernels (layout shared with `AttnArgs` in attention.cuh).
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
        // the tensor-core kernel also stages V rows with 16-byte loads
        let mma = dt == DType::BF16
            && (d == 64 || d == 128)
            && vec
            && [v_b, v_h, v_r].iter().all(|&x| x % 8 == 0)
            && vl.start_offset().is_multiple_of(8)
            && mma_enabled();
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
        let cfg = if mma {
            let tiles = (lq * (hq / hkv)).div_ceil(16);
            LaunchConfig {
                grid_dim: (splits as u32, hkv as u32, (b * tiles) as u32),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            }
        } else {
            LaunchConfig {
                grid_dim: (splits as u32, hq as u32, (b * lq) as u32),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            }
        };
        // one arrival counter per group of splits (grid y x z)
        let groups = (cfg.grid_dim.1 * cfg.grid_dim.2) as usize;
        let fused = fused_enabled();
        let bufs = buffers(&dev, b * lq * hq * splits * (d + SCR_ACC), groups)?;
        let f = if mma {
            func!(dev, &format!("attn_mma_bf16_d{d}"))?
        } else {
            func!(dev, &format!("attn_split_{sfx}_l{}", d / 16))?
        };
        macro_rules! run {
            ($t:ty) => {{
                let (q, k, v) = (
                    view::<$t>(qs, ql)?,
                    view::<$t>(ks, kl)?,
                    view::<$t>(vs, vl)?,
                );
                // SAFETY: every element is written by the merge (fused, or attn_combine's) below.
                let o = unsafe { dev.alloc::<$t>(b * lq * hq * d)? };
                let mut bld = f.builder();
                bld.arg(&q);
                bld.arg(&k);
                bld.arg(&v);
                bld.arg(&*bufs.scratch);
                bld.arg(&o);
                let null = 0u64;
                if fused {
                    bld.arg(&*bufs.counters);
                } else {
                    bld.arg(&null);
                }
                bld.arg(&args);
                // SAFETY: the arguments match the kernel's signature in attention*.cuh and every buffer
                // outlives the launch in stream order (one stream; frees are stream-ordered).
                unsafe { bld.launch(cfg) }.w()?;
                if !fused {
                    let comb = func!(dev, &format!("attn_combine_{sfx}"))?;
                    let cfg = LaunchConfig {
                        grid_dim: (hq as u32, (b * lq) as u32, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut bld = comb.builder();
                    bld.arg(&*bufs.scratch);
                    bld.arg(&o);
                    bld.arg(&args);
                    // SAFETY: as above (attn_combine's signature).
                    unsafe { bld.launch(cfg) }.w()?;
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

/// Whether the split kernel's last blocks merge the splits (`DSPARK_CUDA_ATTN_FUSED=0`: a second
/// launch, `attn_combine`, does, with the same arithmetic and bits; for side-by-side runs).
fn fused_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_FUSED").map_or(true, |v| v != "0"))
}

/// Whether bf16 attention may take the tensor-core kernel (`DSPARK_CUDA_ATTN_MMA=0` keeps the
/// one-row kernel, for side-by-side runs).
fn mma_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_ATTN_MMA").map_or(true, |v| v != "0"))
}
