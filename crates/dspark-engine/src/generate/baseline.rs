//! Plain autoregressive generation with the target alone: the reference every speculative
//! mode must reproduce.

use std::time::Instant;

use super::stopping::Budget;
use super::{FinishReason, Flow, GenParams, GenResult, GenStats, TokenSink};
use crate::backend::Backend;
use crate::constrain::shared as constrain;
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::transformer::{LogitsWanted, Transformer};
use crate::sampling::logprobs::{self, TokenLogprob};
use crate::sampling::{adjust, pick, plain_greedy, rng_for};

/// Generates after `prompt`. `cache` may already hold a prefix of `prompt` (prefix reuse);
/// at least one prompt token is always prefilled.
pub fn generate<B: Backend>(
    model: &Transformer<B>,
    cache: &mut KvCache<B>,
    prompt: &[u32],
    params: &GenParams,
    sink: &mut dyn TokenSink,
) -> Result<GenResult, EngineError> {
    let b = model.backend();
    check_context(
        prompt.len(),
        params.max_new_tokens,
        model.cfg.max_position_embeddings,
    )?;
    if cache.len() >= prompt.len() {
        cache.truncate(prompt.len().saturating_sub(1));
    }
    let cached = cache.len();
    let mut stats = GenStats {
        prompt_tokens: prompt.len(),
        cached_tokens: cached,
        ..Default::default()
    };
    let mut rng = rng_for(params.sampling.seed);
    let mut tokens = Vec::new();
    let mut budget = Budget::new(params.max_new_tokens, &params.eos);

    constrain::begin(&params.sampling)?;
    let t0 = Instant::now();
    let out = model.forward(&prompt[cached..], cache, &[], LogitsWanted::Last)?;
    let mut row = b.to_f32_vec(out.logits.as_ref().expect("asked for logits"))?;
    stats.target_forwards += 1;
    adjust(&mut row, &params.sampling, prompt, &[]);
    constrain::mask(&params.sampling, &mut row)?;
    let mut next = pick(&row, &params.sampling, &mut rng);
    constrain::commit(&params.sampling, &[next])?;
    let mut next_lp = logprobs::for_pick(&row, next, &params.sampling);
    let mut lps: Vec<TokenLogprob> = Vec::new();
    stats.prefill_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut first = true;
    let finish = if params.max_new_tokens == 0 {
        FinishReason::Length
    } else {
        loop {
            let (n, fin) = budget.admit(&[next]);
            // the prefill's token is not a decode round
            if !std::mem::take(&mut first) {
                stats.accept_lengths.push(1);
            }
            if n > 0 {
                tokens.push(next);
                if let Some(lp) = next_lp.take() {
                    sink.logprobs(std::slice::from_ref(&lp));
                    lps.push(lp);
                }
                match sink.push(&[next]) {
                    Flow::Continue => {}
                    Flow::StopString => break FinishReason::Stop,
                    Flow::Cancel => break FinishReason::Cancelled,
                }
            }
            if let Some(f) = fin {
                break f;
            }
            let out = model.forward(&[next], cache, &[], LogitsWanted::Last)?;
            stats.target_forwards += 1;
            let logits = out.logits.as_ref().expect("asked for logits");
            if plain_greedy(&params.sampling) && b.device_argmax() {
                // only the id crosses to the host; the same first-index rule as `argmax`
                next = b.to_u32_vec(&b.argmax_last(logits)?)?[0];
                continue;
            }
            let mut row = b.to_f32_vec(logits)?;
            adjust(&mut row, &params.sampling, prompt, &tokens);
            constrain::mask(&params.sampling, &mut row)?;
            next = pick(&row, &params.sampling, &mut rng);
            constrain::commit(&params.sampling, &[next])?;
            next_lp = logprobs::for_pick(&row, next, &params.sampling);
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

/// Rejects requests that cannot fit the model's context.
pub fn check_context(prompt: usize, max_new: usize, max: usize) -> Result<(), EngineError> {
    if prompt == 0 {
        return Err(EngineError::Invalid("the prompt is empty".into()));
    }
    if prompt + max_new > max {
        return Err(EngineError::ContextOverflow {
            prompt,
            max_new,
            max,
        });
    }
    Ok(())
}
