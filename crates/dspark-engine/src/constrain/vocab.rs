//! The exact bytes of every token of a [`Tokenizer`], as the grammar engine's token trie needs
//! them: a token's bytes are what it adds to the decoded text.
//!
//! - byte-level BPE (Qwen3, SmolLM2, Llama 3): each character of a token string stands for one
//!   byte through GPT-2's byte-to-character table;
//! - SentencePiece BPE (Gemma): `▁` is a space, `<0xNN>` is the byte NN, anything else is its
//!   own UTF-8;
//! - special added tokens (`<|im_end|>`, `<end_of_turn>`) get the trie's special marker byte
//!   `0xFF` in front, so no grammar over text can produce them; plain added tokens are their
//!   UTF-8 content.

use std::collections::HashMap;

use tokenizers::decoders::DecoderWrapper;

use crate::tokenizer::Tokenizer;

/// How a tokenizer's token strings map to bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    ByteLevel,
    SentencePiece,
}

/// The scheme of `tok`, read from its decoder.
pub fn scheme(tok: &Tokenizer) -> Scheme {
    match tok.inner().get_decoder() {
        Some(DecoderWrapper::ByteLevel(_)) => Scheme::ByteLevel,
        _ => Scheme::SentencePiece,
    }
}

/// GPT-2's table: printable Latin-1 bytes map to themselves, the other 68 bytes to
/// U+0100.. in byte order.
fn byte_level_table() -> HashMap<char, u8> {
    let printable =
        |b: u8| matches!(b, b'!'..=b'~') || matches!(b, 0xA1..=0xAC) || matches!(b, 0xAE..=0xFF);
    let mut next = 0x100u32;
    let mut map = HashMap::with_capacity(256);
    for b in 0..=255u8 {
        if printable(b) {
            map.insert(b as char, b);
        } else {
            map.insert(char::from_u32(next).expect("in range"), b);
            next += 1;
        }
    }
    map
}

fn byte_level_bytes(token: &str, table: &HashMap<char, u8>) -> Vec<u8> {
    match token.chars().map(|c| table.get(&c).copied()).collect() {
        Some(bytes) => bytes,
        // not a byte-level string (e.g. an added token stored verbatim)
        None => token.as_bytes().to_vec(),
    }
}

fn sentencepiece_bytes(token: &str) -> Vec<u8> {
    let b = token.as_bytes();
    if b.len() == 6 && token.starts_with("<0x") && token.ends_with('>') {
        if let Ok(v) = u8::from_str_radix(&token[3..5], 16) {
            return vec![v];
        }
    }
    token.replace('▁', " ").into_bytes()
}

/// Marks a special token for the trie (never produced by text).
const SPECIAL: u8 = 0xFF;

/// Bytes of ids `0..len` (`len` >= the tokenizer's vocabulary; ids without a token are
/// empty, which the trie never allows).
pub fn token_bytes(tok: &Tokenizer, len: usize) -> Vec<Vec<u8>> {
    let inner = tok.inner();
    let scheme = scheme(tok);
    let table = byte_level_table();
    let mut out = vec![Vec::new(); len.max(tok.vocab_size())];
    for (s, id) in inner.get_vocab(false) {
        if let Some(slot) = out.get_mut(id as usize) {
            *slot = match scheme {
                Scheme::ByteLevel => byte_level_bytes(&s, &table),
                Scheme::SentencePiece => sentencepiece_bytes(&s),
            };
        }
    }
    for (id, added) in inner.get_added_tokens_decoder() {
        if let Some(slot) = out.get_mut(id as usize) {
            *slot = if added.special {
                let mut v = vec![SPECIAL];
                v.extend_from_slice(added.content.as_bytes());
                v
            } else {
                match scheme {
                    // matched after normalization, so spaces are stored as `▁`
                    Scheme::SentencePiece => sentencepiece_bytes(&added.content),
                    Scheme::ByteLevel => added.content.clone().into_bytes(),
                }
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_a_bijection() {
        let t = byte_level_table();
        assert_eq!(t.len(), 256);
        let mut seen = [false; 256];
        for &b in t.values() {
            seen[b as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(byte_level_bytes("Ġhello", &t), b" hello");
        assert_eq!(byte_level_bytes("Ċ", &t), b"\n");
    }

    #[test]
    fn sentencepiece_pieces() {
        assert_eq!(sentencepiece_bytes("▁the"), b" the");
        assert_eq!(sentencepiece_bytes("<0x0A>"), b"\n");
        assert_eq!(sentencepiece_bytes("<0xZZ>"), b"<0xZZ>");
    }
}
