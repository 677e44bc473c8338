//! Model configuration shared by every backend: parsed from HF `config.json` (qwen3, qwen2,
//! llama, gemma3) or from GGUF metadata, validated once, with errors that name the file and
//! field. Gemma's extra numerics live in [`GemmaSpec`] (model/gemma.rs).

use std::path::Path;

use serde_json::Value;

use crate::backend::{RopeSpec, RopeStyle};
use crate::model::gemma::GemmaSpec;
use crate::model::gemma4::Gemma4Spec;
use crate::weights::gguf::{meta_f32, meta_string, meta_u32, GgufSource};
use crate::weights::safetensors::MlxQuantConfig;
use crate::weights::LoadError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Qwen3,
    Qwen2,
    Llama,
    Gemma3,
    Gemma4,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Qwen2 => "qwen2",
            Arch::Llama => "llama",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
        }
    }
}

/// A decoder-only transformer's shape and numerics.
#[derive(Clone, Debug)]
pub struct TransformerConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    pub rope_style: RopeStyle,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// q_norm / k_norm per head (Qwen3).
    pub qk_norm: bool,
    /// biases on q/k/v projections (Qwen2).
    pub qkv_bias: bool,
    pub quantization: Option<MlxQuantConfig>,
    pub eos_token_ids: Vec<u32>,
    pub bos_token_id: Option<u32>,
    /// Sliding windows, local RoPE, sandwich norms, GELU MLP, scaled embeddings (Gemma 3).
    pub gemma: Option<GemmaSpec>,
}

impl TransformerConfig {
    pub fn rope_spec(&self) -> RopeSpec {
        RopeSpec::default_theta(self.rope_theta, self.head_dim, self.rope_style)
    }

    /// Parameter count of the weights (embedding and head included; Gemma's sandwich norms and
    /// Gemma 4's full-attention layer shapes counted).
    pub fn num_params(&self) -> usize {
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let attn =
            |d: usize, kv: usize, kv_proj: usize| h * d * (2 * self.num_heads + kv_proj * kv);
        let norms = if self.gemma.is_some() { 4 * h } else { 2 * h };
        let layers: usize = (0..self.num_layers)
            .map(|l| {
                let a = match &self.gemma {
                    Some(g) if !g.sliding[l] && g.v4.is_some() => {
                        let v4 = g.v4.as_ref().expect("checked");
                        attn(
                            v4.global_head_dim,
                            v4.global_kv_heads,
                            if v4.k_eq_v { 1 } else { 2 },
                        )
                    }
                    _ => attn(self.head_dim, self.num_kv_heads, 2),
                };
                a + 3 * h * i + norms
            })
            .sum();
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        v * h + head + layers + h
    }

