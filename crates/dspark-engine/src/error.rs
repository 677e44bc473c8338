//! The engine's error type: what callers above the engine (CLI, server, app) can see.

use crate::backend::BackendError;
use crate::weights::LoadError;

#[derive(thiserror::Error, Debug)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error(
        "prompt of {prompt} tokens plus {max_new} new tokens exceeds the context of {max} tokens"
    )]
    ContextOverflow {
        prompt: usize,
        max_new: usize,
        max: usize,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("drafter does not fit the target: {0}")]
    DrafterMismatch(String),
    #[error("generation cancelled")]
    Cancelled,
    #[error("the request queue is full")]
    QueueFull,
    #[error("the engine worker has stopped")]
    WorkerGone,
}
