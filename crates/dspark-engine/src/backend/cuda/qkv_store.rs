//! [`QkvRopeStore`]: one forward's attention inputs in one launch (`qkv_rope_store` in
//! rope.cuh): the queries normed and rotated into a new `[1, hq, L, d]` tensor, the keys normed
//! and rotated straight into the key cache and the values copied into the value cache. It
//! replaces two `norm_rope` launches and two cache writes per layer, with the same bits.

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::{
    CpuStorage, CudaStorage, CustomOp3, DType, Layout, Result, Shape, Storage, Tensor,
};
use half::bf16;

use super::launch::Launch;
use super::{cpu_only, msg, suffix, view};

/// Whether the model takes this op (`DSPARK_CUDA_QKV1=0`: the separate norm_rope launches and
/// cache writes, for side-by-side runs in one binary).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_QKV1").map_or(true, |v| v != "0"))
}

/// Kernel arguments (layout shared with `QkvStoreArgs` in rope.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct QkvStoreArgs {
    step: u64,
    sq: i64,
    sk: i64,
    sv: i64,
    hq: i32,
    hkv: i32,
    len: i32,
    d: i32,
    start: i32,
    interleaved: i32,
    cap: i32,
    at: i32,
    eps: f32,
}

// SAFETY: plain old data with the C layout the kernel reads.
unsafe impl DeviceRepr for QkvStoreArgs {}

/// Applied to the heads `(q, k, v)`, each `[1, L, heads, d]` with unit inner and head-size head
/// strides (slices of a fused projection). The norms share one eps (`eps`, with either norm).
pub struct QkvRopeStore<'a> {
    pub q_norm: Option<&'a Tensor>,
    pub k_norm: Option<&'a Tensor>,
    pub eps: f32,
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub start: usize,
    pub interleaved: bool,
    /// `[1, hkv, cap, d]` contiguous: written at rows `at..at + L`.
    pub k_cache: &'a Tensor,
    pub v_cache: &'a Tensor,
    pub at: usize,
    /// Whether to write the queries: without, the first input is only a stand-in (the keys),
    /// nothing of it is read, and the result is `[1, 0, L, d]` (a drafter's context keys and
    /// values).
    pub queries: bool,
    /// A captured step's device position (`graph.rs`): it replaces `start` and `at` when the
    /// graph is replayed (the cache's row 0 is position 0).
    pub step: Option<u64>,
}

/// Whether `t` is `[1, L, heads, d]` with rows of `d` at a unit stride, heads `d` apart.
fn heads_layout(t: &Tensor, l: usize, d: usize) -> bool {
    let (dims, st) = (t.dims(), t.stride());
    dims.len() == 4 && dims[0] == 1 && dims[1] == l && dims[3] == d && st[3] == 1 && st[2] == d
}

impl QkvRopeStore<'_> {
    /// Whether the op takes these heads and tables (else the caller runs the separate ops).
    pub fn fits(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
        let (qd, kd) = (q.dims(), k.dims());
        if qd.len() != 4 || kd.len() != 4 {
            return false;
        }
        let (l, hq, hkv, d) = (qd[1], qd[2], kd[2], qd[3]);
        let dt = q.dtype();
        let same = |t: &Tensor| t.dtype() == dt;
        let table =
            |t: &Tensor| same(t) && t.is_contiguous() && t.rank() == 2 && t.dims()[1] * 2 == d;
        let cache = |c: &Tensor| {
            let cd = c.dims();
            same(c)
                && c.is_contiguous()
                && cd.len() == 4
                && cd[0] == 1
                && cd[1] == hkv
                && cd[3] == d
                && self.at + l <= cd[2]
        };
        let norm =
            |w: Option<&Tensor>| w.is_none_or(|w| same(w) && w.dims() == [d] && w.is_contiguous());
        matches!(dt, DType::F32 | DType::BF16)
            && d % 64 == 0
            && d <= 256
            && l > 0
            && hq > 0
            && hkv > 0
            && heads_layout(q, l, d)
            && heads_layout(k, l, d)
            && heads_layout(v, l, d)
            && v.dims()[2] == hkv
            && same(k)
            && same(v)
            && table(self.cos)
            && table(self.sin)
            && self.start + l <= self.cos.dims()[0]
            && cache(self.k_cache)
            && cache(self.v_cache)
            && norm(self.q_norm)
            && norm(self.k_norm)
    }
}

