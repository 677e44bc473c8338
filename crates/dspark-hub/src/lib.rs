//! Where models come from: the registry and drafter resolution, cache paths (dspark's own, the
//! Hugging Face cache, LM Studio's folders), hub downloads with resume and integrity checks, the
//! bundled demo model and the settings file. The only crate that touches the network.

pub mod contain;
pub mod demo;
pub mod download;
mod fetch;
pub mod launch;
pub mod layers;
pub mod local;
pub mod paths;
pub mod registry;
mod resume;
pub mod settings;
pub mod shape;

pub use download::{pull, Progress, PullOptions, Pulled};
pub use local::resolve_model_path;
pub use registry::{resolve, Mode, Resolved};

/// Failures while locating or fetching a model.
#[derive(thiserror::Error, Debug)]
pub enum HubError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("fetching {what} failed: {message}")]
    Fetch { what: String, message: String },
    #[error("{path}: sha256 {got} does not match the pinned {want}")]
    Integrity {
        path: std::path::PathBuf,
        got: String,
        want: String,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("no built-in {mode} drafter is registered for target `{target}`: pass --drafter PATH_OR_REPO")]
    NoDrafter { mode: &'static str, target: String },
    #[error("`{0}` is not a Hugging Face repo id (expected ORG/NAME)")]
    BadRepoId(String),
    #[error("{url}: HTTP {status}{hint}")]
    Http {
        url: String,
        status: u16,
        hint: &'static str,
    },
    #[error("{url}: {message}")]
    Network { url: String, message: String },
    #[error("{file}: downloaded {got} bytes with {algo} {got_hash}, the hub says {want} bytes with {want_hash}")]
    Corrupt {
        file: String,
        algo: &'static str,
        got: u64,
        got_hash: String,
        want: u64,
        want_hash: String,
    },
    #[error("{repo}@{revision} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE=1 forbids downloading it")]
    Offline {
        repo: String,
        revision: String,
        cache: std::path::PathBuf,
    },
    #[error("the download was cancelled (what arrived is kept; the next pull resumes it)")]
    Cancelled,
    #[error("`{model}` cannot be loaded: {reason}")]
    Unavailable { model: String, reason: &'static str },
    #[error("{0}")]
    Settings(#[from] settings::SettingsError),
    #[error("unexpected hub metadata from {url}: {message}")]
    Metadata { url: String, message: String },
    /// A path that would lead outside where it must stay (a revision with `..`, a cached
    /// snapshot linking outside the cache).
    #[error("refusing {path}: {reason}")]
    UnsafePath {
        path: std::path::PathBuf,
        reason: String,
    },
}
