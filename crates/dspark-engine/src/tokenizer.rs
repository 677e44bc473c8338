//! Text <-> token ids for the engine: wraps a HuggingFace `tokenizers` tokenizer loaded
//! from a model directory (tokenizer.json + tokenizer_config.json) or rebuilt from GGUF
//! tokenizer metadata, and carries the eos id set and the model's chat template.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::chat_template::{ChatTemplate, TemplateError};

mod gguf;
pub use gguf::{gguf_tokenizer_meta, GgufTokenizerMeta};

/// Token strings that end generation for common chat models, when the vocab has them
/// (Gemma 4 ends tool-call turns with `<|tool_response>`).
const EOS_CANDIDATES: [&str; 6] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
];

/// Errors from loading or running a tokenizer.
#[derive(thiserror::Error, Debug)]
pub enum TokenizerError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path} as JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot load tokenizer from {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    #[error("GGUF tokenizer: {0}")]
    Gguf(String),
    #[error("unsupported GGUF tokenizer {what}: {value}")]
    UnsupportedGguf { what: &'static str, value: String },
    #[error("chat template from {origin}: {source}")]
    Template {
        origin: String,
        #[source]
        source: TemplateError,
    },
    #[error("encode failed: {0}")]
    Encode(String),
    #[error("decode failed: {0}")]
    Decode(String),
}

/// `${DSPARK_CACHE:-$HOME/.cache/dspark}/artefacts`: where test and model artefacts live.
pub fn artefact_dir() -> PathBuf {
    let base = match std::env::var_os("DSPARK_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache").join("dspark")
        }
    };
    base.join("artefacts")
}

/// A loaded tokenizer with its eos set and optional chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos_ids: Vec<u32>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// Prepend this id on `encode(.., add_special_tokens=true)` (GGUF `add_bos_token`).
    prepend_bos: Option<u32>,
    chat_template: Option<ChatTemplate>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("eos_ids", &self.eos_ids)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish()
    }
}

fn read_json(path: &Path) -> Result<Json, TokenizerError> {
    let text = fs::read_to_string(path).map_err(|source| TokenizerError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| TokenizerError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn read_json_opt(path: &Path) -> Result<Option<Json>, TokenizerError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// A special-token field is either a string or an AddedToken object with `content`.
fn token_field(cfg: &Json, field: &str) -> Result<Option<String>, TokenizerError> {
    match cfg.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Object(o)) => match o.get("content") {
            Some(Json::String(s)) => Ok(Some(s.clone())),
            _ => Err(TokenizerError::Field {
                file: "tokenizer_config.json".into(),
                field: field.into(),
                message: "object without string `content`".into(),
            }),
        },
        Some(other) => Err(TokenizerError::Field {
            file: "tokenizer_config.json".into(),
            field: field.into(),
            message: format!("expected string or object, got {other}"),
        }),
    }
}

/// `eos_token_id` as an int or a list of ints (config.json / generation_config.json).
fn eos_id_field(cfg: &Json, file: &str) -> Result<Vec<u32>, TokenizerError> {
    let bad = |v: &Json| TokenizerError::Field {
        file: file.into(),
        field: "eos_token_id".into(),
        message: format!("expected a token id or a list of ids, got {v}"),
    };
    let one = |v: &Json| {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| bad(v))
    };
    match cfg.get("eos_token_id") {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

/// The chat template source from tokenizer_config.json (string or list of named templates).
fn template_field(cfg: &Json) -> Result<Option<String>, TokenizerError> {
    let bad = |message: &str| TokenizerError::Field {
        file: "tokenizer_config.json".into(),
        field: "chat_template".into(),
        message: message.into(),
    };
    match cfg.get("chat_template") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Array(items)) => {
            let named = |name: &str| {
                items.iter().find_map(|item| {
                    (item.get("name")?.as_str()? == name)
                        .then(|| item.get("template")?.as_str().map(str::to_owned))
                        .flatten()
                })
            };
            let first = || {
                items
                    .first()
                    .and_then(|i| i.get("template")?.as_str().map(str::to_owned))
            };
            named("default")
                .or_else(first)
                .map(Some)
                .ok_or_else(|| bad("list without a usable `template` entry"))
        }
        Some(_) => Err(bad("expected a string or a list of {name, template}")),
    }
}

