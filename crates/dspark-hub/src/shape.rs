//! [`Shape`]: the config numbers a RAM estimate needs (parameters and KV cache), from the
//! registry's table or from a `config.json`, including Gemma's interleaved layers: sliding-window
//! layers whose cache stops at the window, and full-attention ("global") layers with their own
//! head size, kv heads and shared K/V projection.

use crate::registry::Quant;

/// Context length the KV part of a RAM estimate assumes.
pub const DEFAULT_CONTEXT: u64 = 8192;

/// The numbers of one model (a subset of `config.json`). With `hybrid`, `head_dim`/`kv_heads`
/// are the sliding layers' and `hybrid` describes the full-attention layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub layers: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    pub tied: bool,
    pub hybrid: Option<Hybrid>,
}

/// Gemma-style interleaving of sliding-window and full-attention layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hybrid {
    /// Layers that attend to everything (the rest slide over `window` positions).
    pub global_layers: u64,
    pub window: u64,
    pub global_head_dim: u64,
    pub global_kv_heads: u64,
    /// Full-attention layers project keys only and take values from them (`attention_k_eq_v`).
    pub k_eq_v: bool,
}

impl Shape {
    /// Attention parameters of one layer with these head numbers.
    fn attn(&self, head_dim: u64, kv_heads: u64, kv_mats: u64) -> u64 {
        let q = self.heads * head_dim;
        2 * self.hidden * q + kv_mats * self.hidden * kv_heads * head_dim
    }

    /// Parameters of the transformer (embeddings, attention, MLP, lm_head; norms ignored).
    pub fn params(&self) -> u64 {
        let mlp = 3 * self.hidden * self.ffn;
        let embed = self.vocab * self.hidden;
        let head = if self.tied { 0 } else { embed };
        let layers = match self.hybrid {
            None => self.layers * (self.attn(self.head_dim, self.kv_heads, 2) + mlp),
            Some(h) => {
                let sliding = self.layers - h.global_layers;
                let kv_mats = if h.k_eq_v { 1 } else { 2 };
                sliding * (self.attn(self.head_dim, self.kv_heads, 2) + mlp)
                    + h.global_layers
                        * (self.attn(h.global_head_dim, h.global_kv_heads, kv_mats) + mlp)
            }
        };
        embed + head + layers
    }

    pub fn weight_bytes(&self, quant: Quant) -> u64 {
        (self.params() as f64 * quant.bits_per_weight() / 8.0) as u64
    }

    /// K and V for `context` positions in 16-bit floats (a sliding layer keeps its window).
    pub fn kv_bytes(&self, context: u64) -> u64 {
        let per = |layers: u64, kv_heads: u64, head_dim: u64, positions: u64| {
            2 * layers * kv_heads * head_dim * positions * 2
        };
        match self.hybrid {
            None => per(self.layers, self.kv_heads, self.head_dim, context),
            Some(h) => {
                per(
                    self.layers - h.global_layers,
                    self.kv_heads,
                    self.head_dim,
                    context.min(h.window),
                ) + per(
                    h.global_layers,
                    h.global_kv_heads,
                    h.global_head_dim,
                    context,
                )
            }
        }
    }

    /// Weights plus KV cache at [`DEFAULT_CONTEXT`].
    pub fn ram_bytes(&self, quant: Quant) -> u64 {
        self.weight_bytes(quant) + self.kv_bytes(DEFAULT_CONTEXT)
    }

