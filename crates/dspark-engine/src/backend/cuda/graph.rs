//! [`StepGraphs`]: fixed-shape forward steps captured once as CUDA graphs and replayed.
//!
//! A step (a model's forward of up to [`super::ROWS_MAX`] tokens over one cache) is the same
//! launches every time except for three inputs: the token ids, the first position and the
//! number of keys. While a step is captured ([`StepGraphs::live`] is set) the ops read the ids
//! from one device buffer and the position from its first word (`QkvRopeStore` and
//! `CacheAttention` take it as `step`; attention's grid covers the cache's capacity), so one
//! replay serves every later step of that shape: the host writes `[position, ids..]` into the
//! buffer and launches the graph, one call instead of about ten per layer.
//!
//! A graph is valid while the buffers it was captured over are: its key names the cache's
//! buffers ([`crate::kv::KvCache::buffers_id`]), the row count and the outputs asked for. The
//! first use of a key runs the step eagerly once (which also fills candle's cache of small
//! parameter uploads, so that the capture needs no host copy), then captures it and launches
//! the graph. A step that cannot be captured runs eagerly from then on. Outputs live in the
//! graph's own memory (freed and reallocated at the same addresses on every launch): they hold
//! the latest replay's values until that key is replayed again.
//!
//! Exactness: the captured kernels are the eager ones with the position read on the device;
//! attention over the whole capacity adds only empty splits, which the combine skips, so a
//! replay gives the eager step's bits (`tests/tests/cuda_graphs.rs` on the GPU).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use candle_core::cuda::cudarc::driver::{sys, CudaGraph, DevicePtr};
use candle_core::{CudaDevice, DType, Device, Result, Storage, Tensor};

use super::{msg, ROWS_MAX};
use crate::backend::StepKey;

/// Graphs kept at most; past that the oldest caches' graphs are dropped first.
const KEEP: usize = 64;

/// What `DSPARK_CUDA_GRAPHS` says about capturing and replaying steps, when it is set (`0`
/// off, anything else on; for side-by-side runs in one binary). Unset, the backend starts
/// without graphs (on the H200 the 8B shape's replays were slower than eager steps,
/// docs/cuda.md "ninth slice") and the launcher turns them on for small targets, whose steps
/// are bound by the host's launches (`launch::graphs_by_default`).
pub fn configured() -> Option<bool> {
    static ON: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_CUDA_GRAPHS").ok().map(|v| v != "0"))
}

/// What the ops of a step under capture read instead of host values.
#[derive(Clone)]
pub struct Live {
    /// Device address of the step's first position (an `i32`).
    pub step: u64,
    /// `[ROWS_MAX]` u32: the ids of the step's rows (a view of the input buffer).
    pub ids: Tensor,
}

struct Captured {
    graph: CudaGraph,
    /// The step's outputs, in the graph's memory.
    outs: Vec<Tensor>,
    /// When it was last launched (for eviction).
    used: u64,
}

// SAFETY: a CUDA graph and its executable are not tied to a thread; every use of one goes
// through the `StepGraphs` mutex, which serializes them as the driver requires.
unsafe impl Send for Captured {}

#[derive(Default)]
struct State {
    /// `[1 + ROWS_MAX]` u32 on the device: the position, then the ids.
    inputs: Option<Tensor>,
    graphs: HashMap<StepKey, Captured>,
    /// Step shapes (kind, rows and what else shapes them, any cache) whose capture failed: an op of
    /// theirs cannot be captured, so they run eagerly without trying again.
    failed: HashSet<(&'static str, usize, Vec<usize>)>,
    clock: u64,
    stats: GraphStats,
}

/// Counts since the backend was made (for tests and logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Steps captured as graphs.
    pub captured: u64,
    /// Steps run by replaying a graph.
    pub replayed: u64,
    /// Steps whose capture failed (they run eagerly).
    pub failed: u64,
}

/// Captured steps of one device, by key.
#[derive(Default)]
pub struct StepGraphs {
    state: Mutex<State>,
    /// Set while a step is being captured, with the capturing thread (another thread's ops,
    /// which the capture does not record, keep their host values).
    live: Mutex<Option<(std::thread::ThreadId, Live)>>,
    /// Whether `live` is set: every op asks, so the common answer costs no lock.
    capturing: AtomicBool,
}

/// `m` locked (a poisoned lock is taken as it is: the state stays consistent between calls).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn cuda_err(e: impl std::fmt::Debug) -> candle_core::Error {
    msg(format!("cuda graph: {e:?}"))
}

/// Device address of `t`'s first element (a u32 tensor on `dev`).
fn address(t: &Tensor, dev: &CudaDevice) -> Result<u64> {
    let (st, l) = t.storage_and_layout();
    match &*st {
        Storage::Cuda(c) => {
            let s = c.as_cuda_slice::<u32>()?;
            let stream = dev.cuda_stream();
            let (p, _g) = s.device_ptr(&stream);
            Ok(p + 4 * l.start_offset() as u64)
        }
        _ => Err(msg("cuda graph: the input buffer is not on the device")),
    }
}

impl std::fmt::Debug for StepGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("StepGraphs")
            .field("graphs", &st.graphs.len())
            .field("failed", &st.failed.len())
            .finish()
    }
}