    /// KV-cache bytes per token at `bytes_per_elem`.
    pub fn kv_bytes_per_token(&self, bytes_per_elem: usize) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_elem
    }

    pub fn from_json_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| LoadError::parse(path, e))?;
        Self::from_json(&v, path)
    }

    pub fn from_json(v: &Value, path: &Path) -> Result<Self, LoadError> {
        // multimodal Gemma 3 checkpoints nest the text model's config
        if let Some(text) = v.get("text_config").filter(|t| t.is_object()) {
            let mut text = text.clone();
            if text.get("model_type").is_none() {
                let outer = v.get("model_type").and_then(Value::as_str).unwrap_or("");
                let inner = if outer.starts_with("gemma4") {
                    "gemma4_text"
                } else {
                    "gemma3_text"
                };
                text["model_type"] = Value::from(inner);
            }
            if text.get("eos_token_id").is_none() {
                if let Some(eos) = v.get("eos_token_id") {
                    text["eos_token_id"] = eos.clone();
                }
            }
            return Self::from_json(&text, path);
        }
        let f = Fields { v, path };
        let mt = f.str("model_type")?;
        let arch = match mt.as_str() {
            "qwen3" => Arch::Qwen3,
            "qwen2" => Arch::Qwen2,
            "llama" | "mistral" => Arch::Llama,
            "gemma3_text" | "gemma3" => Arch::Gemma3,
            // gemma4_unified: Gemma-4-12B's multimodal class, the same text model
            "gemma4_text" | "gemma4" | "gemma4_unified_text" | "gemma4_unified" => Arch::Gemma4,
            _ => {
                return Err(LoadError::UnknownArch {
                    path: path.to_path_buf(),
                    arch: mt,
                })
            }
        };
        let hidden_size = f.usize("hidden_size")?;
        let num_heads = f.usize("num_attention_heads")?;
        let num_kv_heads = f.opt_usize("num_key_value_heads")?.unwrap_or(num_heads);
        let head_dim = f
            .opt_usize("head_dim")?
            .unwrap_or(hidden_size / num_heads.max(1));
        let rope_theta = match f.opt_f64("rope_theta")? {
            Some(t) => t,
            None => v
                .get("rope_parameters")
                .and_then(|r| {
                    r.get("rope_theta")
                        .or_else(|| r.get("full_attention")?.get("rope_theta"))
                })
                .and_then(Value::as_f64)
                .unwrap_or(match arch {
                    Arch::Llama => 10_000.0,
                    _ => 1_000_000.0,
                }),
        };
        let quantization = match v
            .get("quantization")
            .or_else(|| v.get("quantization_config"))
        {
            Some(q) if q.get("bits").is_some() => Some(MlxQuantConfig {
                bits: q["bits"].as_u64().unwrap_or(4) as usize,
                group_size: q.get("group_size").and_then(Value::as_u64).unwrap_or(64) as usize,
            }),
            _ => None,
        };
        let num_layers = f.usize("num_hidden_layers")?;
        let gemma = match arch {
            Arch::Gemma3 => Some(GemmaSpec::from_json(v, path, num_layers)?),
            Arch::Gemma4 => {
                let mut g = GemmaSpec::from_json(v, path, num_layers)?;
                // transformers forces the last layer to attend globally
                if let Some(last) = g.sliding.last_mut() {
                    *last = false;
                }
                g.norm_offset = 0.0;
                g.v4 = Some(Gemma4Spec::from_json(v, path, head_dim, num_kv_heads)?);
                Some(g)
            }
            _ => None,
        };
        let cfg = TransformerConfig {
            arch,
            vocab_size: f.usize("vocab_size")?,
            hidden_size,
            intermediate_size: f.usize("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: f.opt_f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta,
            rope_style: RopeStyle::Half,
            max_position_embeddings: f.opt_usize("max_position_embeddings")?.unwrap_or(32768),
            tie_word_embeddings: v
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(matches!(arch, Arch::Gemma3 | Arch::Gemma4)),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3 | Arch::Gemma4),
            qkv_bias: arch == Arch::Qwen2
                || v.get("attention_bias").and_then(Value::as_bool) == Some(true),
            quantization,
            eos_token_ids: ids_field(v.get("eos_token_id")),
            bos_token_id: v
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .map(|x| x as u32),
            gemma,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    pub fn from_gguf(src: &GgufSource) -> Result<Self, LoadError> {
        let path = src.path();
        let arch_name =
            meta_string(src, "general.architecture").ok_or_else(|| LoadError::MissingField {
                path: path.to_path_buf(),
                field: "general.architecture".into(),
            })?;
        let (arch, style) = match arch_name.as_str() {
            "llama" => (Arch::Llama, RopeStyle::Interleaved),
            "qwen2" => (Arch::Qwen2, RopeStyle::Half),
            "qwen3" => (Arch::Qwen3, RopeStyle::Half),
            "gemma3" => (Arch::Gemma3, RopeStyle::Half),
            _ => {
                return Err(LoadError::UnknownArch {
                    path: path.to_path_buf(),
                    arch: arch_name,
                })
            }
        };
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden_size = meta_u32(src, &k("embedding_length"))? as usize;
        let num_heads = meta_u32(src, &k("attention.head_count"))? as usize;
        let num_kv_heads = meta_u32(src, &k("attention.head_count_kv"))
            .map(|x| x as usize)
            .unwrap_or(num_heads);
        let head_dim = meta_u32(src, &k("attention.key_length"))
            .map(|x| x as usize)
            .unwrap_or(hidden_size / num_heads.max(1));
        let vocab_size = match meta_u32(src, &k("vocab_size")) {
            Ok(v) => v as usize,
            Err(_) => src
                .content()
                .tensor_infos
                .get("token_embd.weight")
                .map(|t| t.shape.dims()[0])
                .ok_or_else(|| LoadError::MissingTensor {
                    path: path.to_path_buf(),
                    name: "token_embd.weight".into(),
                })?,
        };
        use crate::weights::WeightSource;
        let num_layers = meta_u32(src, &k("block_count"))? as usize;
        let gemma = match arch {
            Arch::Gemma3 => Some(GemmaSpec::from_gguf(src, num_layers, head_dim)?),
            _ => None,
        };
        let cfg = TransformerConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: meta_u32(src, &k("feed_forward_length"))? as usize,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: meta_f32(src, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6),
            rope_theta: meta_f32(src, &k("rope.freq_base"))?.unwrap_or(10_000.0) as f64,
            rope_style: style,
            max_position_embeddings: meta_u32(src, &k("context_length")).unwrap_or(4096) as usize,
            tie_word_embeddings: !src.contains("lm_head.weight"),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            qkv_bias: src.contains("model.layers.0.self_attn.q_proj.bias"),
            quantization: None,
            eos_token_ids: meta_u32(src, "tokenizer.ggml.eos_token_id")
                .ok()
                .into_iter()
                .collect(),
            bos_token_id: meta_u32(src, "tokenizer.ggml.bos_token_id").ok(),
            gemma,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), LoadError> {
        let bad = |field: &str, message: String| LoadError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return Err(bad(name, "must be positive".into()));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(bad(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.num_kv_heads, self.num_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad(
                "head_dim",
                format!("{} is odd; RoPE needs an even size", self.head_dim),
            ));
        }
        if self.rope_theta.is_nan() || self.rope_theta <= 0.0 {
            return Err(bad(
                "rope_theta",
                format!("{} is not positive", self.rope_theta),
            ));
        }
        Ok(())
    }
}

/// `eos_token_id` may be an int or a list of ints.
pub fn ids_field(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as u32)
            .collect(),
        _ => vec![],
    }
}

