//! Tokenizers rebuilt from GGUF metadata (`tokenizer.ggml.*`): the metadata reader, the
//! byte-level BPE ("gpt2") model with llama.cpp's pre-tokenizers, and the dispatch to the
//! SentencePiece BPE of `tokenizer_spm.rs` ("llama", "gemma4").

use std::fs;
use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::{Tokenizer, TokenizerError};

/// GGUF `tokenizer.ggml.token_type` values that mark added tokens.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Qwen2/Qwen3 split: single digits, letters with one leading non-letter.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama-3 split: digits in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Tokenizer metadata as stored in a GGUF file (`tokenizer.ggml.*`).
#[derive(Debug, Clone, Default)]
pub struct GgufTokenizerMeta {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE), "llama" or "gemma4" (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: pre-tokenizer flavour ("smollm", "qwen2", "llama-bpe", ...).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// Merges as "a b" strings.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.scores` (SentencePiece vocabularies; empty for byte-level BPE).
    pub scores: Vec<f32>,
    pub token_types: Vec<i32>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
}

/// Reads the tokenizer metadata out of parsed GGUF content.
pub fn gguf_tokenizer_meta(
    content: &candle_core::quantized::gguf_file::Content,
) -> Result<GgufTokenizerMeta, TokenizerError> {
    use candle_core::quantized::gguf_file::Value as G;
    let md = &content.metadata;
    let err = |key: &str, e: candle_core::Error| TokenizerError::Gguf(format!("`{key}`: {e}"));
    let string = |key: &str| -> Result<Option<String>, TokenizerError> {
        md.get(key)
            .map(|v| v.to_string().cloned().map_err(|e| err(key, e)))
            .transpose()
    };
    let id = |key: &str| -> Result<Option<u32>, TokenizerError> {
        md.get(key)
            .map(|v| match v {
                G::U32(x) => Ok(*x),
                G::I32(x) => {
                    u32::try_from(*x).map_err(|e| TokenizerError::Gguf(format!("`{key}`: {e}")))
                }
                G::U64(x) => {
                    u32::try_from(*x).map_err(|e| TokenizerError::Gguf(format!("`{key}`: {e}")))
                }
                G::I64(x) => {
                    u32::try_from(*x).map_err(|e| TokenizerError::Gguf(format!("`{key}`: {e}")))
                }
                other => Err(TokenizerError::Gguf(format!(
                    "`{key}`: not an integer: {other:?}"
                ))),
            })
            .transpose()
    };
    let strings = |key: &str| -> Result<Vec<String>, TokenizerError> {
        match md.get(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .to_vec()
                .map_err(|e| err(key, e))?
                .iter()
                .map(|s| s.to_string().cloned().map_err(|e| err(key, e)))
                .collect(),
        }
    };
    let model = string("tokenizer.ggml.model")?
        .ok_or_else(|| TokenizerError::Gguf("missing `tokenizer.ggml.model`".into()))?;
    let token_types = match md.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(v) => v
            .to_vec()
            .map_err(|e| err("tokenizer.ggml.token_type", e))?
            .iter()
            .map(|t| match t {
                G::I32(x) => Ok(*x),
                G::U32(x) => Ok(*x as i32),
                other => Err(TokenizerError::Gguf(format!(
                    "`tokenizer.ggml.token_type`: not an integer: {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?,
    };
    let scores = match md.get("tokenizer.ggml.scores") {
        None => Vec::new(),
        Some(v) => v
            .to_vec()
            .map_err(|e| err("tokenizer.ggml.scores", e))?
            .iter()
            .map(|s| s.to_f32().map_err(|e| err("tokenizer.ggml.scores", e)))
            .collect::<Result<_, _>>()?,
    };
    let add_bos = match md.get("tokenizer.ggml.add_bos_token") {
        Some(G::Bool(b)) => *b,
        _ => false,
    };
    Ok(GgufTokenizerMeta {
        model,
        pre: string("tokenizer.ggml.pre")?,
        tokens: strings("tokenizer.ggml.tokens")?,
        merges: strings("tokenizer.ggml.merges")?,
        scores,
        token_types,
        bos_id: id("tokenizer.ggml.bos_token_id")?,
        eos_id: id("tokenizer.ggml.eos_token_id")?,
        unk_id: id("tokenizer.ggml.unknown_token_id")?,
        pad_id: id("tokenizer.ggml.padding_token_id")?,
        add_bos,
        chat_template: string("tokenizer.chat_template")?,
    })
}

impl Tokenizer {
    /// Builds a tokenizer from GGUF tokenizer metadata. Supports the byte-level BPE
    /// ("gpt2") model and SentencePiece BPE ("llama" with scores, "gemma4" with stored merges;
    /// tokenizer_spm.rs); control
    /// and user-defined tokens become added tokens.
    pub fn from_gguf(meta: &GgufTokenizerMeta) -> Result<Self, TokenizerError> {
        if !["gpt2", "llama", "gemma4"].contains(&meta.model.as_str()) {
            return Err(TokenizerError::UnsupportedGguf {
                what: "model",
                value: meta.model.clone(),
            });
        }
        let n = meta.tokens.len();
        if n == 0 {
            return Err(TokenizerError::Gguf(
                "`tokenizer.ggml.tokens` is empty".into(),
            ));
        }
        if !meta.token_types.is_empty() && meta.token_types.len() != n {
            return Err(TokenizerError::Gguf(format!(
                "{} token types for {} tokens",
                meta.token_types.len(),
                n
            )));
        }
        let check_id = |name: &str, id: Option<u32>| match id {
            Some(i) if i as usize >= n => Err(TokenizerError::Gguf(format!(
                "{name} id {i} out of range for {n} tokens"
            ))),
            _ => Ok(id),
        };
        let bos_id = check_id("bos", meta.bos_id)?;
        let eos_id = check_id("eos", meta.eos_id)?;

        let spm = meta.model != "gpt2";
        let mut inner = if spm {
            crate::tokenizer_spm::spm_tokenizer(meta)?
        } else {
            byte_level_bpe(meta)?
        };

        let mut special = Vec::new();
        let mut user = Vec::new();
        for (i, tok) in meta.tokens.iter().enumerate() {
            let ty = meta.token_types.get(i).copied().unwrap_or(1);
            let is_marked = [meta.bos_id, meta.eos_id, meta.pad_id].contains(&Some(i as u32));
            let tok = if spm {
                crate::tokenizer_spm::piece(tok)
            } else {
                tok.clone()
            };
            if ty == TOKEN_TYPE_CONTROL || (is_marked && ty != TOKEN_TYPE_USER_DEFINED) {
                special.push(AddedToken::from(tok, true).normalized(false));
            } else if ty == TOKEN_TYPE_USER_DEFINED {
                user.push(AddedToken::from(tok, false).normalized(false));
            }
        }
        inner
            .add_special_tokens(special)
            .map_err(|e| TokenizerError::Gguf(format!("special tokens: {e}")))?;
        inner
            .add_tokens(user)
            .map_err(|e| TokenizerError::Gguf(format!("added tokens: {e}")))?;

        let name = |id: Option<u32>| id.and_then(|i| meta.tokens.get(i as usize).cloned());
        let bos_token = name(bos_id);
        let eos_token = name(eos_id);
        let template = meta
            .chat_template
            .clone()
            .map(|src| (src, "GGUF `tokenizer.chat_template`".to_string()));
        let prepend_bos = if meta.add_bos { bos_id } else { None };
        Self::assemble(
            inner,
            bos_token,
            eos_token,
            prepend_bos,
            template,
            eos_id.into_iter().collect(),
        )
    }

    /// Reads the GGUF header of `path` (no tensor data) and builds the tokenizer from it.
    pub fn from_gguf_file(path: &Path) -> Result<Self, TokenizerError> {
        let mut f = fs::File::open(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let content = candle_core::quantized::gguf_file::Content::read(&mut f)
            .map_err(|e| TokenizerError::Gguf(format!("{}: {e}", path.display())))?;
        Self::from_gguf(&gguf_tokenizer_meta(&content)?)
    }
}

/// The byte-level BPE ("gpt2") model of a GGUF: its merges and pre-tokenizer.
fn byte_level_bpe(meta: &GgufTokenizerMeta) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let vocab: Vocab = meta
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges = meta
        .merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| TokenizerError::Gguf(format!("merge without a space: {m:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| TokenizerError::Gguf(format!("building BPE: {e}")))?;
    let pre = gguf_pre_tokenizer(meta.pre.as_deref())?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre));
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(inner)
}

/// Pre-tokenizer for a GGUF `tokenizer.ggml.pre` value, as llama.cpp maps them.
fn gguf_pre_tokenizer(pre: Option<&str>) -> Result<PreTokenizerWrapper, TokenizerError> {
    let byte_level =
        |use_regex: bool| -> PreTokenizerWrapper { ByteLevel::new(false, false, use_regex).into() };
    let split = |re: &str| -> Result<PreTokenizerWrapper, TokenizerError> {
        let s = Split::new(
            SplitPattern::Regex(re.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Gguf(format!("split regex: {e}")))?;
        Ok(Sequence::new(vec![s.into(), byte_level(false)]).into())
    };
    match pre.unwrap_or("default") {
        "default" | "gpt2" | "gpt-2" => Ok(byte_level(true)),
        // llama.cpp: digits split one by one, then the GPT-2 regex.
        "smollm" | "starcoder" | "refact" | "codeshell" | "exaone" | "minerva" => {
            Ok(Sequence::new(vec![Digits::new(true).into(), byte_level(true)]).into())
        }
        "qwen2" | "deepseek-r1-qwen" | "megrez" => split(QWEN2_SPLIT),
        "llama-bpe" | "llama3" | "dbrx" | "smaug-bpe" | "falcon3" | "pixtral" => {
            split(LLAMA3_SPLIT)
        }
        other => Err(TokenizerError::UnsupportedGguf {
            what: "pre-tokenizer",
            value: other.to_owned(),
        }),
    }
}
