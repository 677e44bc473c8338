//! DSpark (DeepSeek): the KV-injection backbone with the anchor as the first prediction slot
//! (`[pending, mask x (g-1)]` gives `g` logits rows), its own embedding and LM head, and a
//! sequential low-rank Markov head: row i's logits get `w2(w1[prev])` added, where `prev` is the
//! token chosen at row i-1 (the pending token for row 0). An optional confidence head
//! `sigmoid(proj([h_i; w1[prev_i]]))` truncates the block where the running product of
//! confidences falls below a threshold (at least one draft is kept).
//!
//! A Gemma drafter (`model_type` gemma4) runs the Gemma 4 backbone of
//! [`crate::model::drafter_gemma`] and scales its own embeddings by `sqrt(H)`. A drafter without
//! its own embedding or head binds the target's: the target's scaled embedding, and the
//! target's full projection (with the target's softcap) before the drafter's own softcap.

use rand::RngCore;
use serde_json::Value;

use crate::backend::{BResult, Backend, DType};
use crate::constrain::Drafting;
use crate::drafters::dflash::choose_one;
use crate::drafters::draft_vocab::{
    join_prompt_logits, ranked_logits, rows_key, DraftVocabSize, SubsetRows, VocabChoice,
};
use crate::error::EngineError;
use crate::model::gemma::GemmaSpec;
use crate::model::kv_injection::{DrafterConfig, KvInjectionNet};
use crate::model::layer::{linear, load_err, tensor};
use crate::model::transformer::Transformer;
use crate::sampling::{plain_greedy, SamplingParams};
use crate::spec::{Drafter, DrafterState, Proposal, SpecParams};
use crate::weights::{LoadError, WeightSource};

struct Confidence<B: Backend> {
    proj: B::Linear,
    bias: B::Tensor,
    /// Input is `[h; w1[prev]]` (else `h` alone).
    with_markov: bool,
}

pub struct DSpark<B: Backend> {
    net: KvInjectionNet<B>,
    /// Own embedding and head; `None` means the target's.
    embed: Option<B::Tensor>,
    lm_head: Option<B::Linear>,
    markov_w1: Option<B::Tensor>,
    markov_w2: Option<B::Linear>,
    confidence: Option<Confidence<B>>,
    choice: VocabChoice,
    subset: Option<Subset<B>>,
}

/// A draft vocabulary and the rows the drafter reads for it.
struct Subset<B: Backend> {
    /// The draft vocabulary and the rows of the head (its own, or the target's).
    head: SubsetRows<B::Linear>,
    /// Rows of the Markov head's `w2` (bias over the subset), and `w1`'s subset rows followed
    /// by the whole of `w1`: the device chain looks the token before up by its subset row, and
    /// the pending token (any id) at `k + id`.
    w2: Option<B::Linear>,
    w1: Option<B::Tensor>,
}

