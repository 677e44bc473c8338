//! The backend seam of the server: what the HTTP layer needs from an engine. Implemented by
//! the real [`EngineHandle`] and by the [`ScriptedEngine`](crate::scripted::ScriptedEngine)
//! test double.

use std::sync::Arc;

use dspark_engine::queue::CountersSnapshot;
use dspark_engine::tokenizer::Tokenizer;
use dspark_engine::worker::{EngineHandle, EventFn, JobParams, ModelInfo, Prepared, Prompt};
use dspark_engine::EngineError;

pub trait Engine: Send + Sync + 'static {
    fn info(&self) -> &ModelInfo;
    /// Renders and tokenizes; blocking (call from a blocking thread).
    fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError>;
    /// Queues a job; `QueueFull` at once when the queue is full.
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        on_event: EventFn,
    ) -> Result<(), EngineError>;
    fn counters(&self) -> CountersSnapshot;
    /// The model's tokenizer, for compiling output grammars; `None` when the engine has none
    /// (then `response_format` and forced `tool_choice` are refused with a 400).
    fn tokenizer(&self) -> Option<Arc<Tokenizer>>;
}

impl Engine for EngineHandle {
    fn info(&self) -> &ModelInfo {
        EngineHandle::info(self)
    }
    fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError> {
        EngineHandle::prepare(self, prompt, max_new)
    }
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        on_event: EventFn,
    ) -> Result<(), EngineError> {
        EngineHandle::submit(self, prompt, params, on_event)
    }
    fn counters(&self) -> CountersSnapshot {
        EngineHandle::counters(self)
    }
    fn tokenizer(&self) -> Option<Arc<Tokenizer>> {
        Some(EngineHandle::tokenizer(self).clone())
    }
}
