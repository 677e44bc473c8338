//! `dspark bench --verify-cost` and `--oracle-tau`: the parts of speculative decoding's speed,
//! measured apart on the target being benchmarked.
//! - verify cost: one target forward over k tokens at the prompt's context length (logits of
//!   every row copied to the host, as a verify round does), against k = 1 (a decode step);
//! - forced tau: the configured drafter's forward runs every round (its real cost), while the
//!   proposals come from [`Oracle`] (the baseline's own greedy continuation with a wrong token
//!   where tau says), so the speedup at tau = 2, 4, 6.5 is measured without a trained drafter.
//!   Ideal speedup per run = tau x T_decode / (T_draft + T_verify), from the measured parts.

use std::time::Instant;

use anyhow::{Context, Result};
use dspark_engine::backend::{profile, Backend};
use dspark_engine::generate::GenParams;
use dspark_engine::model::transformer::LogitsWanted;
use dspark_engine::pipeline::Pipeline;
use dspark_engine::spec::{decode, Drafter};
use serde_json::{json, Value};

use super::oracle::{accept_pattern, Oracle};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median wall time of a k-token target forward after `prompt`, for k = 1 and each of `sizes`,
/// with the ratio to k = 1. The logits are read back as greedy verification reads them: the
/// rows' argmax ids where the backend takes it on the device (`Backend::device_argmax`, as the
/// spec loop does for plain greedy requests), else all logits.
pub fn verify_cost<B: Backend>(
    pipe: &Pipeline<B>,
    prompt: &[u32],
    sizes: &[usize],
    reps: usize,
) -> Result<Value> {
    let m = &pipe.target.model;
    let b = m.backend();
    let mut cache = m.new_cache();
    m.forward(prompt, &mut cache, &[], LogitsWanted::Last)?;
    let len = cache.len();
    let mut ks = vec![1];
    ks.extend(sizes.iter().copied().filter(|&k| k > 1));
    let mut rows = serde_json::Map::new();
    let mut one = f64::NAN;
    for &k in &ks {
        let ids: Vec<u32> = prompt.iter().cycle().take(k).copied().collect();
        let mut times = Vec::with_capacity(reps);
        let _ = profile::take();
        for r in 0..reps + 2 {
            let t = Instant::now();
            let out = m.forward(&ids, &mut cache, &[], LogitsWanted::All)?;
            let logits = out.logits.as_ref().context("no logits")?;
            if b.device_argmax() {
                std::hint::black_box(b.to_u32_vec(&b.argmax_last(logits)?)?);
            } else {
                std::hint::black_box(b.to_f32_vec(logits)?);
            }
            if r >= 2 {
                times.push(t.elapsed().as_secs_f64());
            }
            cache.truncate(len);
        }
        let ms = 1e3 * median(&mut times);
        if k == 1 {
            one = ms;
        }
        println!(
            "verify {k:>3} tokens at context {len}: {ms:7.3} ms  (x{:.3} of one decode step)",
            ms / one
        );
        let ops = per_round_ops(&profile::take(), reps + 2);
        rows.insert(
            k.to_string(),
            json!({"ms": ms, "ratio_vs_decode_step": ms / one, "profile_per_forward_ms": ops}),
        );
    }
    let readback = if b.device_argmax() {
        "argmax ids (device argmax, as greedy verification)"
    } else {
        "all logits"
    };
    Ok(json!({"context": len, "reps": reps, "readback": readback, "median_ms": rows}))
}

#[derive(Default)]
struct Sums {
    tokens: usize,
    decode_tokens: usize,
    decode_secs: f64,
    secs: f64,
    draft: f64,
    verify: f64,
    rounds: usize,
    committed: usize,
    identical: usize,
}