impl<B: Backend> DSpark<B> {
    pub fn load(
        b: &B,
        src: &dyn WeightSource,
        cfg: DrafterConfig,
        raw: &Value,
        target: &Transformer<B>,
    ) -> Result<Self, EngineError> {
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let rank = raw.get("markov_rank").and_then(Value::as_u64).unwrap_or(0) as usize;
        let embed = if src.contains("embed_tokens.weight") {
            Some(tensor(b, src, "embed_tokens.weight", &[v, h])?)
        } else {
            None
        };
        let lm_head = if src.contains("lm_head.weight") {
            Some(linear(b, src, "lm_head.weight", &[v, h])?)
        } else {
            None
        };
        if (embed.is_none() || lm_head.is_none()) && h != target.cfg.hidden_size {
            return Err(EngineError::DrafterMismatch(format!(
                "drafter without its own embedding/head must match the target hidden size ({} vs {})",
                h, target.cfg.hidden_size
            )));
        }
        let (markov_w1, markov_w2) = if rank > 0 {
            (
                Some(tensor(b, src, "markov_head.markov_w1.weight", &[v, rank])?),
                Some(linear(b, src, "markov_head.markov_w2.weight", &[v, rank])?),
            )
        } else {
            (None, None)
        };
        let conf_on = raw
            .get("enable_confidence_head")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let confidence = if conf_on && src.contains("confidence_head.proj.weight") {
            let with_markov = raw
                .get("confidence_head_with_markov")
                .and_then(Value::as_bool)
                .unwrap_or(true)
                && rank > 0;
            let width = if with_markov { h + rank } else { h };
            let proj = linear(b, src, "confidence_head.proj.weight", &[1, width])?;
            let bias = if src.contains("confidence_head.proj.bias") {
                tensor(b, src, "confidence_head.proj.bias", &[1])?
            } else {
                b.zeros(&[1])
                    .map_err(|e| load_err(src, "confidence_head.proj.bias", e))?
            };
            Some(Confidence {
                proj,
                bias,
                with_markov,
            })
        } else {
            None
        };
        let net =
            KvInjectionNet::load(b, src, cfg, target.cfg.hidden_size).map_err(|e: LoadError| e)?;
        Ok(DSpark {
            net,
            embed,
            lm_head,
            markov_w1,
            markov_w2,
            confidence,
            choice: VocabChoice::default(),
            subset: None,
        })
    }

    /// What the drafter's directory says of its draft vocabulary (applied by
    /// [`Drafter::set_draft_vocab`]).
    pub fn with_vocab_choice(mut self, choice: VocabChoice) -> Self {
        self.choice = choice;
        self
    }

    /// The Markov head's output side over the drafted ids (the subset's rows, or all).
    fn w2(&self) -> Option<&B::Linear> {
        match &self.subset {
            Some(s) => s.w2.as_ref(),
            None => self.markov_w2.as_ref(),
        }
    }

    /// The Markov head's rows for a draft vocabulary's `ids` (row order): `(w2, w1)`, both
    /// `None` without a Markov head; `None` where `w2`'s form has no rows to take.
    #[allow(clippy::type_complexity)]
    fn markov_rows(
        &self,
        b: &B,
        ids: &[u32],
    ) -> Result<Option<(Option<B::Linear>, Option<B::Tensor>)>, EngineError> {
        match (&self.markov_w1, &self.markov_w2) {
            (Some(w1), Some(w2)) => {
                let Some(w2) = b.draft_rows(w2, ids)? else {
                    return Ok(None);
                };
                let rows = b.embedding_ids(w1, ids, &[ids.len()])?;
                Ok(Some((Some(w2), Some(b.concat(&[&rows, w1], 0)?))))
            }
            _ => Ok(Some((None, None))),
        }
    }

    /// `w2(w1[prev])`, the Markov bias for the row after `prev` (`[1, vocab]`, on the device).
    fn markov_bias(&self, b: &B, prev: u32) -> Result<Option<B::Tensor>, EngineError> {
        match (&self.markov_w1, self.w2()) {
            (Some(w1), Some(w2)) => {
                let e = b.embedding_ids(w1, &[prev], &[1])?;
                Ok(Some(b.matmul(&e, w2)?))
            }
            _ => Ok(None),
        }
    }

