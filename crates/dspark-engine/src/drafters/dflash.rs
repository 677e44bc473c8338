//! DFlash (z-lab): a block-diffusion drafter. The block `[pending, mask x (bs-1)]` runs through
//! the KV-injection backbone over the target's fused hidden states; rows 1.. go through the
//! target's LM head, giving `bs - 1` drafts, each chosen independently (no Markov head).
//! Only accepted positions ever enter the context cache, so a rejection needs no drafter
//! rollback beyond replacing context rows past the committed length.

use rand::RngCore;

use crate::backend::{BResult, Backend};
use crate::constrain::Drafting;
use crate::drafters::draft_vocab::{
    join_prompt_logits, ranked_logits, rows_key, DraftVocabSize, SubsetRows, VocabChoice,
};
use crate::error::EngineError;
use crate::model::kv_injection::KvInjectionNet;
use crate::model::transformer::Transformer;
use crate::sampling::{distribution, pick, plain_greedy, sample_index, SamplingParams};
use crate::spec::{Drafter, DrafterState, Proposal, SpecParams};

pub struct DFlash<B: Backend> {
    net: KvInjectionNet<B>,
    choice: VocabChoice,
    /// The draft vocabulary and the target head's rows for it.
    vocab: Option<SubsetRows<B::Linear>>,
}

impl<B: Backend> DFlash<B> {
    pub fn new(net: KvInjectionNet<B>) -> Self {
        DFlash {
            net,
            choice: VocabChoice::default(),
            vocab: None,
        }
    }

    /// What the drafter's directory says of its draft vocabulary (applied by
    /// [`Drafter::set_draft_vocab`]).
    pub fn with_vocab_choice(mut self, choice: VocabChoice) -> Self {
        self.choice = choice;
        self
    }
}

/// Picks one token per logits row (independently), recording the draft distributions when
/// sampling.
pub(crate) fn choose_rows(
    logits: &[f32],
    vocab: usize,
    sampling: &SamplingParams,
    rng: &mut dyn RngCore,
) -> Result<Proposal, EngineError> {
    let mut tokens = Vec::new();
    let mut qs = Vec::new();
    // under a grammar, row i is masked after drafts 0..i (as verification will mask it)
    let mut grammar = Drafting::new(sampling);
    for row in logits.chunks_exact(vocab) {
        if !grammar.open() {
            break;
        }
        match choose_one(&mut row.to_vec(), &mut grammar, sampling, rng, &mut qs)? {
            Some(d) => tokens.push(d),
            None => break,
        }
    }
    Ok(Proposal {
        tokens,
        q: (!sampling.is_greedy()).then_some(qs),
    })
}

/// One draft from a drafter's row of logits: the grammar's mask applied, then the greedy pick,
/// or a sample whose draft distribution is pushed to `qs`; the grammar then takes the choice.
/// `None` when no id is left to draft (every id the grammar allows lies outside a draft
/// vocabulary): the round's drafts end there.
pub(crate) fn choose_one(
    row: &mut [f32],
    grammar: &mut Drafting,
    sampling: &SamplingParams,
    rng: &mut dyn RngCore,
    qs: &mut Vec<Vec<f32>>,
) -> Result<Option<u32>, EngineError> {
    grammar.mask(row)?;
    if !row.iter().any(|x| x.is_finite()) {
        return Ok(None);
    }
    let d = if sampling.is_greedy() {
        pick(row, sampling, rng)
    } else {
        let q = distribution(row, sampling);
        let d = sample_index(&q, rng);
        qs.push(q);
        d
    };
    grammar.chose(d)?;
    Ok(Some(d))
}

/// The drafts' hidden rows and their logits over the draft vocabulary's ranked rows (what a
/// captured block step computes; [`draft_logits`] joins the prompt's rows): the block
/// `[pending, mask..]` through the drafter over its context, rows 1..=n through the target's LM
/// head.
fn ranked_draft_logits<B: Backend>(
    net: &mut KvInjectionNet<B>,
    target: &Transformer<B>,
    block: &[u32],
    n: usize,
    head_rows: Option<&SubsetRows<B::Linear>>,
) -> BResult<Vec<B::Tensor>> {
    let b = target.backend();
    let x = target.embed(block)?;
    let h = net.block(&x)?;
    let rows = b.narrow(&h, 1, 1, n)?;
    let logits = ranked_logits(head_rows, |w| target.draft_lm_head(&rows, w))?;
    Ok(vec![logits, rows])
}

