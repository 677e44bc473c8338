//! Cache locations. `DSPARK_CACHE` overrides the platform cache directory.

use std::path::PathBuf;

/// Root of dspark's cache (`$DSPARK_CACHE`, else the platform cache dir, e.g. ~/.cache/dspark).
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("DSPARK_CACHE") {
        return PathBuf::from(p);
    }
    directories::ProjectDirs::from("", "", "dspark")
        .map(|d| d.cache_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from(".cache/dspark"))
}

/// Fetched registry artefacts (tokenizer, demo weights, benchmark data).
pub fn artefact_dir() -> PathBuf {
    cache_dir().join("artefacts")
}
