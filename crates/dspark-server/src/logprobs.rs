//! Log-probabilities in OpenAI's wire shapes, from the engine's [`Rendered`] entries: chat's
//! `logprobs.content[] {token, logprob, bytes, top_logprobs[]}` and the legacy completions'
//! `{tokens, token_logprobs, top_logprobs, text_offset}`. A token's text is the tokenizer's
//! decoding of that id alone, and `bytes` its UTF-8 bytes (a token that holds part of a
//! multi-byte character decodes to U+FFFD). A log-probability of -inf (a token no processor
//! allows) is reported as -9999, as OpenAI does, since JSON has no infinity.

use std::collections::BTreeMap;

use dspark_engine::sampling::logprobs::{Rendered, Scored};
use serde::Serialize;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        -9999.0
    }
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

impl TopLogprob {
    fn of(s: &Scored) -> Self {
        TopLogprob {
            token: s.text.clone(),
            logprob: finite(s.logprob),
            bytes: s.text.as_bytes().to_vec(),
        }
    }
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[].logprobs` of a chat completion or chunk.
#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq, Default)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
    pub refusal: Option<Vec<ChatTokenLogprob>>,
}

impl ChatLogprobs {
    pub fn new(entries: &[Rendered]) -> Self {
        ChatLogprobs {
            content: entries
                .iter()
                .map(|e| {
                    let t = TopLogprob::of(&e.chosen);
                    ChatTokenLogprob {
                        token: t.token,
                        logprob: t.logprob,
                        bytes: t.bytes,
                        top_logprobs: e.top.iter().map(TopLogprob::of).collect(),
                    }
                })
                .collect(),
            refusal: None,
        }
    }
}

/// `choices[].logprobs` of a legacy completion or chunk. `text_offset` counts characters
/// from the start of this choice's generated text (no echo), continuing across chunks.
#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq, Default)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    /// Per token: the chosen token and its `logprobs` likeliest alternatives, text → logprob.
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

impl TextLogprobs {
    /// Entries starting at character `offset` of the generated text; returns the offset
    /// after them.
    pub fn new(entries: &[Rendered], offset: &mut usize) -> Self {
        let mut out = TextLogprobs::default();
        for e in entries {
            out.tokens.push(e.chosen.text.clone());
            out.token_logprobs.push(finite(e.chosen.logprob));
            let mut top: BTreeMap<String, f32> = e
                .top
                .iter()
                .map(|s| (s.text.clone(), finite(s.logprob)))
                .collect();
            top.insert(e.chosen.text.clone(), finite(e.chosen.logprob));
            out.top_logprobs.push(top);
            out.text_offset.push(*offset);
            *offset += e.chosen.text.chars().count();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str, lp: f32, top: &[(&str, f32)]) -> Rendered {
        let s = |t: &str, l: f32| Scored {
            id: 0,
            text: t.into(),
            logprob: l,
        };
        Rendered {
            chosen: s(text, lp),
            top: top.iter().map(|&(t, l)| s(t, l)).collect(),
        }
    }

    #[test]
    fn shapes() {
        let e = [
            entry("hé", -0.5, &[("hé", -0.5), ("x", -1.0)]),
            entry("!", f32::NEG_INFINITY, &[]),
        ];
        let c = serde_json::to_value(ChatLogprobs::new(&e)).unwrap();
        assert_eq!(c["content"][0]["bytes"], serde_json::json!([104, 195, 169]));
        assert_eq!(c["content"][0]["top_logprobs"][1]["token"], "x");
        assert_eq!(c["content"][1]["logprob"], -9999.0);
        assert!(c["refusal"].is_null());
        let mut off = 3;
        let t = TextLogprobs::new(&e, &mut off);
        assert_eq!((t.text_offset.clone(), off), (vec![3, 5], 6));
        assert_eq!(t.top_logprobs[1].len(), 1);
        assert_eq!(t.top_logprobs[0]["x"], -1.0);
    }
}
