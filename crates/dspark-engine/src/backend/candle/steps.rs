//! The candle backend's fixed-shape steps ([`crate::backend::Backend::run_step`]): on CUDA,
//! captured as graphs and replayed (`backend/cuda/graph.rs`), with the capture in progress
//! telling the ops to read the position and ids on the device; on the CPU, only the model's
//! step path (for tests).

use candle_core::Tensor;

use super::CandleBackend;
#[cfg(feature = "cuda")]
use super::{cuda_ops, err, DType};
use crate::backend::{BResult, StepKey};

impl CandleBackend {
    /// CUDA graphs of steps as `DSPARK_CUDA_GRAPHS` says, when it is set (builds with the
    /// `cuda` feature; `None` otherwise).
    pub fn step_graphs_from_env() -> Option<bool> {
        #[cfg(feature = "cuda")]
        return cuda_ops::graphs_configured();
        #[cfg(not(feature = "cuda"))]
        None
    }

    /// Short forwards as fixed-shape steps (CUDA graphs on a GPU; on the CPU the same model
    /// path without graphs, so that CPU tests cover it). See `step_graphs`.
    pub fn with_step_graphs(mut self, on: bool) -> Self {
        self.step_graphs = on;
        self
    }

    /// How many steps were captured as CUDA graphs, replayed, or failed to capture.
    #[cfg(feature = "cuda")]
    pub fn step_graph_stats(&self) -> cuda_ops::GraphStats {
        self.graphs.stats()
    }

    /// The step under capture, whose ops read the position and ids on the device.
    #[cfg(feature = "cuda")]
    pub(super) fn live_step(&self) -> Option<cuda_ops::Live> {
        if !self.step_graphs {
            return None;
        }
        self.graphs.live()
    }

    /// An error for an op that would bake a host position into a captured step.
    #[cfg(feature = "cuda")]
    pub(super) fn not_capturable(&self, op: &str) -> BResult<()> {
        match self.live_step() {
            Some(_) => Err(err(candle_core::Error::Msg(format!(
                "{op} cannot run inside a captured step"
            )))),
            None => Ok(()),
        }
    }

    /// [`crate::backend::Backend::step_graph_rows`]: see `step_graphs`.
    pub(super) fn graph_rows(&self) -> usize {
        const CPU_STEP_ROWS: usize = 16;
        if !self.step_graphs {
            return 0;
        }
        if self.device.is_cpu() {
            return CPU_STEP_ROWS;
        }
        #[cfg(feature = "cuda")]
        if self.cuda_kernels()
            && cuda_ops::qkv_rope_store_enabled()
            && matches!(self.dtype, DType::F32 | DType::BF16)
        {
            return cuda_ops::ROWS_MAX;
        }
        0
    }

    /// [`crate::backend::Backend::run_step`]: replayed graphs on CUDA, else the step itself.
    pub(super) fn run_fixed_step(
        &self,
        key: &StepKey,
        ids: &[u32],
        start: usize,
        step: &mut dyn FnMut() -> BResult<Vec<Tensor>>,
    ) -> BResult<Vec<Tensor>> {
        #[cfg(feature = "cuda")]
        if self.device.is_cuda() && self.graph_rows() >= ids.len() {
            // the body's errors cross candle's error type and back with their message
            let mut body = || step().map_err(|e| candle_core::Error::Msg(e.message));
            return self
                .graphs
                .run(&self.device, key, ids, start, &mut body)
                .map_err(err);
        }
        let _ = (key, ids, start);
        step()
    }
}
