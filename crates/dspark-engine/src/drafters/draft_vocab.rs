//! A parallel drafter's draft vocabulary: its head scores only the `k` ids most likely to be
//! drafted, instead of the whole vocabulary (the head is a large part of a draft pass: 21% of
//! the demo target's weights, 1.24 GB of a Qwen3-8B-shaped DFlash pass's 3.2). Drafting is
//! still lossless: the target verifies every draft over the whole vocabulary, and a sampled
//! round's draft distribution is zero outside the subset, which rejection sampling allows (a
//! target token outside it is reached through the residual). Only acceptance can fall, where
//! the target's token lies outside the subset.
//!
//! The ids come from a ranking the drafter ships (`draft_vocab.json`: ids, most frequent in
//! the target's own outputs first), else from the tokenizer's order (ids `0..k`, which byte
//! BPE merges roughly rank by frequency). The size is the drafter config's
//! `draft_vocab_size`, or the loader's override (`--draft-vocab`); none means the whole
//! vocabulary.

use std::path::Path;

use crate::error::EngineError;
use crate::weights::LoadError;

/// The file a drafter directory ranks its draft vocabulary in.
pub const RANKING_FILE: &str = "draft_vocab.json";

/// How large a drafter's draft vocabulary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DraftVocabSize {
    /// What the drafter's config says (`draft_vocab_size`; the whole vocabulary without it).
    #[default]
    Drafter,
    /// Every id.
    Full,
    /// The `k` top-ranked ids (the whole vocabulary when `k` covers it).
    Top(usize),
}

impl DraftVocabSize {
    /// `0` is the whole vocabulary, any other count a subset.
    pub fn from_count(k: usize) -> Self {
        if k == 0 {
            DraftVocabSize::Full
        } else {
            DraftVocabSize::Top(k)
        }
    }

    /// The subset size for a drafter whose config asks for `configured` of `vocab` ids;
    /// `None`: the whole vocabulary.
    pub fn resolve(self, configured: Option<usize>, vocab: usize) -> Option<usize> {
        let k = match self {
            DraftVocabSize::Drafter => configured?,
            DraftVocabSize::Full => return None,
            DraftVocabSize::Top(k) => k,
        };
        (k > 0 && k < vocab).then_some(k)
    }
}

/// Reads a drafter directory's ranking (`None` when it ships none). Every entry must be an id
/// below `vocab`, each at most once.
pub fn read_ranking(dir: &Path, vocab: usize) -> Result<Option<Vec<u32>>, EngineError> {
    let p = dir.join(RANKING_FILE);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LoadError::io(&p, e).into()),
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LoadError::parse(&p, e))?;
    let bad = |m: String| EngineError::DrafterMismatch(format!("{}: {m}", p.display()));
    let list = v
        .get("ids")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| bad("expected {\"ids\": [token ids, most frequent first]}".into()))?;
    let mut seen = vec![false; vocab];
    let mut ids = Vec::with_capacity(list.len());
    for x in list {
        let id = x
            .as_u64()
            .filter(|&i| (i as usize) < vocab)
            .ok_or_else(|| {
                bad(format!(
                    "{x} is not a token id below the vocabulary of {vocab}"
                ))
            })?;
        if std::mem::replace(&mut seen[id as usize], true) {
            return Err(bad(format!("id {id} is ranked twice")));
        }
        ids.push(id as u32);
    }
    Ok(Some(ids))
}

/// The `k` ids of the draft vocabulary, ascending: the ranking's first `k`, topped up in id
/// order when it ranks fewer.
pub fn choose_ids(ranking: Option<&[u32]>, k: usize, vocab: usize) -> Vec<u32> {
    let k = k.min(vocab);
    let mut taken = vec![false; vocab];
    let mut ids: Vec<u32> = Vec::with_capacity(k);
    for &id in ranking.unwrap_or(&[]).iter().take(k) {
        taken[id as usize] = true;
        ids.push(id);
    }
    let mut next = 0;
    while ids.len() < k {
        if !taken[next] {
            ids.push(next as u32);
        }
        next += 1;
    }
    ids.sort_unstable();
    ids
}

/// What a drafter's directory says of its draft vocabulary: its ranking and its config's size.
#[derive(Clone, Debug, Default)]
pub struct VocabChoice {
    ranking: Option<Vec<u32>>,
    configured: Option<usize>,
}

impl VocabChoice {
    /// Reads `dir`'s ranking and `config`'s `draft_vocab_size` (ids of a `vocab`-id target).
    pub fn read(dir: &Path, config: &serde_json::Value, vocab: usize) -> Result<Self, EngineError> {
        let configured = match config.get("draft_vocab_size") {
            None | Some(serde_json::Value::Null) => None,
            Some(x) => Some(x.as_u64().map(|k| k as usize).ok_or_else(|| {
                EngineError::DrafterMismatch(format!(
                    "{}: draft_vocab_size {x} is not a count of ids",
                    dir.join("config.json").display()
                ))
            })?),
        };
        Ok(VocabChoice {
            ranking: read_ranking(dir, vocab)?,
            configured,
        })
    }

