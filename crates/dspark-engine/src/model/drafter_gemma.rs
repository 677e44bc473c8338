//! The Gemma 4 form of the DSpark drafter backbone (mlx-dspark's `gemma4` family, chosen when
//! the drafter's `model_type` names `gemma4`): every layer is a Gemma 4 full-attention layer
//! (`global_head_dim`, its own kv-head count, keys reused as values with `attention_k_eq_v`,
//! a weightless value norm, attention scale 1.0, proportional RoPE from
//! `rope_parameters.full_attention`), with sandwich norms, `layer_scalar` and a GELU-tanh MLP.
//! The drafter also scales its own embeddings by `sqrt(H)` and softcaps its logits (30 unless
//! the config says otherwise).

use std::path::Path;

use serde_json::Value;

use crate::backend::{RopeSpec, RopeStyle};
use crate::model::gemma4::Gemma4Spec;
use crate::model::layer::GemmaLayer;
use crate::weights::LoadError;

/// What a Gemma DSpark drafter's backbone does differently from the Qwen3 one.
#[derive(Clone, Debug, PartialEq)]
pub struct DrafterGemma {
    pub attn: Gemma4Spec,
    pub rope_theta: f64,
}

impl DrafterGemma {
    /// `Some` for a `gemma4` DSpark config (`model_type` containing "gemma4" and not "qwen3").
    pub fn from_json(v: &Value, path: &Path) -> Result<Option<Self>, LoadError> {
        let mt = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        if mt.contains("qwen3") || !mt.contains("gemma4") {
            return Ok(None);
        }
        let full = v
            .get("rope_parameters")
            .and_then(|r| r.get("full_attention"));
        let get = |k: &str| full.and_then(|r| r.get(k));
        let partial = match get("rope_type").and_then(Value::as_str) {
            Some("proportional") | None => get("partial_rotary_factor")
                .and_then(Value::as_f64)
                .unwrap_or(0.25),
            Some("default") => 1.0,
            Some(other) => {
                return Err(LoadError::InvalidField {
                    path: path.to_path_buf(),
                    field: "rope_parameters.full_attention.rope_type".into(),
                    message: format!("`{other}` is not supported for a Gemma drafter"),
                })
            }
        };
        let num = |k: &str, d: usize| v.get(k).and_then(Value::as_u64).map_or(d, |x| x as usize);
        let k_eq_v = v
            .get("attention_k_eq_v")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let kv = if k_eq_v {
            num("num_global_key_value_heads", 1)
        } else {
            num("num_key_value_heads", 8)
        };
        let attn = Gemma4Spec {
            global_head_dim: num("global_head_dim", 512),
            global_kv_heads: kv,
            k_eq_v,
            global_partial_rotary: partial,
        };
        if attn.global_head_dim == 0 || !attn.global_head_dim.is_multiple_of(2) || kv == 0 {
            return Err(LoadError::InvalidField {
                path: path.to_path_buf(),
                field: "global_head_dim".into(),
                message: "head size must be positive and even, kv heads positive".into(),
            });
        }
        Ok(Some(DrafterGemma {
            attn,
            rope_theta: get("rope_theta").and_then(Value::as_f64).unwrap_or(1e6),
        }))
    }

    /// The layer numerics: plain-`w` norms, scale 1.0, value norm and `layer_scalar`.
    pub fn layer(&self) -> GemmaLayer {
        GemmaLayer {
            attn_scale: 1.0,
            norm_offset: 0.0,
            k_eq_v: self.attn.k_eq_v,
            v4: true,
        }
    }

    pub fn rope(&self) -> RopeSpec {
        self.attn.global_rope(self.rope_theta, RopeStyle::Half)
    }

    /// The drafter's logit softcap: the config's value, 30 when the key is absent, none when
    /// it is `null`.
    pub fn softcap(v: &Value) -> Option<f32> {
        match v.get("final_logit_softcapping") {
            None => Some(30.0),
            Some(x) => x.as_f64().map(|c| c as f32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn family_follows_model_type_and_reads_the_full_attention_rope() {
        let p = Path::new("c.json");
        assert!(DrafterGemma::from_json(&json!({"model_type": "qwen3"}), p)
            .unwrap()
            .is_none());
        let g = DrafterGemma::from_json(
            &json!({"model_type": "gemma4_text", "global_head_dim": 32,
                    "num_global_key_value_heads": 1, "attention_k_eq_v": true,
                    "rope_parameters": {"full_attention": {"rope_type": "proportional",
                        "partial_rotary_factor": 0.25, "rope_theta": 1e4}}}),
            p,
        )
        .unwrap()
        .unwrap();
        assert_eq!((g.attn.global_head_dim, g.attn.global_kv_heads), (32, 1));
        assert_eq!(g.rope_theta, 1e4);
        let r = g.rope();
        assert!(r.inv_freq[3] > 0.0 && r.inv_freq[4..].iter().all(|&f| f == 0.0));
        assert_eq!(DrafterGemma::softcap(&json!({})), Some(30.0));
        assert_eq!(
            DrafterGemma::softcap(&json!({"final_logit_softcapping": null})),
            None
        );
    }
}