impl CustomOp3 for QkvRopeStore<'_> {
    fn name(&self) -> &'static str {
        "dspark-cuda-qkv-rope-store"
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
        let (qd, kd) = (ql.dims(), kl.dims());
        let (l, hkv, d) = (qd[1], kd[2], qd[3]);
        let hq = if self.queries { qd[2] } else { 0 };
        let (kc, vc) = (self.k_cache.dims(), self.v_cache.dims());
        if kc != vc
            || kc.len() != 4
            || kc[1] != hkv
            || kc[3] != d
            || self.at + l > kc[2]
            || !self.k_cache.is_contiguous()
            || !self.v_cache.is_contiguous()
            || d % 64 != 0
            || d > 256
        {
            return Err(msg(format!(
                "qkv_rope_store: {l} rows of {hkv} x {d} do not fit caches {kc:?} / {vc:?} at {}",
                self.at
            )));
        }
        let cap = kc[2];
        let args = QkvStoreArgs {
            step: self.step.unwrap_or(0),
            sq: ql.stride()[1] as i64,
            sk: kl.stride()[1] as i64,
            sv: vl.stride()[1] as i64,
            hq: hq as i32,
            hkv: hkv as i32,
            len: l as i32,
            d: d as i32,
            start: self.start as i32,
            interleaved: self.interleaved as i32,
            cap: cap as i32,
            at: self.at as i32,
            eps: self.eps,
        };
        let dt = qs.dtype();
        let dev = qs.device().clone();
        let f = func!(
            dev,
            &format!("qkv_rope_store_{}", suffix(dt, "qkv_rope_store")?)
        )?;
        let cfg = LaunchConfig {
            grid_dim: ((l * (hq + 2 * hkv)) as u32, 1, 1),
            block_dim: ((d / 2) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // the tables, norms and caches, read-locked until the launch is enqueued (the caches
        // are written by the kernel: candle's own in-place writes take the same path on the
        // device, and the one stream orders them against every other use)
        let mut extra = vec![self.cos, self.sin, self.k_cache, self.v_cache];
        extra.extend(self.q_norm);
        extra.extend(self.k_norm);
        let held: Vec<_> = extra.iter().map(|t| t.storage_and_layout()).collect();
        let cuda = |i: usize| -> Result<(&CudaStorage, &Layout)> {
            match &*held[i].0 {
                Storage::Cuda(c) => Ok((c, held[i].1)),
                _ => Err(msg(
                    "qkv_rope_store: a table or cache is not on the CUDA device",
                )),
            }
        };
        let null = 0u64;
        let stream = dev.cuda_stream();
        macro_rules! run {
            ($t:ty) => {{
                let (q, k, v) = (
                    view::<$t>(qs, ql)?,
                    view::<$t>(ks, kl)?,
                    view::<$t>(vs, vl)?,
                );
                let mut tabs = Vec::with_capacity(held.len());
                for i in 0..held.len() {
                    let (s, lay) = cuda(i)?;
                    tabs.push(view::<$t>(s, lay)?);
                }
                // SAFETY: every element is written by the kernel below before anything reads it.
                let out = unsafe { dev.alloc::<$t>((hq * l * d).max(1))? };
                let mut b = Launch::new(&f, &stream);
                b.buf(&q);
                b.buf(&k);
                b.buf(&v);
                let mut next = 4;
                for present in [self.q_norm.is_some(), self.k_norm.is_some()] {
                    if present {
                        b.buf(&tabs[next]);
                        next += 1;
                    } else {
                        b.val(&null);
                    }
                }
                b.buf(&tabs[0]);
                b.buf(&tabs[1]);
                b.buf(&out);
                b.buf(&tabs[2]);
                b.buf(&tabs[3]);
                b.val(&args);
                // SAFETY: the arguments match qkv_rope_store's signature in rope.cuh; `fits`
                // (checked by the caller, and the shapes here come from the same tensors) keeps
                // every write inside the caches' rows; buffers outlive the launch in stream order.
                unsafe { b.run(cfg) }?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = match dt {
            DType::BF16 => run!(bf16),
            DType::F32 => run!(f32),
            other => return Err(msg(format!("qkv_rope_store: {other:?}"))),
        };
        Ok((out, Shape::from(vec![1, hq, l, d])))
    }
}