    /// Plain greedy drafts with every row's argmax taken on the device (a GPU): row i of
    /// `logits` (`[1, n, vocab]`) plus the Markov bias of the token before, summed in f32 as
    /// the host path sums them. The ids stay on the device (each row's bias reads the row
    /// before's id there) and cross the bus once, all n together, instead of every row and
    /// every bias as f32; a backend with the chain fused ([`Backend::markov_greedy`]) runs it
    /// as one launch a row. Returns the drafts and the token before each.
    fn greedy_on_device(
        &self,
        b: &B,
        logits: &B::Tensor,
        n: usize,
        pending: u32,
    ) -> Result<(Vec<u32>, Vec<u32>), EngineError> {
        let vocab = *b.dims(logits).last().unwrap_or(&0);
        // under a draft vocabulary, w1 is the extended table: the pending token at k + id
        let (w1, first) = match &self.subset {
            Some(s) => (s.w1.as_ref(), vocab as u32 + pending),
            None => (self.markov_w1.as_ref(), pending),
        };
        let fused = match (w1, self.w2()) {
            (Some(w1), Some(w2)) if n > 0 => b.markov_greedy(logits, w1, w2, first, n)?,
            _ => None,
        };
        if let Some(ids) = fused {
            let tokens = b.to_u32_vec(&ids)?;
            let prevs = std::iter::once(pending)
                .chain(tokens.iter().copied())
                .take(n)
                .collect();
            return Ok((tokens, prevs));
        }
        let mut ids: Vec<B::Tensor> = Vec::with_capacity(n);
        for i in 0..n {
            let mut row = b.narrow(logits, 1, i, 1)?;
            if let (Some(w1), Some(w2)) = (w1, self.w2()) {
                // w1 of the token before: `first` for row 0, else row i - 1's argmax (a subset
                // row under a draft vocabulary)
                let e = match ids.last() {
                    None => b.embedding_ids(w1, &[first], &[1])?,
                    Some(prev) => b.embedding_below(w1, prev, vocab)?,
                };
                let bias = b.reshape(&b.matmul(&e, w2)?, &[1, 1, vocab])?;
                row = b.add(
                    &b.to_dtype(&row, DType::F32)?,
                    &b.to_dtype(&bias, DType::F32)?,
                )?;
            }
            ids.push(b.reshape(&b.argmax_last(&row)?, &[1])?);
        }
        let tokens = if ids.is_empty() {
            Vec::new()
        } else {
            b.to_u32_vec(&b.concat(&ids.iter().collect::<Vec<_>>(), 0)?)?
        };
        let tokens = match &self.subset {
            Some(s) => s.head.vocab.full_ids(&tokens),
            None => tokens,
        };
        let prevs = std::iter::once(pending)
            .chain(tokens.iter().copied())
            .take(tokens.len())
            .collect();
        Ok((tokens, prevs))
    }

    /// Drafts chosen on the host from whole rows (sampling, or greedy with logit processors,
    /// a grammar or on the CPU): returns the drafts, their draft distributions when sampling,
    /// and the token before each.
    #[allow(clippy::type_complexity)]
    fn choose_on_host(
        &self,
        b: &B,
        logits: &B::Tensor,
        vocab: usize,
        pending: u32,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<(Vec<u32>, Vec<Vec<f32>>, Vec<u32>), EngineError> {
        let host = b.to_f32_vec(logits)?;
        let width = self.subset.as_ref().map_or(vocab, |s| s.head.vocab.len());
        let mut tokens = Vec::new();
        let mut qs = Vec::new();
        let mut prev = pending;
        let mut prevs = Vec::new();
        // under a grammar, row i is masked after drafts 0..i (as verification will mask it)
        let mut grammar = Drafting::new(sampling);
        for row in host.chunks_exact(width) {
            if !grammar.open() {
                break;
            }
            let mut row = row.to_vec();
            if let Some(bias) = self.markov_bias(b, prev)? {
                for (x, y) in row.iter_mut().zip(b.to_f32_vec(&bias)?) {
                    *x += y;
                }
            }
            if let Some(s) = &self.subset {
                row = s.head.vocab.scatter_rows(&row);
            }
            let Some(d) = choose_one(&mut row, &mut grammar, sampling, rng, &mut qs)? else {
                break;
            };
            prevs.push(prev);
            tokens.push(d);
            prev = d;
        }
        Ok((tokens, qs, prevs))
    }

    /// Confidence of each kept row given its previous token.
    fn confidences(
        &self,
        b: &B,
        hidden: &B::Tensor,
        prevs: &[u32],
    ) -> Result<Option<Vec<f32>>, EngineError> {
        let Some(c) = &self.confidence else {
            return Ok(None);
        };
        let n = prevs.len();
        let h = b.reshape(hidden, &[n, self.net.cfg.hidden_size])?;
        let input = match (&self.markov_w1, c.with_markov) {
            (Some(w1), true) => {
                let e = b.embedding_ids(w1, prevs, &[n])?;
                b.concat(&[&h, &e], 1)?
            }
            _ => h,
        };
        let logit = b.add(&b.matmul(&input, &c.proj)?, &c.bias)?;
        Ok(Some(b.to_f32_vec(&b.sigmoid(&logit)?)?))
    }
}

/// What a block forward reads of the drafter besides its backbone.
struct Parts<'a, B: Backend> {
    embed: Option<&'a B::Tensor>,
    lm_head: Option<&'a B::Linear>,
    /// The head's rows for a draft vocabulary.
    head_rows: Option<&'a SubsetRows<B::Linear>>,
}

