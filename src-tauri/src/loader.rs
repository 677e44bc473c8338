//! Loads a model and its drafter on the engine worker thread, the way `dspark serve` does:
//! the hub resolves the target and the mode's drafter (registry, local folders, downloads),
//! the engine builds the pipeline on the candle backend.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::load::load_model;
use dspark_engine::pipeline::{default_max_draft, load_drafter, Pipeline};
use dspark_engine::spec::{Mode, SpecParams};
use dspark_engine::worker::EngineHandle;
use dspark_hub::download::NoProgress;
use dspark_server::Engine;

use crate::host::LoadRequest;

/// Jobs that may wait while one generates (as `dspark serve --queue`).
const QUEUE: usize = 8;

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

/// Resolves, fetches if needed, and starts the engine worker; returns it with its model id.
pub fn load_engine(req: &LoadRequest) -> Result<(Arc<dyn Engine>, String)> {
    let mode = Mode::parse(&req.mode).with_context(|| {
        format!(
            "unknown mode `{}` (dspark, dflash, draft, baseline)",
            req.mode
        )
    })?;
    let r = resolve(&req.model, &req.mode, req.drafter.as_deref())?;
    let target = dspark_hub::resolve_model_path(&r.target, false, &NoProgress)?;
    let drafter = match (mode, &r.drafter) {
        (Mode::Baseline, _) => None,
        (_, Some(d)) => Some(dspark_hub::resolve_model_path(d, false, &NoProgress)?),
        (_, None) => bail!(
            "no {} drafter is known for `{}`: enter one under Drafter",
            req.mode,
            req.model
        ),
    };
    let id = if req.model.trim().is_empty() || req.model == "demo" {
        "demo".to_string()
    } else {
        target
            .file_stem()
            .or(target.file_name())
            .map_or_else(|| req.model.clone(), |s| s.to_string_lossy().into_owned())
    };
    let max_draft = req
        .max_draft
        .unwrap_or_else(|| default_max_draft(mode))
        .max(1);
    let handle = EngineHandle::spawn(
        move || -> Result<Pipeline<CandleBackend>> {
            let b = CandleBackend::cpu();
            let lm = load_model(&b, &target, None)
                .with_context(|| format!("loading {}", target.display()))?;
            let spec = SpecParams {
                max_draft,
                confidence_threshold: 0.0,
            };
            let d = match drafter {
                None => None,
                Some(path) => {
                    // draft models keep GGUF weights quantized, as the CLI does
                    let db = b.clone().keep_quantized(true);
                    let block = if mode == Mode::Draft {
                        max_draft.clamp(1, 16)
                    } else {
                        16
                    };
                    Some(
                        load_drafter(&b, &db, mode, &path, &lm.model, block)
                            .with_context(|| format!("loading drafter {}", path.display()))?,
                    )
                }
            };
            Ok(Pipeline::new(lm, mode, d, spec)?)
        },
        QUEUE,
    )?;
    Ok((Arc::new(handle), id))
}