    /// The shape from a Hugging Face `config.json` (text config of multimodal models included;
    /// `layer_types` with sliding and full attention make it hybrid).
    pub fn from_config_json(v: &serde_json::Value) -> Option<Shape> {
        let c = v.get("text_config").unwrap_or(v);
        let u = |k: &str| c.get(k).and_then(serde_json::Value::as_u64);
        let hidden = u("hidden_size")?;
        let heads = u("num_attention_heads")?;
        let layers = u("num_hidden_layers")?;
        let kv_heads = u("num_key_value_heads").unwrap_or(heads);
        let head_dim = u("head_dim").unwrap_or(hidden / heads.max(1));
        // what transformers >= 5.24 saves for the full-attention layers instead of the
        // top-level `global_head_dim` / `num_global_key_value_heads` (one entry per full layer)
        let per_layer = c
            .get("per_layer_config")
            .and_then(serde_json::Value::as_object)
            .and_then(|m| m.values().next());
        let full = |k: &str, top: &str| {
            per_layer
                .and_then(|o| o.get(k))
                .or_else(|| c.get(top))
                .and_then(serde_json::Value::as_u64)
        };
        let hybrid = c
            .get("layer_types")
            .and_then(|t| t.as_array())
            .and_then(|t| {
                let global = t
                    .iter()
                    .filter(|x| x.as_str() == Some("full_attention"))
                    .count() as u64;
                let window = u("sliding_window")?;
                (global < layers && t.len() as u64 == layers).then(|| Hybrid {
                    global_layers: global,
                    window,
                    global_head_dim: full("head_dim", "global_head_dim").unwrap_or(head_dim),
                    global_kv_heads: full("num_key_value_heads", "num_global_key_value_heads")
                        .unwrap_or(kv_heads),
                    k_eq_v: c
                        .get("attention_k_eq_v")
                        .and_then(serde_json::Value::as_bool)
                        .unwrap_or(false),
                })
            });
        Some(Shape {
            layers,
            hidden,
            ffn: u("intermediate_size")?,
            heads,
            kv_heads,
            head_dim,
            vocab: u("vocab_size")?,
            tied: c
                .get("tie_word_embeddings")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            hybrid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma4_12b_like() -> serde_json::Value {
        let types: Vec<&str> = (0..48)
            .map(|i| {
                if i % 6 == 5 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        serde_json::json!({"model_type": "gemma4", "text_config": {
            "hidden_size": 3840, "num_hidden_layers": 48, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512,
            "num_global_key_value_heads": 1, "attention_k_eq_v": true, "intermediate_size": 15360,
            "vocab_size": 262144, "sliding_window": 1024, "tie_word_embeddings": true,
            "layer_types": types}})
    }

    #[test]
    fn a_hybrid_config_counts_its_global_layers_apart() {
        let s = Shape::from_config_json(&gemma4_12b_like()).unwrap();
        let h = s.hybrid.expect("layer_types make it hybrid");
        assert_eq!(
            (h.global_layers, h.window, h.global_head_dim),
            (8, 1024, 512)
        );
        assert!(h.k_eq_v);
        // 40 sliding layers of 224.1M, 8 global of 241.8M, a tied 1.007B table: 11.9B
        let p = s.params() as f64 / 1e9;
        assert!((11.85..11.95).contains(&p), "{p}");
        // sliding layers hold 1024 positions: KV at 8192 = 40 x 1024 + 8 x 8192 x (1 x 512)/(8 x 256)
        let kv = s.kv_bytes(8192);
        assert_eq!(kv, 2 * 40 * 8 * 256 * 1024 * 2 + 2 * 8 * 512 * 8192 * 2);
        // the same numbers without the sliding window would be 4x more for the sliding layers
        let flat = Shape { hybrid: None, ..s };
        assert!(flat.kv_bytes(8192) > 4 * kv);
    }

    /// Gemma-4-12B's own class as transformers 5.24 saves it (`gemma4_unified`): the full
    /// layers' head size and kv heads in `per_layer_config` instead of the top-level keys.
    #[test]
    fn per_layer_config_gives_the_same_shape() {
        let mut c = gemma4_12b_like();
        c["model_type"] = serde_json::json!("gemma4_unified");
        let t = c["text_config"].as_object_mut().unwrap();
        t.remove("global_head_dim");
        t.remove("num_global_key_value_heads");
        t.insert(
            "model_type".into(),
            serde_json::json!("gemma4_unified_text"),
        );
        let full: serde_json::Map<String, serde_json::Value> = (0..48)
            .filter(|i| i % 6 == 5)
            .map(|i| {
                let o = serde_json::json!({"head_dim": 512, "num_key_value_heads": 1});
                (i.to_string(), o)
            })
            .collect();
        t.insert("per_layer_config".into(), full.into());
        assert_eq!(
            Shape::from_config_json(&c),
            Shape::from_config_json(&gemma4_12b_like())
        );
    }

    #[test]
    fn layer_types_without_a_window_or_all_full_stay_uniform() {
        let mut c = gemma4_12b_like();
        c["text_config"]
            .as_object_mut()
            .unwrap()
            .remove("sliding_window");
        assert_eq!(Shape::from_config_json(&c).unwrap().hybrid, None);
        let mut c = gemma4_12b_like();
        c["text_config"]["layer_types"] = serde_json::json!(vec!["full_attention"; 48]);
        assert_eq!(Shape::from_config_json(&c).unwrap().hybrid, None);
    }
}