impl StepGraphs {
    /// The capture in progress, if any: ops then read the position and ids on the device.
    pub fn live(&self) -> Option<Live> {
        if !self.capturing.load(Ordering::Acquire) {
            return None;
        }
        let g = lock(&self.live);
        match &*g {
            Some((t, l)) if *t == std::thread::current().id() => Some(l.clone()),
            _ => None,
        }
    }

    pub fn stats(&self) -> GraphStats {
        lock(&self.state).stats
    }

    /// Writes `[start, ids..]` into the input buffer, in stream order.
    fn write_inputs(dev: &CudaDevice, inputs: &Tensor, start: usize, ids: &[u32]) -> Result<()> {
        let mut host = Vec::with_capacity(1 + ids.len());
        host.push(u32::try_from(start).map_err(|_| msg("cuda graph: position past u32"))?);
        host.extend_from_slice(ids);
        let dst = address(inputs, dev)?;
        let stream = dev.cuda_stream();
        // SAFETY: `dst` holds 1 + ROWS_MAX u32 (ids.len() <= ROWS_MAX is checked by the caller);
        // the copy from pageable memory stages `host` before the call returns.
        let r = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                host.as_ptr() as *const std::ffi::c_void,
                4 * host.len(),
                stream.cu_stream(),
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(cuda_err(r));
        }
        Ok(())
    }

    /// Runs the step `body` (ids `ids` at position `start`): by replaying its graph when `key`
    /// was captured, else eagerly, capturing it afterwards where it can be.
    pub fn run(
        &self,
        device: &Device,
        key: &StepKey,
        ids: &[u32],
        start: usize,
        body: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let Device::Cuda(dev) = device else {
            return body();
        };
        if ids.is_empty() || ids.len() > ROWS_MAX {
            return body();
        }
        {
            let mut st = lock(&self.state);
            if st.failed.contains(&(key.who, key.rows, key.shape.clone())) {
                drop(st);
                return body();
            }
            st.clock += 1;
            let now = st.clock;
            let inputs = match &st.inputs {
                Some(t) => t.clone(),
                None => {
                    let t = Tensor::zeros(1 + ROWS_MAX, DType::U32, device)?;
                    st.inputs = Some(t.clone());
                    t
                }
            };
            if let Some(c) = st.graphs.get_mut(key) {
                Self::write_inputs(dev, &inputs, start, ids)?;
                c.graph.launch().map_err(cuda_err)?;
                c.used = now;
                let outs = c.outs.clone();
                st.stats.replayed += 1;
                return Ok(outs);
            }
        }
        // first use: eagerly, with candle's small uploads cached for the capture
        let _cached = dev.enable_cuda_graph_htod_cache();
        let eager = body()?;
        match self.capture(dev, key, ids, start, body) {
            Ok(outs) => Ok(outs),
            Err(e) => {
                if std::env::var_os("DSPARK_CUDA_GRAPHS_LOG").is_some() {
                    eprintln!("dspark: step {key:?} runs without a graph: {e}");
                }
                let mut st = lock(&self.state);
                st.failed.insert((key.who, key.rows, key.shape.clone()));
                st.stats.failed += 1;
                Ok(eager)
            }
        }
    }

    /// Captures `body` as the graph of `key`, launches it for this step and keeps it.
    fn capture(
        &self,
        dev: &CudaDevice,
        key: &StepKey,
        ids: &[u32],
        start: usize,
        body: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let inputs = {
            let st = lock(&self.state);
            st.inputs.clone().expect("made before the first capture")
        };
        let live = Live {
            step: address(&inputs, dev)?,
            ids: inputs.narrow(0, 1, ROWS_MAX)?,
        };
        let stream = dev.cuda_stream();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_err)?;
        *lock(&self.live) = Some((std::thread::current().id(), live));
        self.capturing.store(true, Ordering::Release);
        let built = body();
        self.capturing.store(false, Ordering::Release);
        *lock(&self.live) = None;
        let graph = stream.end_capture(
            sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        );
        let (outs, graph) = match (built, graph) {
            (Ok(outs), Ok(Some(g))) => (outs, g),
            (built, graph) => {
                let why = match (&built, &graph) {
                    (Err(e), _) => format!("the step failed under capture: {e}"),
                    (_, Err(e)) => format!("ending the capture: {e:?}"),
                    _ => "the capture gave no graph".to_string(),
                };
                // what the failed capture allocated was never backed: do not free it
                if let Ok(outs) = built {
                    std::mem::forget(outs);
                }
                return Err(msg(format!("cuda graph: {why}")));
            }
        };
        Self::write_inputs(dev, &inputs, start, ids)?;
        graph.launch().map_err(cuda_err)?;
        let mut st = lock(&self.state);
        // the same cache's graphs over replaced buffers can never run again
        st.graphs
            .retain(|k, _| k.cache.0 != key.cache.0 || k.cache.1 == key.cache.1);
        if st.graphs.len() >= KEEP {
            let mut by_age: Vec<(u64, StepKey)> =
                st.graphs.iter().map(|(k, c)| (c.used, k.clone())).collect();
            by_age.sort_by_key(|(used, _)| *used);
            for (_, k) in by_age.iter().take(st.graphs.len() + 1 - KEEP) {
                st.graphs.remove(k);
            }
        }
        st.clock += 1;
        st.stats.captured += 1;
        let used = st.clock;
        st.graphs.insert(
            key.clone(),
            Captured {
                graph,
                outs: outs.clone(),
                used,
            },
        );
        Ok(outs)
    }
}