    /// A ranking and a configured size given directly (tests, tools).
    pub fn ranked(ranking: Option<Vec<u32>>, configured: Option<usize>) -> Self {
        VocabChoice {
            ranking,
            configured,
        }
    }

    /// The draft vocabulary for `size` (`None`: the whole vocabulary).
    pub fn pick(&self, size: DraftVocabSize, vocab: usize) -> Option<DraftVocab> {
        let k = size.resolve(self.configured, vocab)?;
        Some(DraftVocab::new(
            choose_ids(self.ranking.as_deref(), k, vocab),
            vocab,
        ))
    }
}

/// The subset a drafter drafts from: the full ids of its head's rows.
pub struct DraftVocab {
    ids: Vec<u32>,
    vocab: usize,
}

impl DraftVocab {
    /// `ids` ascending and below `vocab`.
    pub fn new(ids: Vec<u32>, vocab: usize) -> Self {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(ids.last().is_none_or(|&i| (i as usize) < vocab));
        DraftVocab { ids, vocab }
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The full id of the subset's `i`-th row.
    pub fn full_id(&self, i: u32) -> u32 {
        self.ids[i as usize]
    }

    /// Rows of subset logits (`[n, k]`, row-major) as whole-vocabulary rows (`[n, vocab]`):
    /// every id outside the subset at `-inf`, so that every later step (logit processors, a
    /// grammar's mask, greedy choice, the draft distribution) runs as over a full head.
    pub fn scatter_rows(&self, sub: &[f32]) -> Vec<f32> {
        let k = self.ids.len();
        let rows = sub.len() / k.max(1);
        let mut full = vec![f32::NEG_INFINITY; rows * self.vocab];
        for (dst, src) in full.chunks_exact_mut(self.vocab).zip(sub.chunks_exact(k)) {
            for (&id, &x) in self.ids.iter().zip(src) {
                dst[id as usize] = x;
            }
        }
        full
    }

    /// The full ids of subset rows' ids (an argmax over the subset's logits).
    pub fn full_ids(&self, sub: &[u32]) -> Vec<u32> {
        sub.iter().map(|&i| self.full_id(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_resolve_against_the_config_and_the_vocabulary() {
        assert_eq!(DraftVocabSize::Drafter.resolve(None, 100), None);
        assert_eq!(DraftVocabSize::Drafter.resolve(Some(40), 100), Some(40));
        assert_eq!(DraftVocabSize::Drafter.resolve(Some(100), 100), None);
        assert_eq!(DraftVocabSize::Full.resolve(Some(40), 100), None);
        assert_eq!(DraftVocabSize::Top(10).resolve(Some(40), 100), Some(10));
        assert_eq!(DraftVocabSize::Top(500).resolve(None, 100), None);
        assert_eq!(DraftVocabSize::from_count(0), DraftVocabSize::Full);
        assert_eq!(DraftVocabSize::from_count(7), DraftVocabSize::Top(7));
    }

    #[test]
    fn ids_take_the_ranking_first_then_id_order() {
        assert_eq!(choose_ids(Some(&[9, 3, 7]), 2, 10), [3, 9]);
        assert_eq!(choose_ids(Some(&[9, 3]), 4, 10), [0, 1, 3, 9]);
        assert_eq!(choose_ids(Some(&[1, 0]), 4, 10), [0, 1, 2, 3]);
        assert_eq!(choose_ids(None, 3, 10), [0, 1, 2]);
        assert_eq!(choose_ids(None, 30, 10).len(), 10);
    }

    #[test]
    fn scattered_rows_hold_the_subset_and_minus_infinity_elsewhere() {
        let v = DraftVocab::new(vec![1, 4], 5);
        let full = v.scatter_rows(&[0.5, -2.0, 3.0, 1.0]);
        let inf = f32::NEG_INFINITY;
        assert_eq!(full, [inf, 0.5, inf, inf, -2.0, inf, 3.0, inf, inf, 1.0]);
        assert_eq!(v.full_id(1), 4);
    }

    #[test]
    fn rankings_are_checked() {
        let dir = std::env::temp_dir().join(format!("dspark-draft-vocab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(read_ranking(&dir, 10).unwrap().is_none());
        let f = dir.join(RANKING_FILE);
        std::fs::write(&f, r#"{"ids": [4, 2, 9]}"#).unwrap();
        assert_eq!(read_ranking(&dir, 10).unwrap().unwrap(), [4, 2, 9]);
        for (text, needle) in [
            (r#"{"ids": [4, 10]}"#, "below the vocabulary of 10"),
            (r#"{"ids": [4, 4]}"#, "ranked twice"),
            (r#"{"ids": [-1]}"#, "not a token id"),
            (r#"[1, 2]"#, "expected {\"ids\""),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = read_ranking(&dir, 10).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(RANKING_FILE), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
