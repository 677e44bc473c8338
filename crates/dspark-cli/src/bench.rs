//! `dspark bench`: speculative decoding against the baseline, side by side in one process on
//! the same prompts: tok/s ratio, mean accepted tokens per round (tau), draft/verify split,
//! achieved vs ideal speedup, and decode bandwidth as a share of the measured memory
//! bandwidth. Optionally runs HF transformers on the same prompt ids for a reference tok/s.
//! Prints a table and writes JSON.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use dspark_engine::backend::Backend;
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::pipeline::Pipeline;
use dspark_engine::sampling::SamplingParams;
use serde_json::json;

mod prefix;

use crate::args::{ModelArgs, SpecArgs};
use crate::model_arg::{backend, build_pipeline, resolve_model};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Number of prompts (MT-Bench first turns when fetched, else built-in prompts).
    #[arg(long, default_value_t = 5)]
    pub prompts: usize,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// JSON results file.
    #[arg(long, default_value = "bench-results/bench.json")]
    pub out: PathBuf,
    /// Python with torch + transformers: also time HF transformers (GGUF models) on the same ids.
    #[arg(long)]
    pub hf_python: Option<PathBuf>,
    /// Instead: time-to-first-token of a follow-up turn with and without the prefix cache at
    /// these shared-history lengths (e.g. 250,750,2000).
    #[arg(long, value_delimiter = ',')]
    pub prefix_cache: Vec<usize>,
}

const BUILTIN: [&str; 6] = [
    "Explain how rainbows form, in a few sentences.",
    "Write a Python function that checks whether a number is prime.",
    "What are the main differences between a list and a tuple in Python?",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "Give me three tips for staying focused while studying.",
    "Describe the water cycle to a ten-year-old.",
];

