//! Gemma 3 numerics on top of [`TransformerConfig`]: which layers attend through a sliding
//! window, the local and global RoPE bases, the attention scale from `query_pre_attn_scalar`,
//! logit softcaps and the `(1 + w)` RMSNorm convention. Parsed from HF `config.json`
//! (`gemma3_text`, or `gemma3` with a nested `text_config`) and from GGUF `gemma3.*` metadata.

use std::path::Path;

use serde_json::Value;

use crate::weights::gguf::{meta_f32, meta_u32, GgufSource};
use crate::weights::{LoadError, WeightSource};

/// Gemma 3's default: every 6th layer attends globally, the others through the window.
const DEFAULT_SLIDING_PATTERN: usize = 6;
const DEFAULT_LOCAL_ROPE_THETA: f64 = 10_000.0;

/// The Gemma-specific part of a target config.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmaSpec {
    /// Keys a sliding layer's query sees: positions `(p - window, p]`.
    pub sliding_window: usize,
    /// One entry per layer: `true` for sliding-window attention, `false` for full attention.
    pub sliding: Vec<bool>,
    /// RoPE base of the sliding layers (the global layers use `rope_theta`).
    pub rope_local_theta: f64,
    /// Attention scores are scaled by `query_pre_attn_scalar^-0.5`.
    pub query_pre_attn_scalar: f64,
    pub final_logit_softcap: Option<f32>,
    /// Added to every RMSNorm weight at load: 1 for HF checkpoints (which store `w` of
    /// `(1 + w)`), 0 for GGUF (llama.cpp's converter stored `1 + w`) and for Gemma 4.
    pub norm_offset: f32,
    /// Gemma 4's additions (model/gemma4.rs); `None` for Gemma 3.
    pub v4: Option<crate::model::gemma4::Gemma4Spec>,
}

impl GemmaSpec {
    /// `embed * sqrt(hidden)`, rounded to f32 the way transformers builds its normalizer.
    pub fn embed_scale(hidden: usize) -> f32 {
        (hidden as f32).sqrt()
    }

    /// Attention-score scale: `query_pre_attn_scalar^-0.5` (Gemma 3), 1.0 (Gemma 4, whose
    /// q/k norms fix the score scale).
    pub fn attn_scale(&self) -> f32 {
        match self.v4 {
            Some(_) => 1.0,
            None => (1.0 / self.query_pre_attn_scalar.sqrt()) as f32,
        }
    }