/// The drafts' logits `[1, n, vocab]` from [`ranked_draft_logits`]' outputs: the prompt's rows
/// joined, then the drafter's softcap.
fn draft_logits<B: Backend>(
    target: &Transformer<B>,
    step: Vec<B::Tensor>,
    softcap: Option<f32>,
    head_rows: Option<&SubsetRows<B::Linear>>,
) -> Result<B::Tensor, EngineError> {
    let b = target.backend();
    let mut outs = step.into_iter();
    let (Some(ranked), Some(rows)) = (outs.next(), outs.next()) else {
        return Err(EngineError::Invalid(
            "the dflash block step gave no logits".into(),
        ));
    };
    let logits = join_prompt_logits(b, head_rows, ranked, |w| target.draft_lm_head(&rows, w))?;
    Ok(match softcap {
        Some(cap) => b.softcap(&logits, cap)?,
        None => logits,
    })
}

impl<B: Backend> Drafter<B> for DFlash<B> {
    fn name(&self) -> &'static str {
        "dflash"
    }

    fn block_len(&self) -> usize {
        self.net.cfg.block_size - 1
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
        self.net.append_taps(taps, start, "dflash")
    }

    fn propose(
        &mut self,
        target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        _spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError> {
        if self.net.ctx_len() != pos {
            return Err(EngineError::Invalid(format!(
                "dflash context holds {} positions, the target {pos}",
                self.net.ctx_len()
            )));
        }
        let b = target.backend();
        let bs = self.net.cfg.block_size;
        let mut block = vec![self.net.cfg.mask_token_id; bs];
        block[0] = pending;
        let n = max.min(bs - 1);
        let softcap = self.net.cfg.final_logit_softcapping;
        let head_rows = self.vocab.as_ref();
        let mut forward =
            |net: &mut KvInjectionNet<B>| ranked_draft_logits(net, target, &block, n, head_rows);
        let step = self
            .net
            .block_step("dflash", &block, rows_key(n, head_rows), &mut forward)?;
        let logits = draft_logits(target, step, softcap, head_rows)?;
        let vocab = self.vocab.as_ref().map(|r| &r.vocab);
        if plain_greedy(sampling) && b.device_argmax() {
            let ids = b.to_u32_vec(&b.argmax_last(&logits)?)?;
            return Ok(Proposal {
                tokens: match vocab {
                    Some(v) => v.full_ids(&ids),
                    None => ids,
                },
                q: None,
            });
        }
        let host = b.to_f32_vec(&logits)?;
        let host = match vocab {
            Some(v) => v.scatter_rows(&host),
            None => host,
        };
        choose_rows(&host, target.cfg.vocab_size, sampling, rng)
    }

    fn set_draft_vocab(
        &mut self,
        target: &Transformer<B>,
        size: DraftVocabSize,
    ) -> Result<Option<usize>, EngineError> {
        self.choice.set_size(size);
        self.vocab = None;
        self.fit_prompt(target, &[])?;
        Ok(self.draft_vocab_len())
    }

    fn fit_prompt(&mut self, target: &Transformer<B>, prompt: &[u32]) -> Result<(), EngineError> {
        let v = self.choice.pick(target.cfg.vocab_size, prompt);
        self.vocab = SubsetRows::refit(self.vocab.take(), v, |ids| target.draft_head_rows(ids))?;
        Ok(())
    }

    fn draft_vocab_len(&self) -> Option<usize> {
        let r = self.vocab.as_ref()?;
        self.choice.ranked_len(r.vocab.vocab_size())
    }

    fn commit(
        &mut self,
        _tokens: &[u32],
        pos: usize,
        taps: Option<&B::Tensor>,
    ) -> Result<(), EngineError> {
        self.net.append_taps(taps, pos, "dflash")
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

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// A row left with no finite logit (a grammar allowing only ids outside a draft
    /// vocabulary) ends the drafts: greedy and sampled, without a draft or an error.
    #[test]
    fn a_row_with_no_finite_logit_ends_the_drafts() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let inf = f32::NEG_INFINITY;
        let sampled = SamplingParams {
            temperature: 1.0,
            ..SamplingParams::default()
        };
        for sampling in [SamplingParams::greedy(), sampled] {
            let rows = [0.5, 2.0, inf, 1.0, inf, inf, inf, inf, 3.0, 0.0, 0.0, 0.0];
            let p = choose_rows(&rows, 4, &sampling, &mut rng).unwrap();
            assert_eq!(p.tokens.len(), 1, "{:?}", p.tokens);
            assert!(p.tokens[0] < 4);
            assert_eq!(
                p.q.map_or(0, |q| q.len()),
                usize::from(!sampling.is_greedy())
            );
        }
    }
}