fn prompts(n: usize) -> Vec<String> {
    let mt = dspark_hub::paths::artefact_dir().join("mtbench/question.jsonl");
    let mut v: Vec<String> = std::fs::read_to_string(mt)
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter_map(|q| q["turns"][0].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if v.is_empty() {
        v = BUILTIN.iter().map(|s| s.to_string()).collect();
    }
    v.truncate(n.max(1));
    v
}

/// Host memory read bandwidth (GB/s): the best of 5 passes reading a 512 MiB buffer with
/// every core (wrapping u64 sums in 4 lanes, so the loop is bound by memory, not arithmetic).
fn memory_bandwidth() -> f64 {
    let n: usize = 64 << 20;
    let buf: Vec<u64> = (0..n as u64).collect();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let total = std::thread::scope(|s| {
            let chunk = n.div_ceil(threads);
            let hs: Vec<_> = buf
                .chunks(chunk)
                .map(|c| {
                    s.spawn(move || {
                        let mut acc = [0u64; 4];
                        for q in c.chunks_exact(4) {
                            for k in 0..4 {
                                acc[k] = acc[k].wrapping_add(q[k]);
                            }
                        }
                        acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.max((n * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

struct Run {
    tokens: usize,
    secs: f64,
    decode_secs: f64,
    rounds: usize,
    draft: f64,
    verify: f64,
}

fn record(r: &GenResult) -> Run {
    Run {
        tokens: r.tokens.len(),
        secs: r.stats.prefill_secs + r.stats.decode_secs,
        decode_secs: r.stats.decode_secs,
        rounds: r.stats.accept_lengths.len(),
        draft: r.stats.draft_secs,
        verify: r.stats.verify_secs,
    }
}

fn sum(v: &[Run]) -> Run {
    Run {
        tokens: v.iter().map(|r| r.tokens).sum(),
        secs: v.iter().map(|r| r.secs).sum(),
        decode_secs: v.iter().map(|r| r.decode_secs).sum(),
        rounds: v.iter().map(|r| r.rounds).sum(),
        draft: v.iter().map(|r| r.draft).sum(),
        verify: v.iter().map(|r| r.verify).sum(),
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    let path = resolve_model(&a.model.model)?;
    let b = backend(
        &a.model.device,
        a.model.dtype.as_deref(),
        a.model.keep_quantized,
    )?;
    let lm = dspark_engine::load::load_model(&b, &path, None)
        .with_context(|| format!("loading {}", path.display()))?;
    let mut pipe: Pipeline<_> = build_pipeline(&a.model, &a.spec, lm, &b)?;
    if !a.prefix_cache.is_empty() {
        let rows = prefix::run(&mut pipe, &a.prefix_cache, &a.model.model)?;
        let out = json!({"model": path.display().to_string(), "mode": pipe.mode.as_str(), "prefix_cache_ttft": rows});
        if let Some(dir) = a.out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&a.out, serde_json::to_string_pretty(&out)?)?;
        println!("wrote {}", a.out.display());
        return Ok(());
    }
    let params = GenParams {
        max_new_tokens: a.max_tokens,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let texts = prompts(a.prompts);
    let tok = pipe.target.tokenizer.clone();
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| {
            let msgs = json!([{"role": "user", "content": t}]);
            let rendered = match tok.chat_template() {
                Some(tm) => {
                    let opts = dspark_engine::chat_template::ChatOptions {
                        add_generation_prompt: true,
                        ..Default::default()
                    };
                    tm.render(&msgs, &opts)?
                }
                None => t.clone(),
            };
            Ok(tok.encode(&rendered, false)?)
        })
        .collect::<Result<_>>()?;

    eprintln!("bench: warm-up");
    pipe.generate_baseline(
        &ids[0],
        &GenParams {
            max_new_tokens: 8,
            ..params.clone()
        },
        &mut Vec::new(),
    )?;
    let spec_on = pipe.mode != dspark_engine::spec::Mode::Baseline;
    if spec_on {
        pipe.generate(
            &ids[0],
            &GenParams {
                max_new_tokens: 8,
                ..params.clone()
            },
            &mut Vec::new(),
        )?;
    }
    let (mut base, mut spec, mut identical) = (vec![], vec![], 0);
    for (i, p) in ids.iter().enumerate() {
        let rb = pipe.generate_baseline(p, &params, &mut Vec::new())?;
        eprintln!("  prompt {i}: baseline {:.1} tok/s", rb.tokens_per_sec());
        if spec_on {
            let rs = pipe.generate(p, &params, &mut Vec::new())?;
            identical += usize::from(rs.tokens == rb.tokens);
            eprintln!(
                "  prompt {i}: {} {:.1} tok/s, tau {:.2}",
                pipe.mode.as_str(),
                rs.tokens_per_sec(),
                rs.mean_accept_len()
            );
            spec.push(record(&rs));
        }
        base.push(record(&rb));
    }
    let (bs, ss) = (sum(&base), sum(&spec));
    let base_tps = bs.tokens as f64 / bs.secs;
    let base_decode_tps = bs.tokens.saturating_sub(base.len()) as f64 / bs.decode_secs.max(1e-9);
    let cfg = &pipe.target.model.cfg;
    let dsize = b.compute_dtype().size_in_bytes();
    let tied_head = if cfg.tie_word_embeddings {
        cfg.vocab_size * cfg.hidden_size
    } else {
        0
    };
    let weight_bytes = (cfg.num_params() - cfg.vocab_size * cfg.hidden_size + tied_head) * dsize;
    let bw = memory_bandwidth();
    let ceiling = bw * 1e9 / weight_bytes as f64;
    let mut out = json!({
        "model": path.display().to_string(),
        "device": b.device_label(),
        "dtype": format!("{:?}", b.compute_dtype()),
        "prompts": texts.len(),
        "max_tokens": a.max_tokens,
        "baseline": {"tok_s": base_tps, "decode_tok_s": base_decode_tps, "tokens": bs.tokens, "secs": bs.secs},
        "memory": {"measured_read_gb_s": bw, "weight_bytes_per_token": weight_bytes,
                   "decode_ceiling_tok_s": ceiling, "baseline_pct_of_ceiling": 100.0 * base_decode_tps / ceiling},
    });
    println!(
        "model {}  ({} on {}, {} prompts x {} tokens)",
        path.display(),
        out["dtype"],
        out["device"],
        texts.len(),
        a.max_tokens
    );
    println!("memory read bandwidth {bw:.1} GB/s; weights {:.1} MB/token -> decode ceiling {ceiling:.1} tok/s", weight_bytes as f64 / 1e6);
    println!("baseline        {base_tps:7.1} tok/s  (decode {base_decode_tps:.1} tok/s = {:.0}% of ceiling)", 100.0 * base_decode_tps / ceiling);
    if spec_on {
        let tps = ss.tokens as f64 / ss.secs;
        let tau = (ss.tokens - spec.len()) as f64 / ss.rounds.max(1) as f64;
        let ratio = tps / base_tps;
        println!(
            "{:<15} {tps:7.1} tok/s  x{ratio:.2} vs baseline; tau {tau:.2}; achieved/ideal {:.0}%; draft {:.0}% / verify {:.0}% of decode; greedy identical {identical}/{}",
            pipe.mode.as_str(),
            100.0 * ratio / tau,
            100.0 * ss.draft / ss.decode_secs,
            100.0 * ss.verify / ss.decode_secs,
            spec.len()
        );
        out["spec"] = json!({"mode": pipe.mode.as_str(), "drafter": pipe.drafter_name(), "tok_s": tps, "ratio_vs_baseline": ratio,
            "mean_tau": tau, "achieved_over_ideal": ratio / tau, "draft_share": ss.draft / ss.decode_secs,
            "verify_share": ss.verify / ss.decode_secs, "max_draft": pipe.spec.max_draft, "greedy_identical": identical,
            "pct_of_baseline_ceiling": 100.0 * tps / ceiling});
    }
    if let Some(py) = &a.hf_python {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench/hf_decode.py");
        let arg = json!({"model": path, "prompts": ids, "max_tokens": a.max_tokens}).to_string();
        let o = std::process::Command::new(py)
            .arg(&script)
            .arg(arg)
            .output()
            .context("running HF transformers")?;
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .with_context(|| format!("HF script output: {}", String::from_utf8_lossy(&o.stderr)))?;
        let hf = v["tok_s"].as_f64().unwrap_or(0.0);
        println!(
            "hf transformers {hf:7.1} tok/s  -> dspark baseline x{:.2}",
            base_tps / hf
        );
        out["hf_transformers"] = json!({"tok_s": hf, "dspark_baseline_ratio": base_tps / hf, "identical_tokens": v["identical"]});
    }
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.out, serde_json::to_string_pretty(&out)?)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
