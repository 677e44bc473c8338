//! The speculative generation loop, shared by every drafter:
//! prefill (with taps) -> [draft -> verify in one target forward -> commit -> roll back]*.
//! Stopping rules are the baseline's (`generate::stopping`), so eos inside an accepted block
//! ends generation there and `max_new_tokens` is never exceeded.

use std::time::Instant;

use super::draft_budget::DraftBudget;
use super::lookup_count::bucket;
use super::prompt_lookup::{replace_after_first, LookupContext};
use super::verify::{verify_greedy, verify_sampled};
use super::{Drafter, Proposal, SpecParams};
use crate::backend::Backend;
use crate::constrain::shared as constrain;
use crate::error::EngineError;
use crate::generate::baseline::check_context;
use crate::generate::stopping::Budget;
use crate::generate::{FinishReason, Flow, GenParams, GenResult, GenStats, TokenSink};
use crate::kv::KvCache;
use crate::model::transformer::{LogitsWanted, Transformer};
use crate::sampling::logprobs::{self, TokenLogprob};
use crate::sampling::{adjust, adjusts, argmax, distribution, pick, plain_greedy, rng_for};

/// Generates after `prompt` with `drafter`. `cache` (and the drafter) may already hold a
/// prefix of the prompt; both must hold the same length.
pub fn generate<B: Backend>(
    target: &Transformer<B>,
    cache: &mut KvCache<B>,
    drafter: &mut dyn Drafter<B>,
    prompt: &[u32],
    params: &GenParams,
    spec: &SpecParams,
    sink: &mut dyn TokenSink,
) -> Result<GenResult, EngineError> {
    generate_with(target, cache, drafter, prompt, params, spec, None, sink)
}

