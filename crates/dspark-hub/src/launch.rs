//! From merged [`Settings`] to the engine's [`LaunchSpec`]: the registry picks the drafter,
//! models the engine cannot run fail here (before any download), paths are resolved (local
//! folders, the HF cache, downloads with `progress`), and the model gets a friendly id. Both
//! `dspark serve` and the app call [`launch_spec`], so the same settings give the same spec.

use std::path::{Path, PathBuf};

use dspark_engine::backend::DType;
use dspark_engine::launch::{BackendKind, DraftVocabSize, LaunchSpec, Matmul};
use dspark_engine::prefix_cache::PrefixCacheConfig;
use dspark_engine::spec::Mode as EngineMode;
use dspark_engine::worker::Tuning;

use crate::download::Progress;
use crate::registry::{self, Mode, DEMO};
use crate::settings::Settings;
use crate::{resolve_model_path, HubError};

/// A spec ready for `dspark_engine::launch::spawn`, and the id the server reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub spec: LaunchSpec,
    pub id: String,
}

/// Resolves `s` (merged settings: unset keys take the defaults of [`crate::layers`]).
pub fn launch_spec(s: &Settings, progress: &dyn Progress) -> Result<Launch, HubError> {
    let d = crate::layers::defaults();
    let model = s
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| DEMO.into());
    let mode = s.mode.unwrap_or(Mode::Baseline);
    if let Some((id, reason)) = registry::unavailable_reason(&model) {
        return Err(HubError::Unavailable {
            model: if id == model {
                model
            } else {
                format!("{model} ({id})")
            },
            reason,
        });
    }
    let r = registry::resolve(&model, mode, s.drafter.as_deref())?;
    let target = resolve_model_path(&r.target, false, progress)?;
    let drafter = match &r.drafter {
        Some(d) if mode != Mode::Baseline => Some(resolve_model_path(d, false, progress)?),
        _ => None,
    };
    let pick = |v: &Option<String>, dv: &Option<String>| {
        v.clone().or_else(|| dv.clone()).unwrap_or_default()
    };
    let prefix_cache = prefix_config(s);
    let spec = LaunchSpec {
        model: target.clone(),
        mode: EngineMode::parse(mode.as_str()).unwrap_or(EngineMode::Baseline),
        drafter,
        backend: BackendKind::parse(&pick(&s.backend, &d.backend)).unwrap_or_default(),
        device: pick(&s.device, &d.device),
        dtype: s.dtype.as_deref().and_then(DType::parse),
        keep_quantized: s.keep_quantized.unwrap_or(false),
        matmul: s
            .matmul
            .as_deref()
            .and_then(Matmul::parse)
            .unwrap_or_default(),
        max_draft: s.max_draft,
        confidence_threshold: s.confidence_threshold.unwrap_or(0.0),
        lookup: s.lookup,
        draft_vocab: s
            .draft_vocab
            .map(DraftVocabSize::from_count)
            .unwrap_or_default(),
        prefix_cache,
        queue: s.queue.or(d.queue).unwrap_or(8),
    };
    let id = match &s.served_model_name {
        Some(n) if !n.trim().is_empty() => n.clone(),
        _ => friendly_id(&model, &r.target, &target),
    };
    Ok(Launch { spec, id })
}

/// The prefix cache of `s` (`None` = off).
fn prefix_config(s: &Settings) -> Option<PrefixCacheConfig> {
    let d = crate::layers::defaults();
    s.prefix_cache
        .or(d.prefix_cache)
        .unwrap_or(true)
        .then(|| PrefixCacheConfig {
            max_slots: s
                .prefix_cache_slots
                .or(d.prefix_cache_slots)
                .unwrap_or(8)
                .max(1),
            max_ram_bytes: s.prefix_cache_ram_mb.or(d.prefix_cache_ram_mb).unwrap_or(0) << 20,
            dir: s.prefix_cache_dir.clone(),
            ..PrefixCacheConfig::default()
        })
}

/// The part of `s` a running engine applies live (draft knobs, prefix-cache limits).
pub fn tuning(s: &Settings) -> Tuning {
    Tuning {
        max_draft: s.max_draft,
        confidence_threshold: s.confidence_threshold.unwrap_or(0.0),
        lookup: s.lookup,
        prefix_limits: prefix_config(s).map(|c| (c.max_slots, c.max_ram_bytes)),
    }
}

/// The id a model is shown under: `demo`, a registry id, a repo id (also for HF-cache
/// snapshots, never their commit hash), else the file or folder name.
pub fn friendly_id(requested: &str, resolved: &str, path: &Path) -> String {
    let requested = requested.trim();
    if requested == DEMO || registry::REGISTRY.iter().any(|e| e.id == requested) {
        return requested.to_string();
    }
    if let Some(repo) = hf_cache_repo(path) {
        return repo;
    }
    if !Path::new(resolved).exists() && resolved.split('/').count() == 2 {
        return resolved.to_string();
    }
    path.file_stem().or(path.file_name()).map_or_else(
        || requested.to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// `org/name` of a path inside an HF cache (`…/models--org--name/snapshots/<commit>[/file]`).
fn hf_cache_repo(path: &Path) -> Option<String> {
    let comps: Vec<PathBuf> = path.ancestors().map(Path::to_path_buf).collect();
    comps.iter().find_map(|p| {
        let name = p.file_name()?.to_str()?;
        let rest = name.strip_prefix("models--")?;
        let (org, repo) = rest.split_once("--")?;
        Some(format!("{org}/{repo}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::NoProgress;

    #[test]
    fn friendly_ids_never_show_a_commit() {
        let snap = Path::new("/c/hub/models--mlx-community--Qwen3-8B-4bit/snapshots/0123abcd");
        assert_eq!(
            friendly_id("mlx-community/Qwen3-8B-4bit", "x", snap),
            "mlx-community/Qwen3-8B-4bit"
        );
        assert_eq!(
            friendly_id("qwen3-8b", "mlx-community/Qwen3-8B-8bit", snap),
            "qwen3-8b"
        );
        assert_eq!(
            friendly_id("demo", "demo", Path::new("/a/smollm2.gguf")),
            "demo"
        );
        assert_eq!(
            friendly_id("/m/tiny.gguf", "/m/tiny.gguf", Path::new("/m/tiny.gguf")),
            "tiny"
        );
        let file = snap.join("model.gguf");
        assert_eq!(
            friendly_id("/x", "/x", &file),
            "mlx-community/Qwen3-8B-4bit"
        );
    }

    #[test]
    fn unavailable_models_fail_before_any_download() {
        // an unreachable endpoint: any download attempt would fail with a network error
        let s = Settings {
            model: Some("gemma-4-12b".into()),
            mode: Some(Mode::DSpark),
            ..Default::default()
        };
        match launch_spec(&s, &NoProgress) {
            Err(HubError::Unavailable { model, reason }) => {
                assert_eq!(model, "gemma-4-12b");
                assert!(reason.contains("Gemma 4"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
