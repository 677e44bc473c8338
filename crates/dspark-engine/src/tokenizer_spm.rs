//! SentencePiece-BPE tokenizers rebuilt from GGUF metadata (`tokenizer.ggml.model = "llama"`,
//! e.g. Gemma 3): the GGUF stores tokens and scores but no merges. A merge `(left, right)`
//! exists for every split of a token into two tokens of the vocabulary, ranked by the merged
//! token's score (higher first), which is SentencePiece-BPE's merge order; ties keep the
//! better-scored pair of pieces first. User-defined pieces (runs of spaces, tabs, newlines)
//! are matched before any learned merge in SentencePiece, so their merges come first, longest
//! run first (the order of the published Gemma 3 `tokenizer.json`). Text is normalized `' ' -> '▁'`, unknown characters
//! fall back to `<0xNN>` byte tokens, and decoding undoes both. Checked against the published
//! Gemma 3 `tokenizer.json` (tests/tests/gemma3.rs).
//!
//! Gemma 4 GGUFs (`tokenizer.ggml.model = "gemma4"`) are the same SentencePiece-style BPE with
//! the merges stored (`tokenizer.ggml.merges`, best first; scores are all -1000). llama.cpp also
//! splits runs of newlines off before merging; no Gemma 4 token or merge mixes newlines with
//! other text, so that split changes nothing and is not done. Checked against llama.cpp's own
//! test vectors for its Gemma 4 vocabulary (tests/tests/gemma4_template.rs).

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::SplitDelimiterBehavior;

use crate::tokenizer::{GgufTokenizerMeta, TokenizerError};

/// `tokenizer.ggml.token_type` of a normal and a user-defined token; control (3) and byte (6)
/// tokens take part in no merge.
const TYPE_NORMAL: i32 = 1;
const TYPE_USER_DEFINED: i32 = 4;

/// SentencePiece's word-boundary marker.
const SPACE: char = '▁';

/// The vocabulary as the tokenizer sees it: GGUF stores runs of spaces with real spaces,
/// SentencePiece (and `tokenizer.json`) with `▁`.
pub(crate) fn piece(token: &str) -> String {
    if !token.is_empty() && token.chars().all(|c| c == ' ') {
        token.replace(' ', &SPACE.to_string())
    } else {
        token.to_string()
    }
}

/// Merges implied by the scores, best first.
fn merges(pieces: &[String], scores: &[f32], types: &[i32]) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .collect();
    // (user-defined first, merged score, merged length, left length / score, right score,
    // merged id, split byte)
    struct Cand {
        user: bool,
        score: f32,
        len: usize,
        left: f32,
        right: f32,
        id: usize,
        split: usize,
    }
    let mut found: Vec<Cand> = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let ty = types.get(i).copied().unwrap_or(TYPE_NORMAL);
        if ty != TYPE_NORMAL && ty != TYPE_USER_DEFINED {
            continue;
        }
        let user = ty == TYPE_USER_DEFINED;
        let len = p.chars().count();
        for (n_left, (k, _)) in p.char_indices().enumerate().skip(1) {
            let (l, r) = (&p[..k], &p[k..]);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                found.push(Cand {
                    user,
                    score: if user { 0.0 } else { scores[i] },
                    len: if user { len } else { 0 },
                    left: if user { n_left as f32 } else { scores[li] },
                    right: if user { 0.0 } else { scores[ri] },
                    id: i,
                    split: k,
                });
            }
        }
    }
    found.sort_by(|a, b| {
        b.user
            .cmp(&a.user)
            .then(b.score.total_cmp(&a.score))
            .then(b.len.cmp(&a.len))
            .then(a.id.cmp(&b.id))
            .then(b.left.total_cmp(&a.left))
            .then(b.right.total_cmp(&a.right))
    });
    found
        .into_iter()
        .map(|c| {
            let p = &pieces[c.id];
            (p[..c.split].to_string(), p[c.split..].to_string())
        })
        .collect()
}

/// The BPE model, normalizer, pre-tokenizer and decoder of a SentencePiece GGUF tokenizer.
/// Added (control / user-defined) tokens are the caller's to add.
pub(crate) fn spm_tokenizer(
    meta: &GgufTokenizerMeta,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let n = meta.tokens.len();
    let gemma4 = meta.model == "gemma4";
    if !gemma4 && meta.scores.len() != n {
        return Err(TokenizerError::Gguf(format!(
            "`tokenizer.ggml.scores`: {} scores for {n} tokens (a SentencePiece vocabulary needs one per token)",
            meta.scores.len()
        )));
    }
    let pieces: Vec<String> = meta.tokens.iter().map(|t| piece(t)).collect();
    let vocab: tokenizers::models::bpe::Vocab = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), i as u32))
        .collect();
    let merges = if gemma4 {
        stored_merges(&meta.merges)?
    } else {
        merges(&pieces, &meta.scores, &meta.token_types)
    };
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = meta.unk_id.and_then(|i| pieces.get(i as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| TokenizerError::Gguf(format!("building SentencePiece BPE: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let space = SPACE.to_string();
    let normalizer = Replace::new(" ", space.as_str())
        .map_err(|e| TokenizerError::Gguf(format!("normalizer: {e}")))?;
    inner
        .with_normalizer(Some(normalizer))
        .map_err(|e| TokenizerError::Gguf(format!("normalizer: {e}")))?;
    let split = Split::new(
        SplitPattern::String(" ".into()),
        SplitDelimiterBehavior::MergedWithPrevious,
        false,
    )
    .map_err(|e| TokenizerError::Gguf(format!("pre-tokenizer: {e}")))?;
    inner.with_pre_tokenizer(Some(split));
    let to_space = tokenizers::decoders::DecoderWrapper::Replace(
        Replace::new(space.as_str(), " ")
            .map_err(|e| TokenizerError::Gguf(format!("decoder: {e}")))?,
    );
    let decoder = DecoderSequence::new(vec![
        to_space,
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ]);
    inner.with_decoder(Some(decoder));
    Ok(inner)
}

/// `tokenizer.ggml.merges` ("left right", best first) as pairs.
fn stored_merges(merges: &[String]) -> Result<Vec<(String, String)>, TokenizerError> {
    if merges.is_empty() {
        return Err(TokenizerError::Gguf(
            "`tokenizer.ggml.merges` is missing (a gemma4 vocabulary stores its merges)".into(),
        ));
    }
    merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(l, r)| (l.to_owned(), r.to_owned()))
                .ok_or_else(|| TokenizerError::Gguf(format!("merge without a space: {m:?}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_the_merged_token_score() {
        let pieces: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
            .map(String::from)
            .to_vec();
        // "bc" outranks "ab": "abc" is reached as a + bc
        let scores = [0.0, 0.0, 0.0, -5.0, -1.0, -3.0];
        let m = merges(&pieces, &scores, &[1; 6]);
        let names: Vec<String> = m.iter().map(|(l, r)| format!("{l} {r}")).collect();
        assert_eq!(names, ["b c", "a bc", "ab c", "a b"]);
    }

    #[test]
    fn spaces_become_the_word_marker() {
        assert_eq!(piece("   "), "▁▁▁");
        assert_eq!(piece("a b"), "a b");
    }
}
