//! Loads a model the way `dspark serve` does, through the same two calls: the hub turns the
//! settings (the load request over the environment over the settings file) into a
//! `LaunchSpec` (registry, unavailable models refused before any download, paths, friendly
//! id), and `dspark_engine::launch::spawn` starts the engine on it. No start-up code of its own.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use dspark_engine::worker::EngineHandle;
use dspark_hub::download::Progress;
use dspark_hub::launch::Launch;
use dspark_hub::layers::Layers;
use dspark_hub::settings::Settings;
use dspark_server::Engine;

use crate::host::LoadRequest;

/// The target and drafter that `req` resolves to (registry ids, repos, paths or `demo`).
pub fn resolve(model: &str, mode: &str, drafter: Option<&str>) -> Result<dspark_hub::Resolved> {
    let m = dspark_hub::Mode::parse(mode)
        .with_context(|| format!("unknown mode `{mode}` (dspark, dflash, draft, baseline)"))?;
    let model = if model.trim().is_empty() {
        "demo"
    } else {
        model
    };
    Ok(dspark_hub::resolve(
        model,
        m,
        drafter.filter(|d| !d.is_empty()),
    )?)
}

/// The settings layer of a load request (the Models pane's fields).
pub fn request_layer(req: &LoadRequest) -> Result<Settings> {
    let mode = dspark_hub::Mode::parse(&req.mode).with_context(|| {
        format!(
            "unknown mode `{}` (dspark, dflash, draft, baseline)",
            req.mode
        )
    })?;
    Ok(Settings {
        model: Some(req.model.trim())
            .filter(|m| !m.is_empty())
            .map(str::to_string),
        mode: Some(mode),
        drafter: req.drafter.clone().filter(|d| !d.is_empty()),
        max_draft: req.max_draft,
        ..Settings::default()
    })
}

/// The launch for `req` with the settings file at `settings_path`: what `dspark serve` would
/// run with `--model`, `--mode`, `--drafter` and `--max-draft` set as in `req`.
pub fn launch_for(
    settings_path: &Path,
    req: &LoadRequest,
    progress: &dyn Progress,
) -> Result<Launch> {
    let layers = Layers::load(request_layer(req)?, Some(settings_path))?;
    Ok(dspark_hub::launch::launch_spec(&layers.merged(), progress)?)
}

/// Resolves, fetches if needed (reporting to `progress`), and starts the engine worker.
pub fn load_engine(
    settings_path: &Path,
    req: &LoadRequest,
    progress: &dyn Progress,
) -> Result<(Arc<dyn Engine>, EngineHandle, String)> {
    let l = launch_for(settings_path, req, progress)?;
    let handle = dspark_engine::launch::spawn(&l.spec)
        .with_context(|| format!("starting {}", l.spec.model.display()))?;
    Ok((Arc::new(handle.clone()), handle, l.id))
}
