//! GGUF checkpoints (llama.cpp). Tensors are read as candle quantized tensors (F32, F16, Q8_0,
//! Q4_0, Q4_1, K-quants, ...) and served under HF tensor names, so the models need no GGUF
//! knowledge. llama-arch Q/K rows are permuted by llama.cpp's converter: the config built from
//! GGUF metadata selects interleaved RoPE for them instead of undoing the permutation. Gemma's
//! four norms per layer (sandwich) have their own GGUF names.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::quantized::gguf_file::{Content, Value};

use super::{HostTensor, LoadError, WeightSource};

pub struct GgufSource {
    path: PathBuf,
    content: Content,
    file: Mutex<std::fs::File>,
    /// `general.architecture` is gemma3: the sandwich norms' names apply.
    gemma: bool,
}

impl GgufSource {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let mut file = std::fs::File::open(path).map_err(|e| LoadError::io(path, e))?;
        let content = Content::read(&mut file).map_err(|e| {
            // name the tensor when a type we cannot run is the cause
            match super::gguf_scan::unsupported_tensor(path) {
                Some((name, dtype)) => LoadError::Dtype {
                    path: path.to_path_buf(),
                    name,
                    dtype: format!("{dtype}; supported: {}", super::gguf_scan::SUPPORTED),
                },
                None => LoadError::parse(path, e),
            }
        })?;
        let gemma = matches!(
            content.metadata.get("general.architecture").and_then(|v| v.to_string().ok()),
            Some(a) if a == "gemma3"
        );
        Ok(GgufSource {
            path: path.to_path_buf(),
            gemma,
            content,
            file: Mutex::new(file),
        })
    }

    pub fn content(&self) -> &Content {
        &self.content
    }

    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// HF tensor name -> GGUF tensor name in this file (gemma3 names its norms differently).
    pub fn gguf_name_here(&self, hf: &str) -> Option<String> {
        if self.gemma {
            if let Some(name) = Self::gemma_norm_name(hf) {
                return Some(name);
            }
        }
        Self::gguf_name(hf)
    }

    /// Gemma's sandwich norms: pre/post attention and pre/post feed-forward.
    fn gemma_norm_name(hf: &str) -> Option<String> {
        let rest = hf.strip_prefix("model.layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let g = match rest {
            "post_attention_layernorm.weight" => "post_attention_norm",
            "pre_feedforward_layernorm.weight" => "ffn_norm",
            "post_feedforward_layernorm.weight" => "post_ffw_norm",
            _ => return None,
        };
        Some(format!("blk.{layer}.{g}.weight"))
    }

    /// HF tensor name -> GGUF tensor name for llama-family checkpoints.
    pub fn gguf_name(hf: &str) -> Option<String> {
        match hf {
            "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
            "model.norm.weight" => return Some("output_norm.weight".into()),
            "lm_head.weight" => return Some("output.weight".into()),
            _ => {}
        }
        let rest = hf.strip_prefix("model.layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let (module, kind) = rest.rsplit_once('.')?;
        let g = match module {
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.o_proj" => "attn_output",
            "self_attn.q_norm" => "attn_q_norm",
            "self_attn.k_norm" => "attn_k_norm",
            "mlp.gate_proj" => "ffn_gate",
            "mlp.up_proj" => "ffn_up",
            "mlp.down_proj" => "ffn_down",
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            _ => return None,
        };
        Some(format!("blk.{layer}.{g}.{kind}"))
    }
}

impl WeightSource for GgufSource {
    fn path(&self) -> &Path {
        &self.path
    }

    fn contains(&self, name: &str) -> bool {
        self.gguf_name_here(name)
            .is_some_and(|g| self.content.tensor_infos.contains_key(&g))
    }

    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        let missing = || LoadError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
        };
        let g = self.gguf_name_here(name).ok_or_else(missing)?;
        if !self.content.tensor_infos.contains_key(&g) {
            return Err(missing());
        }
        let mut f = self
            .file
            .lock()
            .map_err(|_| LoadError::parse(&self.path, "file lock poisoned"))?;
        let q = self
            .content
            .tensor(&mut *f, &g, &candle_core::Device::Cpu)
            .map_err(|e| LoadError::parse(&self.path, format!("tensor `{g}`: {e}")))?;
        Ok(HostTensor::Ggml(Arc::new(q)))
    }
}

/// Typed reads of GGUF metadata values, naming the key on failure.
pub fn meta_u32(src: &GgufSource, key: &str) -> Result<u32, LoadError> {
    let v = src.meta(key).ok_or_else(|| LoadError::MissingField {
        path: src.path.clone(),
        field: key.to_string(),
    })?;
    v.to_u32()
        .or_else(|_| v.to_u64().map(|x| x as u32))
        .map_err(|e| LoadError::InvalidField {
            path: src.path.clone(),
            field: key.to_string(),
            message: e.to_string(),
        })
}

pub fn meta_f32(src: &GgufSource, key: &str) -> Result<Option<f32>, LoadError> {
    match src.meta(key) {
        None => Ok(None),
        Some(v) => v.to_f32().map(Some).map_err(|e| LoadError::InvalidField {
            path: src.path.clone(),
            field: key.to_string(),
            message: e.to_string(),
        }),
    }
}

pub fn meta_string(src: &GgufSource, key: &str) -> Option<String> {
    src.meta(key).and_then(|v| v.to_string().ok().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_type_we_cannot_run_is_a_typed_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("dspark-gguf-type-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("iq.gguf");
        let h = super::super::gguf_scan::tests::header(&[("blk.3.ffn_down.weight", 23)]);
        std::fs::write(&p, h).unwrap();
        let e = GgufSource::open(&p).err().expect("must fail");
        match &e {
            LoadError::Dtype { name, dtype, .. } => {
                assert_eq!(name, "blk.3.ffn_down.weight");
                assert!(dtype.starts_with("IQ4_XS (ggml type 23)"), "{dtype}");
            }
            other => panic!("want a dtype error, got {other}"),
        }
        assert!(e.to_string().contains("blk.3.ffn_down.weight"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
