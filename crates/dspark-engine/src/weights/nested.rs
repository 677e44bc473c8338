//! Text-model weights nested inside a multimodal checkpoint: HF `Gemma3/4ForConditionalGeneration`
//! stores `model.language_model.layers.*` (head `lm_head.weight`), mlx-vlm conversions store
//! `language_model.model.layers.*` (head `language_model.lm_head.weight`). [`nest`] finds which
//! layout a source uses and serves its tensors under the plain text-model names the models ask
//! for (`model.layers.*`, `lm_head.weight`); vision and audio towers are never read.

use std::path::Path;

use super::{HostTensor, LoadError, WeightSource};

/// Where the text model lives: (prefix replacing `model.`, prefix put before `lm_head.`).
const LAYOUTS: [(&str, &str); 2] = [
    ("model.language_model.", ""),
    ("language_model.model.", "language_model."),
];

/// The probe: every text model has its token embedding.
const PROBE: &str = "embed_tokens.weight";

struct Nested<S> {
    inner: S,
    model: &'static str,
    head: &'static str,
}

impl<S: WeightSource> Nested<S> {
    fn name(&self, hf: &str) -> String {
        match hf.strip_prefix("model.") {
            Some(rest) => format!("{}{rest}", self.model),
            None => format!("{}{hf}", self.head),
        }
    }
}

impl<S: WeightSource> WeightSource for Nested<S> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(&self.name(name))
    }
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        self.inner.get(&self.name(name)).map_err(|e| match e {
            // name the tensor the model asked for as well as the stored one
            LoadError::MissingTensor { path, name: stored } => LoadError::MissingTensor {
                path,
                name: format!("{name} (stored as {stored})"),
            },
            other => other,
        })
    }
}

/// `inner` as is when it holds `model.embed_tokens.weight`, else seen through the first nested
/// layout that has the text model's embedding.
pub fn nest<S: WeightSource + Send + 'static>(inner: S) -> Box<dyn WeightSource + Send> {
    if inner.contains(&format!("model.{PROBE}")) {
        return Box::new(inner);
    }
    for (model, head) in LAYOUTS {
        if inner.contains(&format!("{model}{PROBE}")) {
            return Box::new(Nested { inner, model, head });
        }
    }
    Box::new(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::MemorySource;

    fn src(names: &[&str]) -> MemorySource {
        let mut s = MemorySource::default();
        for n in names {
            s.tensors
                .insert(n.to_string(), HostTensor::from_f32(vec![1], &[1.0]));
        }
        s
    }

    #[test]
    fn hf_and_mlx_vlm_layouts_serve_plain_names() {
        let hf = nest(src(&[
            "model.language_model.embed_tokens.weight",
            "model.language_model.layers.0.self_attn.q_proj.weight",
            "model.vision_tower.x.weight",
        ]));
        assert!(hf.contains("model.embed_tokens.weight"));
        assert!(hf.contains("model.layers.0.self_attn.q_proj.weight"));
        assert!(!hf.contains("lm_head.weight"));
        let mlx = nest(src(&[
            "language_model.model.embed_tokens.weight",
            "language_model.lm_head.weight",
        ]));
        assert!(mlx.contains("model.embed_tokens.weight") && mlx.contains("lm_head.weight"));
        let e = mlx.get("model.norm.weight").err().unwrap().to_string();
        assert!(e.contains("language_model.model.norm.weight"), "{e}");
        let plain = nest(src(&["model.embed_tokens.weight"]));
        assert!(plain.contains("model.embed_tokens.weight"));
    }
}