impl<B: Backend> Parts<'_, B> {
    /// The drafts' logits over the draft vocabulary's ranked rows (before the prompt's rows,
    /// the softcap and the Markov bias: [`Parts::join_prompt`]) and their hidden rows: the block
    /// `[pending, mask..]` through the backbone over its context, rows 0..n through the head.
    /// What a captured block step computes.
    fn draft_logits(
        &self,
        net: &mut KvInjectionNet<B>,
        target: &Transformer<B>,
        block: &[u32],
        n: usize,
    ) -> BResult<(B::Tensor, B::Tensor)> {
        let b = target.backend();
        let g = block.len();
        let x = match self.embed {
            Some(e) => {
                let x = b.embedding_ids(e, block, &[1, g])?;
                match &net.cfg.gemma {
                    // Gemma scales its own table by sqrt(H); the target's embed() already does
                    Some(_) => b.scale(&x, GemmaSpec::embed_scale(net.cfg.hidden_size))?,
                    None => x,
                }
            }
            None => target.embed(block)?,
        };
        let h = net.block(&x)?;
        let rows = b.narrow(&h, 1, 0, n)?;
        let logits = ranked_logits(self.head_rows, |w| self.project(target, &rows, w))?;
        Ok((logits, rows))
    }

    /// Draft rows `rows` through the head (its own, or the target's projection), over `w` (rows
    /// of it) or the whole head.
    fn project(
        &self,
        target: &Transformer<B>,
        rows: &B::Tensor,
        w: Option<&B::Linear>,
    ) -> BResult<B::Tensor> {
        // a bound head is the target's whole projection, its own softcap included (as
        // mlx-dspark binds `lm_head_proj`)
        match self.lm_head {
            Some(own) => target.backend().draft_matmul(rows, w.unwrap_or(own)),
            None => target.draft_project(rows, w),
        }
    }

    /// [`Parts::draft_logits`]' ranked logits with the prompt's rows joined (outside a captured
    /// step, which reads only the ranked rows), then the drafter's softcap.
    fn join_prompt(
        &self,
        net: &KvInjectionNet<B>,
        target: &Transformer<B>,
        ranked: B::Tensor,
        rows: &B::Tensor,
    ) -> BResult<B::Tensor> {
        let b = target.backend();
        let logits =
            join_prompt_logits(b, self.head_rows, ranked, |w| self.project(target, rows, w))?;
        match net.cfg.final_logit_softcapping {
            Some(cap) => b.softcap(&logits, cap),
            None => Ok(logits),
        }
    }
}