/// [`generate`], with each round's draft count chosen by `draft_count` (within
/// `spec.max_draft`) and every finished round reported back to it.
#[allow(clippy::too_many_arguments)]
pub fn generate_with<B: Backend>(
    target: &Transformer<B>,
    cache: &mut KvCache<B>,
    drafter: &mut dyn Drafter<B>,
    prompt: &[u32],
    params: &GenParams,
    spec: &SpecParams,
    mut draft_count: Option<&mut DraftBudget>,
    sink: &mut dyn TokenSink,
) -> Result<GenResult, EngineError> {
    let b = target.backend();
    // verification may feed a whole block past the last emitted token
    let slack = drafter.block_len() + 1;
    check_context(
        prompt.len(),
        params.max_new_tokens + slack,
        target.cfg.max_position_embeddings,
    )?;
    let reuse = cache
        .len()
        .min(drafter.len())
        .min(prompt.len().saturating_sub(1));
    cache.truncate(reuse);
    // a sliding-window cache truncated below what it still holds starts over
    let reuse = cache.len();
    drafter.truncate(reuse);
    drafter.fit_prompt(target, prompt)?;

    drafter.set_count_from_caller(draft_count.is_some());
    let taps = drafter.taps().to_vec();
    let mut stats = GenStats {
        prompt_tokens: prompt.len(),
        cached_tokens: reuse,
        ..Default::default()
    };
    let mut rng = rng_for(params.sampling.seed);
    let mut budget = Budget::new(params.max_new_tokens, &params.eos);
    let mut tokens = Vec::new();

    constrain::begin(&params.sampling)?;
    let t0 = Instant::now();
    let out = target.forward(&prompt[reuse..], cache, &taps, LogitsWanted::Last)?;
    stats.target_forwards += 1;
    drafter.prefill(&prompt[reuse..], reuse, out.taps.as_ref())?;
    let mut row = b.to_f32_vec(out.logits.as_ref().expect("asked for logits"))?;
    adjust(&mut row, &params.sampling, prompt, &[]);
    constrain::mask(&params.sampling, &mut row)?;
    let mut pending = pick(&row, &params.sampling, &mut rng);
    constrain::commit(&params.sampling, &[pending])?;
    // log-probabilities of `block`, one per token, when asked
    let mut block_lps: Vec<TokenLogprob> = logprobs::for_pick(&row, pending, &params.sampling)
        .into_iter()
        .collect();
    let mut lps: Vec<TokenLogprob> = Vec::new();
    stats.prefill_secs = t0.elapsed().as_secs_f64();

    // prompt lookup's context (the prompt and every committed token); never under a grammar,
    // whose drafts must each be allowed where the drafter's are
    let lookup = spec.lookup
        && drafter.lookup_safe()
        && drafter.block_len() >= 2
        && params.sampling.constraint.is_none();
    let mut looks = lookup.then(|| LookupContext::new(prompt));

    let v = target.cfg.vocab_size;
    let t1 = Instant::now();
    let mut block = vec![pending];
    let mut first = true;
    let finish = if params.max_new_tokens == 0 {
        FinishReason::Length
    } else {
        loop {
            // emit the committed block under the stopping rules
            let (n, fin) = budget.admit(&block);
            if !std::mem::take(&mut first) {
                stats.accept_lengths.push(block.len());
            }
            if n > 0 {
                tokens.extend_from_slice(&block[..n]);
                if let Some(l) = looks.as_mut() {
                    l.extend(&block[..n]);
                }
                if !block_lps.is_empty() {
                    sink.logprobs(&block_lps[..n]);
                    lps.extend_from_slice(&block_lps[..n]);
                }
                match sink.push(&block[..n]) {
                    Flow::Continue => {}
                    Flow::StopString => break FinishReason::Stop,
                    Flow::Cancel => break FinishReason::Cancelled,
                }
            }
            if let Some(f) = fin {
                break f;
            }
            pending = *block.last().expect("a round commits at least one token");

            // draft
            let pos = cache.len();
            let td = Instant::now();
            let captures = b.step_captures();
            // a measured count may be 0: a plain target step (still feeding the drafter) where
            // no draft count pays for its verify rows
            let cap = spec.max_draft.clamp(1, drafter.block_len());
            let k = match draft_count.as_deref() {
                Some(bud) => bud.choose(cap),
                None => cap,
            };
            let mut proposal = match k {
                0 => Proposal {
                    tokens: vec![],
                    q: Some(vec![]),
                },
                k => drafter.propose(target, pending, pos, k, spec, &params.sampling, &mut rng)?,
            };
            let looked = match (&looks, proposal.tokens.first()) {
                (Some(l), Some(&first)) => {
                    lookup_drafts(l, first, &mut proposal, cap, draft_count.as_deref(), v)
                }
                _ => None,
            };
            stats.lookup_rounds += usize::from(looked.is_some());
            stats.draft_secs += td.elapsed().as_secs_f64();
            let drafts = proposal.tokens;
            stats.drafts_per_round.push(drafts.len());

            // verify: one target forward over [pending, d1..dm]
            let tv = Instant::now();
            let mut fed = Vec::with_capacity(drafts.len() + 1);
            fed.push(pending);
            fed.extend_from_slice(&drafts);
            let out = target.forward(&fed, cache, &taps, LogitsWanted::All)?;
            stats.target_forwards += 1;
            let out_logits = out.logits.as_ref().expect("asked for logits");
            // plain greedy on a GPU: only the ids cross to the host (`argmax`'s rule)
            let device_pick = plain_greedy(&params.sampling) && b.device_argmax();
            let mut logits = if device_pick {
                Vec::new()
            } else {
                b.to_f32_vec(out_logits)?
            };
            let outcome = if device_pick {
                verify_greedy(&b.to_u32_vec(&b.argmax_last(out_logits)?)?, &drafts)
            } else {
                if adjusts(&params.sampling) {
                    // row j follows the emitted tokens and drafts 1..j: what the baseline would
                    // have seen there had those drafts been its own tokens
                    let mut seen = tokens.clone();
                    for (j, r) in logits.chunks_exact_mut(v).enumerate() {
                        adjust(r, &params.sampling, prompt, &seen);
                        seen.extend(drafts.get(j));
                    }
                }
                // row j under the grammar state after the emitted tokens and drafts 1..j
                constrain::mask_block(&params.sampling, &mut logits, v, &drafts)?;
                let rows: Vec<&[f32]> = logits.chunks_exact(v).collect();
                if params.sampling.is_greedy() {
                    let am: Vec<u32> = rows.iter().map(|r| argmax(r)).collect();
                    verify_greedy(&am, &drafts)
                } else {
                    let p: Vec<Vec<f32>> = rows
                        .iter()
                        .map(|r| distribution(r, &params.sampling))
                        .collect();
                    let q = proposal.q.as_ref().ok_or_else(|| {
                        EngineError::Invalid(format!(
                            "{} drafter gave no draft distribution",
                            drafter.name()
                        ))
                    })?;
                    verify_sampled(&p, q, &drafts, &mut rng)
                }
            };
            stats.verify_secs += tv.elapsed().as_secs_f64();

            if looked.is_some() {
                // the first draft is the drafter's, the rest the lookup's
                stats.lookup_accepted += outcome.accepted.saturating_sub(1);
            }
            // roll back: keep pending + accepted drafts
            let keep = outcome.accepted + 1;
            cache.truncate(pos + keep);
            let kept_taps = match &out.taps {
                Some(t) => Some(b.narrow(t, 0, 0, keep)?),
                None => None,
            };
            drafter.commit(&fed[..keep], pos, kept_taps.as_ref())?;
            if let Some(bud) = draft_count.as_deref_mut() {
                // a round that captured a step (a CUDA graph of a new shape) is not timed: it
                // costs several steady rounds, and left a count it visited once looking dear
                let secs = if b.step_captures() == captures {
                    td.elapsed().as_secs_f64()
                } else {
                    f64::NAN
                };
                bud.observe_round(drafts.len(), outcome.accepted, secs, looked);
            }
            block = drafts[..outcome.accepted].to_vec();
            block.push(outcome.next);
            constrain::commit(&params.sampling, &block)?;
            if let Some(k) = params.sampling.logprobs {
                // row j scored block[j]: the accepted drafts, then the correction or bonus
                block_lps = block
                    .iter()
                    .enumerate()
                    .map(|(j, &t)| logprobs::of_row(&logits[j * v..(j + 1) * v], t, k))
                    .collect();
            }
        }
    };
    stats.decode_secs = t1.elapsed().as_secs_f64();
    Ok(GenResult {
        tokens,
        text: String::new(),
        finish_reason: finish,
        stats,
        logprobs: lps,
    })
}

/// Prompt lookup after `proposal`'s first draft `first`: where the context through it has a
/// match, the drafts after it become the lookup's, as many as `budget` chooses (all it has,
/// up to `cap` drafts in all, without one), unless the budget keeps the drafter's. Returns
/// the match's kind ([`bucket`]) where the lookup supplied drafts.
fn lookup_drafts(
    looks: &LookupContext,
    first: u32,
    proposal: &mut Proposal,
    cap: usize,
    budget: Option<&DraftBudget>,
    vocab: usize,
) -> Option<usize> {
    let found = looks.after(first, cap.saturating_sub(1))?;
    let kind = bucket(found.matched);
    let n = match budget {
        Some(b) => b.choose_lookup(cap, proposal.tokens.len(), found.tokens.len(), kind)?,
        None => found.tokens.len() + 1,
    };
    replace_after_first(proposal, &found.tokens[..n - 1], vocab);
    Some(kind)
}
