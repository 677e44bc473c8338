//! What Gemma 4's text model adds to Gemma 3 ([`super::gemma::GemmaSpec`]): full-attention
//! layers with their own head size and kv-head count, keys reused as values (`attention_k_eq_v`),
//! proportional (partial) RoPE on those layers, an unscaled RMS norm on values, attention scale
//! 1.0 and a per-layer output scalar. Parsed from HF `config.json` (`gemma4_text`, and
//! `gemma4_unified_text` of Gemma-4-12B's class). Per-layer inputs, mixture-of-experts blocks,
//! kv-shared layers and bidirectional attention over text are refused by name
//! (`use_bidirectional_attention: "vision"` concerns image tokens only, so text stays causal).

use std::path::Path;

use serde_json::Value;

use crate::backend::{RopeSpec, RopeStyle};
use crate::weights::LoadError;

/// Gemma 4 specifics; present only for `gemma4` targets.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma4Spec {
    /// Head size of the full-attention layers (`global_head_dim`).
    pub global_head_dim: usize,
    /// Key/value heads of the full-attention layers.
    pub global_kv_heads: usize,
    /// Full-attention layers take values from the key projection (no `v_proj`).
    pub k_eq_v: bool,
    /// Fraction of a full-attention head rotated (proportional RoPE); the rest is not.
    pub global_partial_rotary: f64,
}

impl Gemma4Spec {
    pub fn from_json(
        v: &Value,
        path: &Path,
        head_dim: usize,
        kv_heads: usize,
    ) -> Result<Self, LoadError> {
        let invalid = |field: &str, message: &str| LoadError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: message.to_string(),
        };
        let num = |field: &str| v.get(field).and_then(Value::as_u64).unwrap_or(0);
        if num("hidden_size_per_layer_input") > 0 {
            return Err(invalid(
                "hidden_size_per_layer_input",
                "per-layer input embeddings are not supported",
            ));
        }
        if num("num_kv_shared_layers") > 0 {
            return Err(invalid(
                "num_kv_shared_layers",
                "kv-shared layers are not supported",
            ));
        }
        if v.get("enable_moe_block").and_then(Value::as_bool) == Some(true) {
            return Err(invalid(
                "enable_moe_block",
                "mixture-of-experts blocks are not supported",
            ));
        }
        // "vision": image tokens attend both ways, text stays causal (this engine takes text only)
        let bidirectional = v.get("use_bidirectional_attention");
        if bidirectional.is_some_and(|x| !x.is_null() && x.as_str() != Some("vision")) {
            return Err(invalid(
                "use_bidirectional_attention",
                "bidirectional attention over text is not supported",
            ));
        }
        let full = v
            .get("rope_parameters")
            .and_then(|r| r.get("full_attention"));
        let partial = match full
            .and_then(|r| r.get("rope_type"))
            .and_then(Value::as_str)
        {
            Some("proportional") | None => full
                .and_then(|r| r.get("partial_rotary_factor"))
                .and_then(Value::as_f64)
                .unwrap_or(if full.is_none() { 0.25 } else { 1.0 }),
            Some("default") => 1.0,
            Some(other) => {
                return Err(invalid(
                    "rope_parameters.full_attention.rope_type",
                    &format!("`{other}` is not supported"),
                ))
            }
        };
        if full
            .and_then(|r| r.get("factor"))
            .and_then(Value::as_f64)
            .is_some_and(|f| f != 1.0)
        {
            return Err(invalid(
                "rope_parameters.full_attention.factor",
                "RoPE scaling is not supported",
            ));
        }
        // per_layer_config (as saved) wins over the top-level keys it was made from
        let overrides = v
            .get("per_layer_config")
            .and_then(Value::as_object)
            .and_then(|m| m.values().next());
        let pick = |key: &str, top: &str, default: usize| {
            overrides
                .and_then(|o| o.get(key))
                .or_else(|| v.get(top))
                .and_then(Value::as_u64)
                .map_or(default, |x| x as usize)
        };
        let k_eq_v = v.get("attention_k_eq_v").and_then(Value::as_bool) == Some(true);
        let spec = Gemma4Spec {
            global_head_dim: pick("head_dim", "global_head_dim", 512),
            global_kv_heads: pick(
                "num_key_value_heads",
                if k_eq_v {
                    "num_global_key_value_heads"
                } else {
                    "num_key_value_heads"
                },
                kv_heads,
            ),
            k_eq_v,
            global_partial_rotary: partial,
        };
        if spec.global_head_dim == 0 || !spec.global_head_dim.is_multiple_of(2) || head_dim == 0 {
            return Err(invalid("global_head_dim", "must be positive and even"));
        }
        if spec.global_kv_heads == 0 {
            return Err(invalid("num_global_key_value_heads", "must be positive"));
        }
        if !(0.0..=1.0).contains(&spec.global_partial_rotary) {
            return Err(invalid("partial_rotary_factor", "must lie in [0, 1]"));
        }
        Ok(spec)
    }

    /// Proportional RoPE of the full-attention layers: the first `partial * d / 2` frequency
    /// pairs rotate as `theta^(-2i / d)` (d the full head size), the others not at all.
    pub fn global_rope(&self, theta: f64, style: RopeStyle) -> RopeSpec {
        let d = self.global_head_dim;
        let angles = (self.global_partial_rotary * d as f64 / 2.0) as usize;
        let inv_freq = (0..d / 2)
            .map(|i| {
                if i < angles {
                    // transformers computes these in f32
                    1.0 / (theta as f32).powf((2 * i) as f32 / d as f32)
                } else {
                    0.0
                }
            })
            .collect();
        RopeSpec { inv_freq, style }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refuses_what_is_not_implemented_by_name() {
        for (k, val) in [
            ("hidden_size_per_layer_input", json!(256)),
            ("num_kv_shared_layers", json!(2)),
            ("enable_moe_block", json!(true)),
            ("use_bidirectional_attention", json!("all")),
        ] {
            let e =
                Gemma4Spec::from_json(&json!({ k: val }), Path::new("c.json"), 16, 2).unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
        }
    }

    #[test]
    fn vision_only_bidirectional_attention_leaves_text_causal() {
        for val in [json!("vision"), json!(null)] {
            let v = json!({ "use_bidirectional_attention": val });
            assert!(Gemma4Spec::from_json(&v, Path::new("c.json"), 16, 2).is_ok());
        }
    }

    #[test]
    fn proportional_rope_leaves_the_tail_unrotated() {
        let v = json!({"global_head_dim": 32, "attention_k_eq_v": true, "num_global_key_value_heads": 1});
        let s = Gemma4Spec::from_json(&v, Path::new("c.json"), 16, 2).unwrap();
        assert_eq!(
            (s.global_head_dim, s.global_kv_heads, s.k_eq_v),
            (32, 1, true)
        );
        let r = s.global_rope(1e6, RopeStyle::Half);
        assert_eq!(r.inv_freq.len(), 16);
        assert_eq!(r.inv_freq[0], 1.0);
        assert!(r.inv_freq[3] > 0.0 && r.inv_freq[4..].iter().all(|&f| f == 0.0));
    }
}
