//! Where models come from: cache paths, the bundled demo model, and (later) the registry and
//! hub downloads. The only crate that touches the network.

pub mod demo;
pub mod paths;

/// Failures while locating or fetching a model.
#[derive(thiserror::Error, Debug)]
pub enum HubError {
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("fetching {what} failed: {message}")]
    Fetch { what: String, message: String },
    #[error("{path}: sha256 {got} does not match the pinned {want}")]
    Integrity { path: std::path::PathBuf, got: String, want: String },
    #[error("{0}")]
    NotFound(String),
}
