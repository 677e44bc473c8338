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
//! BPE merges roughly rank by frequency). The size is the loader's override (`--draft-vocab`),
//! else the drafter config's `draft_vocab_size`, else the ranking file's `size` (a default that
//! the reference packages, which read the config, never see); none means the whole vocabulary.
//!
//! Each generation adds its prompt's ids to the ranked ones ([`VocabChoice::pick`]): answers
//! copy rare ids from their prompts (a function's name, a quoted word), which a ranking of
//! typical outputs leaves out. `DSPARK_DRAFT_VOCAB_PROMPT=0` keeps the ranked ids alone.

use std::path::Path;

use crate::backend::{BResult, Backend};
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
    Ok(read_ranking_file(dir, vocab)?.map(|(ids, _)| ids))
}

/// A ranking file's ids and its default size.
type RankingFile = (Vec<u32>, Option<usize>);

/// The ranking file's ids and its default size (`"size"`, optional).
fn read_ranking_file(dir: &Path, vocab: usize) -> Result<Option<RankingFile>, EngineError> {
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
    let size = match v.get("size") {
        None | Some(serde_json::Value::Null) => None,
        Some(x) => Some(
            x.as_u64()
                .ok_or_else(|| bad(format!("size {x} is not a count of ids")))?
                as usize,
        ),
    };
    Ok(Some((ids, size)))
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

/// Whether a generation's prompt ids join its draft vocabulary (`DSPARK_DRAFT_VOCAB_PROMPT`,
/// on unless `0`; read once).
pub fn prompt_ids_join() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_DRAFT_VOCAB_PROMPT").map_or(true, |v| v != "0"))
}

/// What a drafter's directory says of its draft vocabulary (its ranking and its config's
/// size), and the size the loader set.
#[derive(Clone, Debug, Default)]
pub struct VocabChoice {
    ranking: Option<Vec<u32>>,
    configured: Option<usize>,
    size: DraftVocabSize,
    /// Whether a prompt's ids join the ranked ones ([`prompt_ids_join`] unless set).
    prompt_ids: bool,
    /// The ranked ids for the size set and the vocabulary they were chosen from, chosen at the
    /// first [`VocabChoice::pick`] after [`VocabChoice::set_size`], not for every prompt.
    ranked: std::cell::OnceCell<(usize, Option<Vec<u32>>)>,
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
        let (ranking, default) = match read_ranking_file(dir, vocab)? {
            Some((ids, size)) => (Some(ids), size),
            None => (None, None),
        };
        Ok(VocabChoice {
            ranking,
            configured: configured.or(default),
            size: DraftVocabSize::Drafter,
            prompt_ids: prompt_ids_join(),
            ranked: Default::default(),
        })
    }

    /// A ranking and a configured size given directly (tests, tools).
    pub fn ranked(ranking: Option<Vec<u32>>, configured: Option<usize>) -> Self {
        VocabChoice {
            ranking,
            configured,
            size: DraftVocabSize::Drafter,
            prompt_ids: prompt_ids_join(),
            ranked: Default::default(),
        }
    }

    /// Whether [`VocabChoice::pick`] adds a prompt's ids (tests that need the ranked ids alone).
    pub fn with_prompt_ids(mut self, on: bool) -> Self {
        self.prompt_ids = on;
        self
    }

    /// How many ranked ids the size set takes from a `vocab`-id target's vocabulary, before a
    /// prompt's (`None`: the whole vocabulary).
    pub fn ranked_len(&self, vocab: usize) -> Option<usize> {
        self.size.resolve(self.configured, vocab)
    }

    /// Sets the size that [`VocabChoice::pick`] resolves.
    pub fn set_size(&mut self, size: DraftVocabSize) {
        self.size = size;
        self.ranked = Default::default();
    }

    /// The ranked ids of a `vocab`-id target for the size set (`None`: the whole vocabulary).
    fn ranked_ids(&self, vocab: usize) -> Option<Vec<u32>> {
        let choose = || {
            let k = self.size.resolve(self.configured, vocab)?;
            Some(choose_ids(self.ranking.as_deref(), k, vocab))
        };
        match self.ranked.get_or_init(|| (vocab, choose())) {
            (v, ids) if *v == vocab => ids.clone(),
            _ => choose(),
        }
    }

    /// The draft vocabulary of a `vocab`-id target for the size set, with every id of
    /// `prompt` below `vocab` added unless prompt ids are off (`None`: the whole vocabulary).
    pub fn pick(&self, vocab: usize, prompt: &[u32]) -> Option<DraftVocab> {
        let mut v = DraftVocab::new(self.ranked_ids(vocab)?, vocab);
        if self.prompt_ids && !prompt.is_empty() {
            let mut extra: Vec<u32> = prompt
                .iter()
                .copied()
                .filter(|&id| (id as usize) < vocab && v.ids.binary_search(&id).is_err())
                .collect();
            extra.sort_unstable();
            extra.dedup();
            if v.ids.len() + extra.len() >= vocab {
                return None;
            }
            v.ids.extend(extra);
        }
        Some(v)
    }
}