impl<B: Backend> Drafter<B> for DSpark<B> {
    fn name(&self) -> &'static str {
        "dspark"
    }

    fn block_len(&self) -> usize {
        self.net.cfg.block_size
    }

    fn taps(&self) -> &[usize] {
        &self.net.cfg.target_layer_ids
    }

    fn prefill(
        &mut self,
        _tokens: &[u32],
        start: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.net.append_taps(taps, start, "dspark")
    }

    fn propose(
        &mut self,
        target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError> {
        if self.net.ctx_len() != pos {
            return Err(EngineError::Invalid(format!(
                "dspark context holds {} positions, the target {pos}",
                self.net.ctx_len()
            )));
        }
        let b = target.backend();
        let g = self.net.cfg.block_size;
        let mut block = vec![self.net.cfg.mask_token_id; g];
        block[0] = pending;
        let n = max.min(g);
        let parts = Parts {
            embed: self.embed.as_ref(),
            lm_head: self.lm_head.as_ref(),
            head_rows: self.subset.as_ref().map(|s| &s.head),
        };
        let mut forward = |net: &mut KvInjectionNet<B>| {
            let (logits, rows) = parts.draft_logits(net, target, &block, n)?;
            Ok(vec![logits, rows])
        };
        let mut outs = self
            .net
            .block_step("dspark", &block, rows_key(n, parts.head_rows), &mut forward)?
            .into_iter();
        let (Some(ranked), Some(rows)) = (outs.next(), outs.next()) else {
            return Err(EngineError::Invalid(
                "the dspark block step gave no logits".into(),
            ));
        };
        let logits = parts.join_prompt(&self.net, target, ranked, &rows)?;
        let (mut tokens, mut qs, prevs) = if plain_greedy(sampling) && b.device_argmax() {
            let (tokens, prevs) = self.greedy_on_device(b, &logits, n, pending)?;
            (tokens, Vec::new(), prevs)
        } else {
            self.choose_on_host(b, &logits, target.cfg.vocab_size, pending, sampling, rng)?
        };
        if spec.confidence_threshold > 0.0 {
            if let Some(c) = self.confidences(b, &rows, &prevs)? {
                let mut keep = 1;
                let mut prod = c[0];
                for &ci in &c[1..] {
                    prod *= ci;
                    if prod < spec.confidence_threshold {
                        break;
                    }
                    keep += 1;
                }
                if c[0] < spec.confidence_threshold {
                    keep = 1;
                }
                tokens.truncate(keep);
                qs.truncate(keep);
            }
        }
        Ok(Proposal {
            tokens,
            q: (!sampling.is_greedy()).then_some(qs),
        })
    }

    fn commit(
        &mut self,
        _tokens: &[u32],
        pos: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.net.append_taps(taps, pos, "dspark")
    }

    fn set_draft_vocab(
        &mut self,
        target: &Transformer<B>,
        size: DraftVocabSize,
    ) -> Result<Option<usize>, EngineError> {
        self.choice.set_size(size);
        self.subset = None;
        self.fit_prompt(target, &[])?;
        Ok(self.draft_vocab_len())
    }

    fn fit_prompt(&mut self, target: &Transformer<B>, prompt: &[u32]) -> Result<(), EngineError> {
        let v = self.choice.pick(target.cfg.vocab_size, prompt);
        if self.subset.as_ref().map(|s| &s.head.vocab) == v.as_ref() {
            return Ok(());
        }
        // the head's ranked rows carry over; the Markov rows follow the new row order
        let cur = self.subset.take().map(|s| s.head);
        let b = target.backend();
        let lm_head = self.lm_head.as_ref();
        let head = SubsetRows::refit(cur, v, |ids| match lm_head {
            Some(w) => b.draft_rows(w, ids),
            None => target.draft_head_rows(ids),
        })?;
        let Some(head) = head else { return Ok(()) };
        if let Some((w2, w1)) = self.markov_rows(b, head.vocab.ids())? {
            self.subset = Some(Subset { head, w2, w1 });
        }
        Ok(())
    }

    fn draft_vocab_len(&self) -> Option<usize> {
        let s = self.subset.as_ref()?;
        self.choice.ranked_len(s.head.vocab.vocab_size())
    }

    fn lookup_safe(&self) -> bool {
        // its context is the target's taps of committed tokens alone
        true
    }

    fn truncate(&mut self, len: usize) {
        self.net.truncate(len);
    }

    fn len(&self) -> usize {
        self.net.ctx_len()
    }

    fn take_state(&mut self) -> DrafterState<B> {
        DrafterState {
            kv: Some(self.net.take_context()),
            backlog: Vec::new(),
        }
    }

    fn put_state(&mut self, state: DrafterState<B>) {
        self.net.put_context(state.kv);
    }
}