/// Typed access to JSON config fields with file/field-naming errors.
pub struct Fields<'a> {
    pub v: &'a Value,
    pub path: &'a Path,
}

impl Fields<'_> {
    fn missing(&self, field: &str) -> LoadError {
        LoadError::MissingField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
        }
    }
    fn invalid(&self, field: &str, message: &str) -> LoadError {
        LoadError::InvalidField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            message: message.to_string(),
        }
    }
    pub fn str(&self, field: &str) -> Result<String, LoadError> {
        match self.v.get(field) {
            None | Some(Value::Null) => Err(self.missing(field)),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(self.invalid(field, "expected a string")),
        }
    }
    pub fn opt_usize(&self, field: &str) -> Result<Option<usize>, LoadError> {
        match self.v.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.invalid(field, "expected a non-negative integer")),
        }
    }
    pub fn usize(&self, field: &str) -> Result<usize, LoadError> {
        self.opt_usize(field)?.ok_or_else(|| self.missing(field))
    }
    pub fn opt_f64(&self, field: &str) -> Result<Option<f64>, LoadError> {
        match self.v.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.invalid(field, "expected a number")),
        }
    }
    pub fn f64(&self, field: &str) -> Result<f64, LoadError> {
        self.opt_f64(field)?.ok_or_else(|| self.missing(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"model_type": "qwen3", "vocab_size": 512, "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16})
    }

    #[test]
    fn missing_field_names_it() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("hidden_size");
        let e = TransformerConfig::from_json(&v, Path::new("x/config.json")).unwrap_err();
        assert_eq!(e.to_string(), "x/config.json: missing field `hidden_size`");
    }

    #[test]
    fn unknown_arch_is_typed() {
        let mut v = base();
        v["model_type"] = json!("mamba");
        let e = TransformerConfig::from_json(&v, Path::new("c.json")).unwrap_err();
        assert!(matches!(e, LoadError::UnknownArch { .. }), "{e}");
    }

    #[test]
    fn rope_theta_from_rope_parameters() {
        let mut v = base();
        v["rope_parameters"] = json!({"rope_theta": 12345.0});
        let c = TransformerConfig::from_json(&v, Path::new("c.json")).unwrap();
        assert_eq!(c.rope_theta, 12345.0);
    }

    #[test]
    fn kv_heads_must_divide_heads() {
        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        let e = TransformerConfig::from_json(&v, Path::new("c.json")).unwrap_err();
        assert!(e.to_string().contains("num_key_value_heads"), "{e}");
    }

    #[test]
    fn wrong_type_is_invalid_field() {
        let mut v = base();
        v["vocab_size"] = json!("many");
        let e = TransformerConfig::from_json(&v, Path::new("c.json")).unwrap_err();
        assert!(e.to_string().contains("`vocab_size` is invalid"), "{e}");
    }
}
