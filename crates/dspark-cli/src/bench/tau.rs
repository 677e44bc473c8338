//! `dspark bench --tau-only`: acceptance alone, over many held-out prompts. The speculative mode
//! runs with the model's own end-of-turn tokens (generation stops there, as a user's request
//! does) and no baseline pass, so it measures mean tokens per round (tau), greedy or sampled,
//! at a fraction of the time a side-by-side run takes. No speed is claimed from it.

use anyhow::Result;
use dspark_engine::drafters::draft_vocab::prompt_ids_join;
use dspark_engine::generate::GenParams;
use dspark_engine::launch::LaunchBackend;
use dspark_engine::pipeline::Pipeline;
use serde_json::{json, Value};

use super::{bench_sampling, BenchArgs};

/// How a draft vocabulary's size reads in the summary line: plus each prompt's ids, or not.
fn prompt_ids_note() -> &'static str {
    if prompt_ids_join() {
        " + each prompt's ids"
    } else {
        " (prompt ids left out)"
    }
}

/// Runs the configured speculative mode on every prompt of `ids` and returns the JSON record:
/// tau over all rounds, per-prompt rounds and tokens, and how often each accept length came.
pub fn run<B: LaunchBackend>(
    pipe: &mut Pipeline<B>,
    ids: &[Vec<u32>],
    a: &BenchArgs,
) -> Result<Value> {
    anyhow::ensure!(
        pipe.mode != dspark_engine::spec::Mode::Baseline,
        "--tau-only needs a speculative --mode (dflash, dspark or draft)"
    );
    let eos = pipe.target.eos_ids();
    let (mut tokens, mut rounds, mut hist) = (0usize, 0usize, Vec::<usize>::new());
    let (mut lookup_rounds, mut lookup_accepted) = (0usize, 0usize);
    let mut per_prompt = Vec::with_capacity(ids.len());
    for (i, p) in ids.iter().enumerate() {
        let params = GenParams {
            max_new_tokens: a.max_tokens,
            sampling: bench_sampling(a, i),
            eos: eos.clone(),
        };
        let r = pipe.generate(p, &params, &mut Vec::new())?;
        let lens = &r.stats.accept_lengths;
        for &l in lens {
            if hist.len() <= l {
                hist.resize(l + 1, 0);
            }
            hist[l] += 1;
        }
        let committed: usize = lens.iter().sum();
        tokens += committed;
        rounds += lens.len();
        lookup_rounds += r.stats.lookup_rounds;
        lookup_accepted += r.stats.lookup_accepted;
        eprintln!(
            "  prompt {i}: {} tokens, {} rounds, tau {:.2} (running tau {:.3})",
            r.tokens.len(),
            lens.len(),
            r.mean_accept_len(),
            tokens as f64 / rounds.max(1) as f64
        );
        per_prompt.push(json!({"tokens": r.tokens.len(), "rounds": lens.len(), "committed_in_rounds": committed}));
    }
    let tau = tokens as f64 / rounds.max(1) as f64;
    println!(
        "{} ({}{}{}), {} prompts of {} x up to {} tokens, {}: tau {tau:.3} over {rounds} rounds",
        pipe.mode.as_str(),
        pipe.drafter_name().unwrap_or("no drafter"),
        pipe.draft_vocab_len().map_or(String::new(), |k| format!(
            ", draft vocabulary {k}{}",
            prompt_ids_note()
        )),
        if pipe.spec.lookup {
            format!(", lookup after the first draft in {lookup_rounds} rounds, {lookup_accepted} of its drafts accepted")
        } else {
            String::new()
        },
        ids.len(),
        a.prompt_set,
        a.max_tokens,
        if a.temperature > 0.0 {
            format!("T = {} (seeds {}..)", a.temperature, a.seed)
        } else {
            "greedy".to_string()
        },
    );
    Ok(json!({
        "mode": pipe.mode.as_str(),
        "drafter": pipe.drafter_name(),
        "max_draft": super::max_draft_label(pipe, a),
        "draft_vocab": pipe.draft_vocab_len(),
        "draft_vocab_prompt_ids": pipe.draft_vocab_len().map(|_| prompt_ids_join()),
        "lookup": pipe.spec.lookup,
        "lookup_rounds": lookup_rounds,
        "lookup_accepted": lookup_accepted,
        "rounds_by_draft_count": pipe.draft_budget().map(|b| b.rounds_by_count().to_vec()),
        "prompt_set": a.prompt_set,
        "prompts": ids.len(),
        "max_tokens": a.max_tokens,
        "stops_at_eos": true,
        "temperature": (a.temperature as f64 * 1e4).round() / 1e4,
        "top_p": (a.top_p as f64 * 1e4).round() / 1e4,
        "first_seed": a.seed,
        "mean_tau": tau,
        "rounds": rounds,
        "tokens_in_rounds": tokens,
        "accept_length_counts": hist,
        "per_prompt": per_prompt,
    }))
}
