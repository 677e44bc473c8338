//! Paths: dspark's cache (`DSPARK_CACHE` overrides), the Hugging Face cache, LM Studio's
//! folders and the settings file. Computes paths only; creates nothing.

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

/// The Hugging Face hub cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `$XDG_CACHE_HOME/huggingface/hub`
/// or `~/.cache/huggingface/hub`), laid out as `models--org--name/{blobs,snapshots,refs}`.
pub fn hf_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        return PathBuf::from(p).join("hub");
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("huggingface/hub");
    }
    home().join(".cache/huggingface/hub")
}

/// LM Studio's model folders (`~/.lmstudio/models`, `~/.cache/lm-studio/models`), each holding
/// `<org>/<name>`. `DSPARK_LMSTUDIO_DIRS` (a path list) replaces them, for tests.
pub fn lmstudio_dirs() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("DSPARK_LMSTUDIO_DIRS") {
        return std::env::split_paths(&p).collect();
    }
    let h = home();
    vec![
        h.join(".lmstudio/models"),
        h.join(".cache/lm-studio/models"),
    ]
}

/// Where `dspark` keeps settings (`$DSPARK_CONFIG`, else e.g. ~/.config/dspark/config.toml).
pub fn config_file() -> PathBuf {
    if let Some(p) = std::env::var_os("DSPARK_CONFIG") {
        return PathBuf::from(p);
    }
    directories::ProjectDirs::from("", "", "dspark")
        .map(|d| d.config_dir().join("config.toml"))
        .unwrap_or_else(|| PathBuf::from("dspark.toml"))
}

fn home() -> PathBuf {
    directories::BaseDirs::new()
        .map(|d| d.home_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from("."))
}
