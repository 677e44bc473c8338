//! Constrained decoding: a grammar (JSON object, JSON schema, Lark) limits which tokens may
//! come next. The grammar engine is `llguidance` (docs/api.md says why); its token trie is
//! built from our tokenizer's exact token bytes ([`vocab`]).
//!
//! A [`Constraint`] is one request's grammar state. Every loop applies it the same way: the
//! logits row of a position gets `-inf` outside the tokens the grammar allows after
//! everything before that position ([`Constraint::mask`]), before penalties' successors
//! (temperature, truncation, argmax or sampling). An eos id is allowed only where the
//! grammar accepts. Speculative verification masks row j after advancing over drafts
//! `0..j` and rolls the state back afterwards; drafters pick their proposals under the same
//! masks; so greedy speculation equals the constrained greedy baseline and sampled
//! speculation samples the renormalised masked target distribution.

pub mod shared;
pub mod vocab;

pub use shared::{Drafting, Shared};

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use crate::tokenizer::Tokenizer;

#[derive(thiserror::Error, Debug)]
pub enum ConstraintError {
    /// The grammar or schema was refused (unsupported feature, bad syntax).
    #[error("{0}")]
    Grammar(String),
    /// The grammar engine failed during generation.
    #[error("grammar state: {0}")]
    State(String),
    #[error("building the token trie: {0}")]
    Vocab(String),
}

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object.
    JsonObject,
    /// A JSON schema (draft 2020-12 subset that llguidance supports).
    JsonSchema(serde_json::Value),
    /// A Lark grammar (llguidance's dialect), e.g. a tool-call envelope around a schema.
    Lark(String),
}

/// JSON layout: no free whitespace (bounded output), `", "` and `": "` between items.
fn json_options() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

impl Grammar {
    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(serde_json::json!({
                "type": "object",
                "x-guidance": json_options(),
            })),
            Grammar::JsonSchema(s) => {
                let mut s = s.clone();
                if let Some(o) = s.as_object_mut() {
                    o.entry("x-guidance").or_insert_with(json_options);
                }
                TopLevelGrammar::from_json_schema(s)
            }
            Grammar::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        }
    }
}

/// Compiles grammars against one tokenizer. Building it (the trie over the whole vocabulary)
/// is done once per model.
pub struct Compiler {
    factory: ParserFactory,
    eos: Vec<u32>,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler").field("eos", &self.eos).finish()
    }
}

impl Compiler {
    /// A compiler for `tok`, whose logits rows have `vocab_rows` entries (>= its vocabulary).
    pub fn new(tok: &Tokenizer, vocab_rows: usize) -> Result<Self, ConstraintError> {
        Self::from_token_bytes(vocab::token_bytes(tok, vocab_rows), tok.eos_ids().to_vec())
    }

    /// A compiler over explicit token bytes (`words[id]`; special tokens start with `0xFF`).
    pub fn from_token_bytes(words: Vec<Vec<u8>>, eos: Vec<u32>) -> Result<Self, ConstraintError> {
        let info = TokRxInfo::new(words.len() as u32, eos.first().copied().unwrap_or(0));
        let trie = TokTrie::from(&info, &words);
        let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocab(e.to_string()))?;
        factory.quiet();
        Ok(Compiler { factory, eos })
    }

    /// A fresh state for `grammar`; refused grammars are [`ConstraintError::Grammar`].
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, ConstraintError> {
        let parser = self
            .factory
            .create_parser(grammar.top_level())
            .map_err(|e| ConstraintError::Grammar(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError::Grammar(e));
        }
        Ok(Constraint {
            matcher,
            eos: self.eos.clone(),
        })
    }
}

/// One request's grammar state. Cloning gives an independent state.
pub struct Constraint {
    matcher: Matcher,
    eos: Vec<u32>,
}

impl Clone for Constraint {
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
            eos: self.eos.clone(),
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish()
    }
}

fn state_err(e: impl std::fmt::Display) -> ConstraintError {
    ConstraintError::State(e.to_string())
}

impl Constraint {
    /// Sets every token the grammar does not allow next to `-inf`; eos ids stay only where the
    /// grammar accepts (and are the only tokens left once it is complete).
    pub fn mask(&mut self, row: &mut [f32]) -> Result<(), ConstraintError> {
        let stopped = self.matcher.is_stopped();
        let accepting = stopped || self.matcher.is_accepting().map_err(state_err)?;
        let eos_logits: Vec<Option<f32>> = self
            .eos
            .iter()
            .map(|&e| row.get(e as usize).copied())
            .collect();
        if stopped {
            row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
        } else {
            let allowed = self.matcher.compute_mask().map_err(state_err)?;
            for (i, v) in row.iter_mut().enumerate() {
                if i >= allowed.len() || !allowed.is_allowed(i as u32) {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        for (&e, logit) in self.eos.iter().zip(eos_logits) {
            if let Some(l) = logit {
                row[e as usize] = if accepting { l } else { f32::NEG_INFINITY };
            }
        }
        Ok(())
    }

    /// Back to the grammar's start.
    pub fn reset(&mut self) -> Result<(), ConstraintError> {
        self.matcher.reset().map_err(state_err)
    }

    /// Whether `tok` ends generation (an eos id).
    pub fn is_eos(&self, tok: u32) -> bool {
        self.eos.contains(&tok)
    }

    /// Moves the state past `tok`. Returns false (state unchanged) for an eos id or a token
    /// the grammar does not allow here.
    pub fn advance(&mut self, tok: u32) -> Result<bool, ConstraintError> {
        if self.is_eos(tok) || self.matcher.is_stopped() {
            return Ok(false);
        }
        let ok = self.matcher.validate_tokens(&[tok]).map_err(state_err)?;
        if ok == 0 {
            return Ok(false);
        }
        self.matcher.consume_token(tok).map_err(state_err)?;
        Ok(true)
    }

    /// Undoes the last `n` successful [`Constraint::advance`] calls.
    pub fn rollback(&mut self, n: usize) -> Result<(), ConstraintError> {
        if n > 0 {
            self.matcher.rollback(n).map_err(state_err)?;
        }
        Ok(())
    }

    /// Whether the output so far is a complete match.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_stopped() || self.matcher.is_accepting().unwrap_or(false)
    }
}
