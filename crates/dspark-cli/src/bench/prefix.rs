//! `dspark bench --prefix-cache`: time to first token of a follow-up turn with the prefix
//! cache against without it, side by side, at several shared-history lengths.

use std::time::Instant;

use anyhow::Result;
use dspark_engine::backend::Backend;
use dspark_engine::generate::GenParams;
use dspark_engine::pipeline::Pipeline;
use dspark_engine::prefix_cache::PrefixCacheConfig;
use dspark_engine::sampling::SamplingParams;
use serde_json::json;

/// Runs turn 1 (history of `len` tokens + 16 generated), then turn 2 (history + answer + a
/// new question) with and without the cache; returns JSON rows.
pub fn run<B: Backend>(
    pipe: &mut Pipeline<B>,
    lens: &[usize],
    label: &str,
) -> Result<serde_json::Value> {
    let tok = pipe.target.tokenizer.clone();
    let filler = "The quick brown fox jumps over the lazy dog while the band plays a slow waltz. ";
    let base_ids = tok.encode(&filler.repeat(400), false)?;
    let question = tok.encode(" Now summarise everything above in one sentence.", false)?;
    let vocab = pipe.target.model.cfg.vocab_size as u32;
    let params = GenParams {
        max_new_tokens: 16,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let first = GenParams {
        max_new_tokens: 1,
        ..params.clone()
    };
    let mut rows = vec![];
    println!("prefix cache ({label}): turn-2 time to first token");
    println!(
        "{:>8} {:>14} {:>14} {:>8}",
        "shared", "no cache ms", "cache ms", "speedup"
    );
    for &len in lens {
        let history: Vec<u32> = base_ids
            .iter()
            .cycle()
            .take(len)
            .map(|&t| t % vocab)
            .collect();
        pipe.enable_prefix_cache(
            PrefixCacheConfig {
                max_slots: 4,
                max_ram_bytes: 0,
                dir: None,
                min_reuse: 16,
            },
            label,
        );
        let t1 = pipe.generate(&history, &params, &mut Vec::new())?;
        let turn2: Vec<u32> = [
            history.clone(),
            t1.tokens.clone(),
            question.iter().map(|&t| t % vocab).collect(),
        ]
        .concat();
        // with the cache: the first token of turn 2
        let t = Instant::now();
        let hit = pipe.generate(&turn2, &first, &mut Vec::new())?;
        let cached = t.elapsed().as_secs_f64();
        // without: a fresh pipeline state (cache cleared)
        pipe.clear_prefix_cache();
        let t = Instant::now();
        let cold = pipe.generate(&turn2, &first, &mut Vec::new())?;
        let uncached = t.elapsed().as_secs_f64();
        assert_eq!(hit.tokens, cold.tokens, "cache changed the output");
        println!(
            "{:>8} {:>14.1} {:>14.1} {:>7.1}x",
            len,
            uncached * 1e3,
            cached * 1e3,
            uncached / cached
        );
        rows.push(json!({"shared_tokens": len, "turn2_prompt_tokens": turn2.len(), "reused_tokens": hit.stats.cached_tokens,
            "ttft_no_cache_ms": uncached * 1e3, "ttft_cache_ms": cached * 1e3, "speedup": uncached / cached}));
    }
    Ok(json!(rows))
}