/// Runs the pipeline's drafter under the oracle at each tau on every prompt; `conts[i]` is the
/// baseline's greedy output for `ids[i]`, `base_decode_tps` its decode speed.
pub fn oracle_runs<B: Backend>(
    pipe: &mut Pipeline<B>,
    taus: &[f64],
    ids: &[Vec<u32>],
    conts: &[Vec<u32>],
    params: &GenParams,
    base_decode_tps: f64,
) -> Result<Value> {
    let inner = pipe
        .take_drafter()
        .context("--oracle-tau needs a drafter (--mode dflash|dspark --drafter DIR)")?;
    let vocab = pipe.target.model.cfg.vocab_size;
    let mut oracle = Oracle::new(inner, vocab);
    let drafter = oracle.inner_name();
    let model = &pipe.target.model;
    let spec = pipe.spec;
    let mut cache = model.new_cache();
    let t_decode = 1.0 / base_decode_tps;
    let mut rows = Vec::new();
    for (n, &tau) in taus.iter().enumerate() {
        let pattern = accept_pattern(tau, params.max_new_tokens + 1);
        let mut s = Sums::default();
        let mut ops = Vec::new();
        for (i, (p, cont)) in ids.iter().zip(conts).enumerate() {
            if n == 0 && i == 0 {
                // warm-up: the drafter's first forward and the verify shapes
                let warm = GenParams {
                    max_new_tokens: 16,
                    ..params.clone()
                };
                cache.clear();
                oracle.truncate(0);
                oracle.script(p.len(), cont.clone(), pattern.clone());
                decode::generate(
                    model,
                    &mut cache,
                    &mut oracle,
                    p,
                    &warm,
                    &spec,
                    &mut Vec::new(),
                )?;
            }
            cache.clear();
            oracle.truncate(0);
            oracle.script(p.len(), cont.clone(), pattern.clone());
            let _ = profile::take();
            let r = decode::generate(
                model,
                &mut cache,
                &mut oracle,
                p,
                params,
                &spec,
                &mut Vec::new(),
            )?;
            s.tokens += r.tokens.len();
            s.decode_tokens += r.tokens.len().saturating_sub(1);
            s.decode_secs += r.stats.decode_secs;
            s.secs += r.stats.prefill_secs + r.stats.decode_secs;
            s.draft += r.stats.draft_secs;
            s.verify += r.stats.verify_secs;
            s.rounds += r.stats.accept_lengths.len();
            s.committed += r.stats.accept_lengths.iter().sum::<usize>();
            s.identical += usize::from(r.tokens == *cont);
            ops.extend(profile::take());
        }
        let rounds = s.rounds.max(1) as f64;
        let tau_m = s.committed as f64 / rounds;
        let tps = s.decode_tokens as f64 / s.decode_secs.max(1e-9);
        let speedup = tps / base_decode_tps;
        let (td, tv) = (s.draft / rounds, s.verify / rounds);
        let ideal = tau_m * t_decode / (td + tv);
        let other = (s.decode_secs - s.draft - s.verify) / rounds;
        println!(
            "oracle tau {tau:<4} ({drafter}, measured tau {tau_m:.2}): decode {tps:7.1} tok/s  x{speedup:.2} vs baseline; \
             draft {:.3} ms ({:.3} of a decode step), verify {:.3} ms ({:.3}), other {:.3} ms per round; \
             ideal x{ideal:.2}, achieved/ideal {:.3}; greedy identical {}/{}",
            1e3 * td,
            td / t_decode,
            1e3 * tv,
            tv / t_decode,
            1e3 * other,
            speedup / ideal,
            s.identical,
            ids.len()
        );
        let per_round = per_round_ops(&ops, s.rounds.max(1));
        rows.push(json!({
            "profile_ms_per_round": per_round,
            "tau_forced": tau, "tau_measured": tau_m, "drafter": drafter,
            "decode_tok_s": tps, "tok_s_end_to_end": s.tokens as f64 / s.secs,
            "speedup_vs_baseline_decode": speedup, "rounds": s.rounds,
            "draft_ms_per_round": 1e3 * td, "verify_ms_per_round": 1e3 * tv,
            "other_ms_per_round": 1e3 * other, "decode_step_ms": 1e3 * t_decode,
            "draft_over_decode_step": td / t_decode, "verify_over_decode_step": tv / t_decode,
            "ideal_speedup": ideal, "achieved_over_ideal": speedup / ideal,
            "greedy_identical": s.identical, "prompts": ids.len(),
        }));
    }
    Ok(json!({"drafter": drafter, "block_len": oracle.block_len(), "runs": rows}))
}

/// Per-op wall ms per round (prefill included; per forward for the verify cost) from
/// `DSPARK_PROFILE=1` spans, printed largest first; null when profiling is off.
fn per_round_ops(ops: &[(&'static str, f64, u64)], rounds: usize) -> Value {
    if ops.is_empty() {
        return Value::Null;
    }
    let mut acc: std::collections::BTreeMap<&str, (f64, u64)> = Default::default();
    for (name, secs, calls) in ops {
        let e = acc.entry(name).or_default();
        e.0 += secs;
        e.1 += calls;
    }
    let mut v: Vec<_> = acc.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    let mut j = serde_json::Map::new();
    for (name, (secs, calls)) in v {
        let ms = 1e3 * secs / rounds as f64;
        let per = calls as f64 / rounds as f64;
        println!("    {name:<22} {ms:8.3} ms/round  {per:8.1} calls/round");
        j.insert(name.to_string(), json!({"ms": ms, "calls": per}));
    }
    Value::Object(j)
}