impl Tokenizer {
    /// Loads tokenizer.json + tokenizer_config.json (chat_template, eos_token, bos_token) in
    /// `dir`, plus eos ids from config.json / generation_config.json `eos_token_id` (int or
    /// list) if present. A chat template may also come from chat_template.jinja or
    /// chat_template.json.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(TokenizerError::Io {
                path: tok_path,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "file not found"),
            });
        }
        let inner =
            tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| TokenizerError::Load {
                path: tok_path.clone(),
                message: e.to_string(),
            })?;
        let cfg = read_json_opt(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
        let bos_token = token_field(&cfg, "bos_token")?;
        let eos_token = token_field(&cfg, "eos_token")?;

        let mut config_eos = Vec::new();
        for file in ["config.json", "generation_config.json"] {
            if let Some(c) = read_json_opt(&dir.join(file))? {
                config_eos.extend(eos_id_field(&c, file)?);
            }
        }

        let mut template_src = template_field(&cfg)?.map(|s| (s, "tokenizer_config.json"));
        if template_src.is_none() {
            let jinja = dir.join("chat_template.jinja");
            if jinja.is_file() {
                let s = fs::read_to_string(&jinja).map_err(|source| TokenizerError::Io {
                    path: jinja.clone(),
                    source,
                })?;
                template_src = Some((s, "chat_template.jinja"));
            } else if let Some(c) = read_json_opt(&dir.join("chat_template.json"))? {
                template_src = template_field(&c)?.map(|s| (s, "chat_template.json"));
            }
        }
        let template =
            template_src.map(|(src, origin)| (src, dir.join(origin).display().to_string()));
        Self::assemble(inner, bos_token, eos_token, None, template, config_eos)
    }

    /// The tokenizer from its parts: the chat template `(source, origin)` compiled with the bos
    /// / eos strings (an error names its origin), and the eos set from `config_eos` and the
    /// known end-of-turn tokens. Both loaders (directory, GGUF) end here.
    fn assemble(
        inner: tokenizers::Tokenizer,
        bos_token: Option<String>,
        eos_token: Option<String>,
        prepend_bos: Option<u32>,
        template: Option<(String, String)>,
        config_eos: Vec<u32>,
    ) -> Result<Self, TokenizerError> {
        let chat_template = template
            .map(|(src, origin)| {
                ChatTemplate::new(&src, bos_token.clone(), eos_token.clone())
                    .map_err(|source| TokenizerError::Template { origin, source })
            })
            .transpose()?;
        let mut tok = Tokenizer {
            inner,
            eos_ids: Vec::new(),
            bos_token,
            eos_token,
            prepend_bos,
            chat_template,
        };
        tok.init_eos(config_eos);
        Ok(tok)
    }

    /// eos set = config ids + the eos_token string + known end-of-turn tokens present.
    fn init_eos(&mut self, config_ids: Vec<u32>) {
        let mut set: BTreeSet<u32> = config_ids.into_iter().collect();
        let names = self
            .eos_token
            .iter()
            .map(String::as_str)
            .chain(EOS_CANDIDATES);
        set.extend(names.filter_map(|t| self.inner.token_to_id(t)));
        self.eos_ids = set.into_iter().collect();
    }

    /// Encodes text; `add_special_tokens` applies the tokenizer's post-processor (and the
    /// GGUF `add_bos_token` flag).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let ids = enc.get_ids();
        match self.prepend_bos {
            Some(bos) if add_special_tokens && ids.first() != Some(&bos) => {
                let mut out = Vec::with_capacity(ids.len() + 1);
                out.push(bos);
                out.extend_from_slice(ids);
                Ok(out)
            }
            _ => Ok(ids.to_vec()),
        }
    }

    /// Decodes ids to text. Ids outside the vocabulary are ignored.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    pub fn token_to_id(&self, tok: &str) -> Option<u32> {
        self.inner.token_to_id(tok)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of token strings, added tokens included (may be less than the model's
    /// embedding rows).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Sorted, deduplicated ids that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.binary_search(&id).is_ok()
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// Replaces the chat template (e.g. from a model config or the command line).
    pub fn set_chat_template(&mut self, template: Option<ChatTemplate>) {
        self.chat_template = template;
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Adds an id to the eos set (kept sorted and deduplicated).
    pub fn add_eos_id(&mut self, id: u32) {
        if let Err(pos) = self.eos_ids.binary_search(&id) {
            self.eos_ids.insert(pos, id);
        }
    }

    /// Replaces the whole eos set.
    pub fn set_eos_ids(&mut self, ids: &[u32]) {
        let set: BTreeSet<u32> = ids.iter().copied().collect();
        self.eos_ids = set.into_iter().collect();
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_dir_names_the_file() {
        let err = Tokenizer::from_dir(Path::new("/nonexistent/dir")).unwrap_err();
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
    }

    #[test]
    fn eos_field_forms() {
        let v: Json = serde_json::json!({"eos_token_id": [1, 2]});
        assert_eq!(eos_id_field(&v, "config.json").unwrap(), [1, 2]);
        let v: Json = serde_json::json!({"eos_token_id": 5});
        assert_eq!(eos_id_field(&v, "config.json").unwrap(), [5]);
        let v: Json = serde_json::json!({"eos_token_id": "x"});
        let e = eos_id_field(&v, "config.json").unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("eos_token_id"),
            "{e}"
        );
        let v: Json = serde_json::json!({"eos_token": {"content": "</s>"}});
        assert_eq!(
            token_field(&v, "eos_token").unwrap().as_deref(),
            Some("</s>")
        );
    }

    /// GPT-2 `bytes_to_unicode`: the 256 single-char byte tokens.
    fn byte_chars() -> Vec<String> {
        let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let mut extra = 0;
        (0u32..256)
            .map(|b| {
                let c = if printable(b) {
                    b
                } else {
                    extra += 1;
                    255 + extra
                };
                char::from_u32(c).unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn gemma_end_of_turn_tokens_join_the_eos_set() {
        let tokens: Vec<String> = [
            "<pad>",
            "<eos>",
            "<turn|>",
            "<|tool_response>",
            "<end_of_turn>",
            "a",
        ]
        .map(String::from)
        .to_vec();
        let meta = GgufTokenizerMeta {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            token_types: vec![3, 3, 3, 3, 3, 1],
            tokens,
            eos_id: Some(1),
            ..Default::default()
        };
        let tok = Tokenizer::from_gguf(&meta).unwrap();
        assert_eq!(tok.eos_ids(), &[1, 2, 3, 4]);
    }

    /// A tiny byte-level vocab: all 256 byte chars + a few merges + control tokens.
    #[test]
    fn gguf_tiny_bpe() {
        let mut tokens: Vec<String> = vec!["<|endoftext|>".into(), "<|im_start|>".into()];
        tokens.push("<|im_end|>".into());
        tokens.extend(byte_chars());
        tokens.extend(["he".into(), "ll".into(), "hell".into(), "hello".into()]);
        tokens.push("<think>".into());
        let mut types = vec![3, 3, 3];
        types.extend(std::iter::repeat_n(1, tokens.len() - 4));
        types.push(4);
        let meta = GgufTokenizerMeta {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            merges: vec!["h e".into(), "l l".into(), "he ll".into(), "hell o".into()],
            tokens,
            token_types: types,
            bos_id: Some(1),
            eos_id: Some(2),
            unk_id: Some(0),
            pad_id: Some(2),
            add_bos: false,
            scores: vec![],
            chat_template: Some(
                "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}".into(),
            ),
        };
        let tok = Tokenizer::from_gguf(&meta).unwrap();
        let ids = tok.encode("<|im_start|>hello<think>12", false).unwrap();
        let hello = tok.token_to_id("hello").unwrap();
        let one = tok.token_to_id("1").unwrap();
        let two = tok.token_to_id("2").unwrap();
        assert_eq!(
            ids,
            [1, hello, tok.token_to_id("<think>").unwrap(), one, two]
        );
        assert_eq!(tok.decode(&ids, true).unwrap(), "hello<think>12");
        assert_eq!(tok.eos_ids(), &[0, 2]);
        // Ids outside the vocabulary (padded embedding rows) decode to nothing.
        assert_eq!(tok.decode(&[hello, 99_999], false).unwrap(), "hello");
        fn shareable<T: Send + Sync>(_: &T) {}
        shareable(&tok);
        assert_eq!(tok.bos_token(), Some("<|im_start|>"));
        let bad = GgufTokenizerMeta {
            model: "llama".into(),
            ..meta.clone()
        };
        assert!(Tokenizer::from_gguf(&bad).is_err());
        let bad = GgufTokenizerMeta {
            pre: Some("nonsense".into()),
            ..meta
        };
        assert!(Tokenizer::from_gguf(&bad).is_err());
    }
}
