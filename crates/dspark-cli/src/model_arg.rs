//! From flags to a launch: the settings layers (flags, env, and for `serve` the settings file),
//! then the hub's `launch_spec` (registry, downloads with progress bars, friendly id). The
//! engine is started by `dspark_engine::launch` only.

use std::path::{Path, PathBuf};

use anyhow::Result;
use dspark_hub::launch::{launch_spec, Launch};
use dspark_hub::layers::Layers;
use dspark_hub::settings::Settings;

/// A directory, a .gguf file, `demo`, a registry id (`qwen3-8b`) or a hub repo id, which is
/// taken from LM Studio's folders or the HF cache, or downloaded with progress bars.
pub fn resolve_model(model: &str) -> Result<PathBuf> {
    Ok(dspark_hub::resolve_model_path(
        model,
        false,
        &crate::pull::Bars::new(),
    )?)
}

/// Flags over the environment over `file` (when given) over the defaults.
pub fn layers(flags: Settings, file: Option<&Path>) -> Result<Layers> {
    Ok(Layers::load(flags, file)?)
}

/// The launch of merged settings (downloads what is missing, with progress bars).
pub fn launch(merged: &Settings) -> Result<Launch> {
    Ok(launch_spec(merged, &crate::pull::Bars::new())?)
}