/// The subset a drafter drafts from: the full ids of its head's rows, the ranked ids
/// (ascending) followed by those a prompt adds (ascending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraftVocab {
    ids: Vec<u32>,
    /// How many of `ids` are the ranked ones.
    ranked: usize,
    vocab: usize,
}

impl DraftVocab {
    /// `ids` ascending and below `vocab`, all ranked.
    pub fn new(ids: Vec<u32>, vocab: usize) -> Self {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(ids.last().is_none_or(|&i| (i as usize) < vocab));
        DraftVocab {
            ranked: ids.len(),
            ids,
            vocab,
        }
    }

    /// Every id, row by row: the ranked ones, then the prompt's.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The ranked ids (the first rows).
    pub fn ranked_ids(&self) -> &[u32] {
        &self.ids[..self.ranked]
    }

    /// The ids a prompt added (the last rows).
    pub fn prompt_ids(&self) -> &[u32] {
        &self.ids[self.ranked..]
    }

    /// The target's vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab
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

/// A draft vocabulary's rows of a vocabulary-wide weight (`L`: a backend's linear): the ranked
/// ids' rows, built once for a size, and the rows of the ids the current prompt adds, built
/// for each generation (a few, so a new prompt costs little; the whole subset took 90-125 ms
/// on the demo's 2-core CPU).
pub struct SubsetRows<L> {
    pub vocab: DraftVocab,
    pub ranked: L,
    pub prompt: Option<L>,
    /// Unique to each build of the ranked rows in this process, so that a captured step that
    /// read other rows is not replayed over these. Captured steps read only the ranked rows
    /// ([`ranked_logits`]); the prompt's rows, rebuilt for every prompt, join after the step
    /// ([`join_prompt_logits`]), so a new prompt replays the steps the last one captured.
    pub generation: u64,
}

impl<L> SubsetRows<L> {
    /// The rows for `v` (`None`: the whole vocabulary), keeping `cur`'s ranked rows when the
    /// ranked ids are the same; `rows(ids)` builds rows (`None`: this weight has no rows to
    /// take, and the drafter keeps the whole head).
    pub fn refit<E>(
        cur: Option<SubsetRows<L>>,
        v: Option<DraftVocab>,
        mut rows: impl FnMut(&[u32]) -> Result<Option<L>, E>,
    ) -> Result<Option<SubsetRows<L>>, E> {
        static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let Some(v) = v else { return Ok(None) };
        let (ranked, generation) = match cur {
            Some(c) if c.vocab.ranked_ids() == v.ranked_ids() => {
                if c.vocab.prompt_ids() == v.prompt_ids() {
                    return Ok(Some(c));
                }
                (c.ranked, c.generation)
            }
            other => {
                drop(other); // the old rows go before the new are built
                match rows(v.ranked_ids())? {
                    Some(r) => (r, BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
                    None => return Ok(None),
                }
            }
        };
        let prompt = match v.prompt_ids() {
            [] => None,
            ids => match rows(ids)? {
                Some(r) => Some(r),
                None => return Ok(None),
            },
        };
        Ok(Some(SubsetRows {
            vocab: v,
            ranked,
            prompt,
            generation,
        }))
    }
}

/// A head's logits over a draft vocabulary's ranked rows, or over the whole head without a
/// draft vocabulary: `head(None)` is the whole head, `head(Some(w))` those rows. What a captured
/// block step computes; [`join_prompt_logits`] completes it after the step.
pub fn ranked_logits<L, T>(
    rows: Option<&SubsetRows<L>>,
    head: impl Fn(Option<&L>) -> BResult<T>,
) -> BResult<T> {
    head(rows.map(|r| &r.ranked))
}

/// [`ranked_logits`]' result with the prompt's rows' logits joined after it (on the last
/// axis), where the draft vocabulary has prompt ids: the logits over the whole draft vocabulary,
/// in its id order ([`DraftVocab::ids`]).
pub fn join_prompt_logits<B: Backend>(
    b: &B,
    rows: Option<&SubsetRows<B::Linear>>,
    ranked: B::Tensor,
    head: impl Fn(Option<&B::Linear>) -> BResult<B::Tensor>,
) -> BResult<B::Tensor> {
    match rows.and_then(|r| r.prompt.as_ref()) {
        None => Ok(ranked),
        Some(p) => {
            let extra = head(Some(p))?;
            let last = b.dims(&ranked).len() - 1;
            b.concat(&[&ranked, &extra], last)
        }
    }
}

/// A block step's shape key: the draft count and, under a draft vocabulary, its ranked rows'
/// build (a captured step reads the rows it was captured with).
pub fn rows_key<L>(n: usize, rows: Option<&SubsetRows<L>>) -> Vec<usize> {
    match rows {
        None => vec![n],
        Some(r) => vec![n, r.generation as usize],
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
    fn prompt_ids_join_the_ranked_ones_once() {
        let mut c = VocabChoice::ranked(Some(vec![9, 3, 7]), None).with_prompt_ids(true);
        assert!(c.pick(10, &[1]).is_none(), "no size: the whole vocabulary");
        c.set_size(DraftVocabSize::Top(2));
        assert_eq!(c.pick(10, &[]).unwrap().ids(), [3, 9]);
        // repeats, ids already in and ids past the vocabulary add nothing; the prompt's ids
        // follow the ranked ones
        let v = c.pick(10, &[5, 9, 5, 0, 12]).unwrap();
        assert_eq!(v.ids(), [3, 9, 0, 5]);
        assert_eq!((v.ranked_ids(), v.prompt_ids()), (&[3, 9][..], &[0, 5][..]));
        let full = v.scatter_rows(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((full[0], full[3], full[5], full[9]), (3.0, 1.0, 4.0, 2.0));
        assert_eq!(v.full_ids(&[2, 3, 1]), [0, 5, 9]);
        // a prompt that completes the vocabulary leaves no subset
        assert!(c.pick(10, &[0, 1, 2, 4, 5, 6, 7, 8]).is_none());
        let mut off = c.clone().with_prompt_ids(false);
        assert_eq!(off.pick(10, &[5, 0]).unwrap().ids(), [3, 9]);
        off.set_size(DraftVocabSize::Full);
        assert!(off.pick(10, &[1]).is_none());
    }

    /// Rows of the ranked ids are built once per size and kept while only the prompt's ids
    /// change; each build of them has its own generation, which a new prompt keeps.
    #[test]
    fn subset_rows_keep_the_ranked_rows_across_prompts() {
        let mut c = VocabChoice::ranked(None, None).with_prompt_ids(true);
        c.set_size(DraftVocabSize::Top(3));
        let mut built: Vec<Vec<u32>> = Vec::new();
        let refit = |cur, prompt: &[u32], built: &mut Vec<Vec<u32>>| {
            SubsetRows::refit(cur, c.pick(10, prompt), |ids| {
                built.push(ids.to_vec());
                Ok::<_, ()>(Some(ids.to_vec()))
            })
            .unwrap()
        };
        let a = refit(None, &[7, 1], &mut built).unwrap();
        assert_eq!(
            (&a.ranked[..], a.prompt.as_deref()),
            (&[0, 1, 2][..], Some(&[7][..]))
        );
        let g = a.generation;
        let b = refit(Some(a), &[7], &mut built).unwrap();
        assert_eq!(b.generation, g, "same ids: nothing rebuilt");
        let b = refit(Some(b), &[9, 8], &mut built).unwrap();
        assert_eq!(b.prompt.as_deref(), Some(&[8, 9][..]));
        assert_eq!(b.generation, g, "new prompt rows, the same ranked rows");
        let b = refit(Some(b), &[2], &mut built).unwrap();
        assert!(b.prompt.is_none());
        assert_eq!(built, [vec![0, 1, 2], vec![7], vec![8, 9]]);
        // new ranked rows: a new generation
        c.set_size(DraftVocabSize::Top(2));
        let b = SubsetRows::refit(Some(b), c.pick(10, &[]), |ids| {
            Ok::<_, ()>(Some(ids.to_vec()))
        })
        .unwrap()
        .unwrap();
        assert_eq!(&b.ranked[..], [0, 1]);
        assert_ne!(b.generation, g);
        // other ranked ids whose weight has no rows to take: the whole head
        c.set_size(DraftVocabSize::Top(4));
        let none = SubsetRows::refit(Some(b), c.pick(10, &[]), |_| {
            Ok::<Option<Vec<u32>>, ()>(None)
        });
        assert!(none.unwrap().is_none());
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
        // the file's size is the default; the config's draft_vocab_size overrides it
        std::fs::write(&f, r#"{"ids": [4, 2, 9], "size": 2}"#).unwrap();
        let cfg = serde_json::json!({});
        let c = VocabChoice::read(&dir, &cfg, 10).unwrap();
        assert_eq!(c.ranked_len(10), Some(2));
        let cfg = serde_json::json!({"draft_vocab_size": 5});
        assert_eq!(
            VocabChoice::read(&dir, &cfg, 10).unwrap().ranked_len(10),
            Some(5)
        );
        for (text, needle) in [
            (r#"{"ids": [4, 10]}"#, "below the vocabulary of 10"),
            (r#"{"ids": [4, 4]}"#, "ranked twice"),
            (r#"{"ids": [-1]}"#, "not a token id"),
            (r#"[1, 2]"#, "expected {\"ids\""),
            (
                r#"{"ids": [1], "size": "big"}"#,
                "size \"big\" is not a count",
            ),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = read_ranking(&dir, 10).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(RANKING_FILE), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