    pub fn from_json(v: &Value, path: &Path, num_layers: usize) -> Result<Self, LoadError> {
        let invalid = |field: &str, message: String| LoadError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if v.get("attn_logit_softcapping")
            .is_some_and(|x| !x.is_null())
        {
            return Err(invalid(
                "attn_logit_softcapping",
                "attention-score softcapping (Gemma 2) is not supported".into(),
            ));
        }
        let sliding = match v.get("layer_types").and_then(Value::as_array) {
            Some(types) => {
                if types.len() != num_layers {
                    return Err(invalid(
                        "layer_types",
                        format!("{} entries for {num_layers} layers", types.len()),
                    ));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("sliding_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(invalid("layer_types", format!("unknown layer type {t}"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => {
                let pattern = v
                    .get("sliding_window_pattern")
                    .and_then(Value::as_u64)
                    .map_or(DEFAULT_SLIDING_PATTERN, |p| p as usize);
                default_pattern(num_layers, pattern)
            }
        };
        let local = v
            .get("rope_parameters")
            .and_then(|r| r.get("sliding_attention"))
            .and_then(|r| r.get("rope_theta"))
            .or_else(|| v.get("rope_local_base_freq"))
            .and_then(Value::as_f64)
            .unwrap_or(DEFAULT_LOCAL_ROPE_THETA);
        let spec = GemmaSpec {
            sliding_window: v
                .get("sliding_window")
                .and_then(Value::as_u64)
                .map_or(4096, |w| w as usize),
            sliding,
            rope_local_theta: local,
            query_pre_attn_scalar: v
                .get("query_pre_attn_scalar")
                .and_then(Value::as_f64)
                .unwrap_or(256.0),
            final_logit_softcap: v
                .get("final_logit_softcapping")
                .and_then(Value::as_f64)
                .map(|c| c as f32),
            norm_offset: 1.0,
            v4: None,
        };
        spec.validate(path)?;
        Ok(spec)
    }

    /// From GGUF metadata (`gemma3.attention.sliding_window`, ...). GGUF has no layer pattern
    /// key for gemma3; transformers' default (every 6th layer global) applies, as in its GGUF
    /// loader.
    pub fn from_gguf(
        src: &GgufSource,
        num_layers: usize,
        head_dim: usize,
    ) -> Result<Self, LoadError> {
        let spec = GemmaSpec {
            sliding_window: meta_u32(src, "gemma3.attention.sliding_window")? as usize,
            sliding: default_pattern(num_layers, DEFAULT_SLIDING_PATTERN),
            rope_local_theta: DEFAULT_LOCAL_ROPE_THETA,
            query_pre_attn_scalar: head_dim as f64,
            final_logit_softcap: meta_f32(src, "gemma3.final_logit_softcapping")?,
            norm_offset: 0.0,
            v4: None,
        };
        if meta_f32(src, "gemma3.attn_logit_softcapping")?.is_some() {
            return Err(LoadError::InvalidField {
                path: src.path().to_path_buf(),
                field: "gemma3.attn_logit_softcapping".into(),
                message: "attention-score softcapping is not supported".into(),
            });
        }
        spec.validate(src.path())?;
        Ok(spec)
    }

    fn validate(&self, path: &Path) -> Result<(), LoadError> {
        let bad = |field: &str, message: String| LoadError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if self.sliding_window == 0 {
            return Err(bad("sliding_window", "must be positive".into()));
        }
        if !positive(self.rope_local_theta) {
            return Err(bad(
                "rope_local_base_freq",
                format!("{} is not positive", self.rope_local_theta),
            ));
        }
        if !positive(self.query_pre_attn_scalar) {
            return Err(bad(
                "query_pre_attn_scalar",
                format!("{} is not positive", self.query_pre_attn_scalar),
            ));
        }
        if self
            .final_logit_softcap
            .is_some_and(|c| !positive(c as f64))
        {
            return Err(bad("final_logit_softcapping", "must be positive".into()));
        }
        Ok(())
    }
}

/// A number above zero (NaN is not).
fn positive(x: f64) -> bool {
    x > 0.0
}

/// Layer i is sliding unless `(i + 1) % pattern == 0`.
fn default_pattern(num_layers: usize, pattern: usize) -> Vec<bool> {
    (0..num_layers)
        .map(|i| pattern == 0 || !(i + 1).is_multiple_of(pattern))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layer_types_and_defaults() {
        let v =
            json!({"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8});
        let g = GemmaSpec::from_json(&v, Path::new("c.json"), 2).unwrap();
        assert_eq!(g.sliding, vec![true, false]);
        assert_eq!(g.sliding_window, 8);
        assert_eq!(g.rope_local_theta, 10_000.0);
        assert_eq!(g.attn_scale(), 0.0625);
        assert_eq!(g.norm_offset, 1.0);
    }

    #[test]
    fn pattern_every_sixth_layer_is_global() {
        let g = GemmaSpec::from_json(&json!({}), Path::new("c.json"), 12).unwrap();
        let global: Vec<usize> = (0..12).filter(|&i| !g.sliding[i]).collect();
        assert_eq!(global, vec![5, 11]);
    }

    #[test]
    fn attention_softcap_is_refused_by_name() {
        let v = json!({"attn_logit_softcapping": 50.0});
        let e = GemmaSpec::from_json(&v, Path::new("c.json"), 2).unwrap_err();
        assert!(e.to_string().contains("attn_logit_softcapping"), "{e}");
    }

    #[test]
    fn wrong_layer_type_count_is_named() {
        let v = json!({"layer_types": ["full_attention"]});
        let e = GemmaSpec::from_json(&v, Path::new("c.json"), 2).unwrap_err();
        assert!(e.to_string().contains("layer_types"), "{e}");
    }
}
