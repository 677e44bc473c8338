//! `dspark bench`: speculative decoding against the baseline, side by side in one process on
//! the same prompts: tok/s ratio, mean accepted tokens per round (tau), draft/verify split,
//! achieved vs ideal speedup, and decode bandwidth as a share of the measured memory
//! bandwidth. Optionally runs HF transformers on the same prompt ids for a reference tok/s.
//! Prints a table and writes JSON.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_engine::backend::profile;
use dspark_engine::drafters::draft_vocab::prompt_ids_join;
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::pipeline::Pipeline;
use dspark_engine::sampling::SamplingParams;
use serde_json::json;

mod forced;
mod memory;
mod oracle;
mod prefix;
mod prompts;
mod tau;

use dspark_engine::launch::{self, LaunchBackend, LaunchSpec, OnBackend};

use crate::args::{flag_layer, ModelArgs, SpecArgs};
use crate::model_arg::{launch, layers};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Number of prompts (of --prompt-set).
    #[arg(long, default_value_t = 5)]
    pub prompts: usize,
    /// Held-out prompt set: mtbench (first turns when fetched, else built-in prompts) or
    /// humaneval (each task's prompt as the user turn); or a file's path (a prompt per line,
    /// or JSON lines with a "prompt" field).
    #[arg(long, default_value = "mtbench")]
    pub prompt_set: String,
    /// Sample at this temperature instead of greedy decoding (0 = greedy). Prompt i uses seed
    /// --seed + i in both the baseline and the speculative run; sampled runs are exact samples
    /// of the same distribution, not the same tokens, so "greedy_identical" is left out.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus cut when sampling.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// First prompt's seed when sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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
    /// Prompts as token ids instead of text: a JSON file holding a list of id lists, or what
    /// --emit-prompt-ids wrote (so that another engine, or another machine without the prompt
    /// sets, runs exactly the same ids; see scripts/bench/vs_llama_cpp.py).
    #[arg(long)]
    pub prompt_ids: Option<PathBuf>,
    /// Start every prompt's runs (baseline and speculative) from new, empty KV caches, as a
    /// request that misses the prefix cache does in `dspark serve`; without it the runs reuse
    /// one cache, as a long session does (on a GPU, steps captured over it replay).
    #[arg(long)]
    pub fresh_cache: bool,
    /// Time the baseline only, even with a drafter configured.
    #[arg(long)]
    pub baseline_only: bool,
    /// Write the chat-templated prompt ids (`{"prompt_ids": [[...]]}`) to --out and stop.
    #[arg(long)]
    pub emit_prompt_ids: bool,
    /// Memory bandwidth (GB/s) for the decode ceiling instead of measuring the host's: give the
    /// GPU's on a GPU (the H200's measured copy bandwidth is 4130), since the host's says nothing
    /// there.
    #[arg(long)]
    pub mem_bandwidth_gbs: Option<f64>,
    /// Benchmarks only: also time one target forward over each of these token counts (e.g.
    /// 4,8,16) at the first prompt's context length, against a one-token decode step.
    #[arg(long, value_delimiter = ',')]
    pub verify_cost: Vec<usize>,
    /// Benchmarks only: run the configured drafter's forward every round but propose the
    /// baseline's own greedy continuation with acceptance forced to each of these mean tau
    /// (e.g. 2,4,6.5), measuring spec speed without a trained drafter (an "oracle" drafter).
    #[arg(long, value_delimiter = ',')]
    pub oracle_tau: Vec<f64>,
    /// Acceptance only: run the speculative mode on every prompt, stopping at the model's
    /// end-of-turn tokens, with no baseline pass and no speed figures (tau over many prompts,
    /// greedy or sampled).
    #[arg(long)]
    pub tau_only: bool,
}

/// Prompt `i`'s sampling: greedy, or --temperature / --top-p with seed --seed + i.
fn bench_sampling(a: &BenchArgs, i: usize) -> SamplingParams {
    if a.temperature <= 0.0 {
        return SamplingParams::greedy();
    }
    SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        seed: Some(a.seed.wrapping_add(i as u64)),
        ..SamplingParams::default()
    }
}

struct Run {
    prompt_tokens: usize,
    prefill: f64,
    tokens: usize,
    secs: f64,
    decode_secs: f64,
    rounds: usize,
    lookup_rounds: usize,
    lookup_accepted: usize,
    draft: f64,
    verify: f64,
}

fn record(prompt: &[u32], r: &GenResult) -> Run {
    Run {
        prompt_tokens: prompt.len(),
        prefill: r.stats.prefill_secs,
        tokens: r.tokens.len(),
        secs: r.stats.prefill_secs + r.stats.decode_secs,
        decode_secs: r.stats.decode_secs,
        rounds: r.stats.accept_lengths.len(),
        lookup_rounds: r.stats.lookup_rounds,
        lookup_accepted: r.stats.lookup_accepted,
        draft: r.stats.draft_secs,
        verify: r.stats.verify_secs,
    }
}

fn sum(v: &[Run]) -> Run {
    Run {
        prompt_tokens: v.iter().map(|r| r.prompt_tokens).sum(),
        prefill: v.iter().map(|r| r.prefill).sum(),
        tokens: v.iter().map(|r| r.tokens).sum(),
        secs: v.iter().map(|r| r.secs).sum(),
        decode_secs: v.iter().map(|r| r.decode_secs).sum(),
        rounds: v.iter().map(|r| r.rounds).sum(),
        lookup_rounds: v.iter().map(|r| r.lookup_rounds).sum(),
        lookup_accepted: v.iter().map(|r| r.lookup_accepted).sum(),
        draft: v.iter().map(|r| r.draft).sum(),
        verify: v.iter().map(|r| r.verify).sum(),
    }
}

/// Flags over the environment (never the settings file, so runs are reproducible); the
/// prefix cache stays off (`--prefix-cache` turns it on for its own measurement).
pub fn run(a: BenchArgs) -> Result<()> {
    let mut flags = flag_layer(&a.model, &a.spec);
    flags.prefix_cache = Some(false);
    let l = launch(&layers(flags, None)?.merged())?;
    struct Bench(BenchArgs, LaunchSpec);
    impl OnBackend for Bench {
        type Out = Result<()>;
        fn run<B: LaunchBackend>(self, b: B) -> Result<()> {
            run_on(self.0, &self.1, b)
        }
    }
    launch::with_backend(&l.spec.clone(), Bench(a, l.spec))?
}

fn run_on<B: LaunchBackend>(a: BenchArgs, ls: &LaunchSpec, b: B) -> Result<()> {
    let path = ls.model.clone();
    let model_label = a.model.model.clone().unwrap_or_else(|| "demo".into());
    let lm = launch::load_target(ls, &b)?;
    let rss_model = rss_mb();
    let weights_held_mb = lm.load_report.as_ref().map(|r| r.held_bytes() as f64 / 1e6);
    if let Some(r) = &lm.load_report {
        println!("{}", r.summary());
    }
    let mut pipe: Pipeline<_> = launch::finish_pipeline(ls, &b, lm)?;
    if !a.prefix_cache.is_empty() {
        let rows = prefix::run(&mut pipe, &a.prefix_cache, &model_label)?;
        let out = json!({"model": path.display().to_string(), "mode": pipe.mode.as_str(),
            "keep_quantized": ls.keep_quantized, "matmul": ls.matmul.as_str(),
            "prefix_cache_ttft": rows});
        write_json(&a.out, &out)?;
        println!("wrote {}", a.out.display());
        return Ok(());
    }
    let params = GenParams {
        max_new_tokens: a.max_tokens,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let texts = prompts::load(&a.prompt_set, a.prompts)?;
    let tok = pipe.target.tokenizer.clone();
    let ids: Vec<Vec<u32>> = if let Some(f) = &a.prompt_ids {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        // a list of id lists, or what --emit-prompt-ids writes ({"prompt_ids": [...]})
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum PromptIds {
            Lists(Vec<Vec<u32>>),
            Emitted { prompt_ids: Vec<Vec<u32>> },
        }
        let ids = match serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: expected a JSON list of token-id lists (or --emit-prompt-ids' output)",
                f.display()
            )
        })? {
            PromptIds::Lists(ids) | PromptIds::Emitted { prompt_ids: ids } => ids,
        };
        anyhow::ensure!(
            !ids.is_empty() && ids.iter().all(|p| !p.is_empty()),
            "{}: no prompts, or an empty prompt",
            f.display()
        );
        ids
    } else {
        texts
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
            .collect::<Result<_>>()?
    };

    if a.emit_prompt_ids {
        write_json(&a.out, &json!({ "prompt_ids": ids }))?;
        return Ok(());
    }
    eprintln!("bench: warm-up");
    pipe.generate_baseline(
        &ids[0],
        &GenParams {
            max_new_tokens: 8,
            ..params.clone()
        },
        &mut Vec::new(),
    )?;
    if a.tau_only {
        let out = tau::run(&mut pipe, &ids, &a)?;
        let out = json!({"model": path.display().to_string(), "device": b.device_label(), "tau_only": out});
        write_json(&a.out, &out)?;
        println!("wrote {}", a.out.display());
        return Ok(());
    }
    let spec_on = pipe.mode != dspark_engine::spec::Mode::Baseline && !a.baseline_only;
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
    // per-op wall time (DSPARK_PROFILE=1), baseline and speculative runs apart
    let _ = profile::take();
    let (mut prof_base, mut prof_spec) = (OpTimes::new(), OpTimes::new());
    let mut base_ids: Vec<Vec<u32>> = vec![];
    // on-CPU seconds of the whole process per phase: with one thread (RAYON_NUM_THREADS=1
    // DSPARK_FAN_OUT=never) this is the work itself, whatever else loads the machine
    let (mut cpu_base, mut cpu_spec) = (0.0, 0.0);
    // steps captured as device graphs during each phase (CUDA graphs; 0 elsewhere)
    let (mut captures_base, mut captures_spec) = (0u64, 0u64);
    for (i, p) in ids.iter().enumerate() {
        if a.fresh_cache {
            pipe.fresh_caches();
        }
        let c0 = process_cpu_secs();
        let g0 = b.step_captures();
        let run_params = GenParams {
            sampling: bench_sampling(&a, i),
            ..params.clone()
        };
        let rb = pipe.generate_baseline(p, &run_params, &mut Vec::new())?;
        cpu_base += process_cpu_secs() - c0;
        captures_base += b.step_captures() - g0;
        add_ops(&mut prof_base, profile::take());
        eprintln!("  prompt {i}: baseline {:.1} tok/s", rb.tokens_per_sec());
        base_ids.push(rb.tokens.clone());
        if spec_on {
            if a.fresh_cache {
                pipe.fresh_caches();
            }
            let (c0, g0) = (process_cpu_secs(), b.step_captures());
            let rs = pipe.generate(p, &run_params, &mut Vec::new())?;
            cpu_spec += process_cpu_secs() - c0;
            captures_spec += b.step_captures() - g0;
            add_ops(&mut prof_spec, profile::take());
            identical += usize::from(rs.tokens == rb.tokens);
            eprintln!(
                "  prompt {i}: {} {:.1} tok/s, tau {:.2}",
                pipe.mode.as_str(),
                rs.tokens_per_sec(),
                rs.mean_accept_len()
            );
            spec.push(record(p, &rs));
        }
        base.push(record(p, &rb));
    }
    let (bs, ss) = (sum(&base), sum(&spec));
    let base_tps = bs.tokens as f64 / bs.secs;
    let base_decode_tps = bs.tokens.saturating_sub(base.len()) as f64 / bs.decode_secs.max(1e-9);
    let prefill_tps = bs.prompt_tokens as f64 / bs.prefill.max(1e-9);
    let cfg = &pipe.target.model.cfg;
    let dsize = b.compute_dtype().size_in_bytes();
    let tied_head = if cfg.tie_word_embeddings {
        cfg.vocab_size * cfg.hidden_size
    } else {
        0
    };
    // what a decode step streams: every parameter but the embedding table (one row is read),
    // the table again when it is the tied head; at the bytes the loaded weights really hold
    // (quantized weights kept packed hold far fewer than the compute dtype's)
    let streamed = cfg.num_params() - cfg.vocab_size * cfg.hidden_size + tied_head;
    let weight_bytes = match weights_held_mb {
        Some(mb) if mb > 0.0 => (mb * 1e6 * streamed as f64 / cfg.num_params() as f64) as usize,
        _ => streamed * dsize,
    };
    let bw = a.mem_bandwidth_gbs.unwrap_or_else(memory::memory_bandwidth);
    let ceiling = bw * 1e9 / weight_bytes as f64;
    let mut out = json!({
        "model": path.display().to_string(),
        "device": b.device_label(),
        "dtype": format!("{:?}", b.compute_dtype()),
        "prompts": ids.len(),
        "prompt_set": if a.prompt_ids.is_some() { "--prompt-ids" } else { a.prompt_set.as_str() },
        "max_tokens": a.max_tokens,
        "keep_quantized": ls.keep_quantized,
        "matmul": ls.matmul.as_str(),
        "fresh_cache": a.fresh_cache,
        "baseline": {"tok_s": base_tps, "decode_tok_s": base_decode_tps, "prefill_tok_s": prefill_tps,
                     "prompt_tokens": bs.prompt_tokens, "tokens": bs.tokens, "secs": bs.secs,
                     "ids": base_ids},
        "resident": {"rss_mb_after_target_load": rss_model.0, "peak_rss_mb_after_target_load": rss_model.1,
                     "target_weights_held_mb": weights_held_mb, "rss_mb_at_end": rss_mb().0, "peak_rss_mb": rss_mb().1},
        "memory": {"measured_read_gb_s": bw, "bandwidth_source": if a.mem_bandwidth_gbs.is_some() { "--mem-bandwidth-gbs" } else { "host read, measured" }, "weight_bytes_per_token": weight_bytes,
                   "decode_ceiling_tok_s": ceiling, "baseline_pct_of_ceiling": 100.0 * base_decode_tps / ceiling},
    });
    println!(
        "model {}  ({} on {}, {} prompts x {} tokens)",
        path.display(),
        out["dtype"],
        out["device"],
        ids.len(),
        a.max_tokens
    );
    println!(
        "resident set: {:.0} MB after loading the target (weights held {:.0} MB), {:.0} MB at the end, peak {:.0} MB",
        rss_model.0,
        weights_held_mb.unwrap_or(f64::NAN),
        rss_mb().0,
        rss_mb().1
    );
    println!("memory read bandwidth {bw:.1} GB/s; weights {:.1} MB/token -> decode ceiling {ceiling:.1} tok/s", weight_bytes as f64 / 1e6);
    println!("baseline        {base_tps:7.1} tok/s  (decode {base_decode_tps:.1} tok/s = {:.0}% of ceiling; prefill {prefill_tps:.0} tok/s; {:.2} cpu-ms/token)", 100.0 * base_decode_tps / ceiling, 1e3 * cpu_base / bs.tokens as f64);
    out["baseline"]["cpu_ms_per_token"] = json!(1e3 * cpu_base / bs.tokens as f64);
    out["baseline"]["step_captures"] = json!(captures_base);
    if spec_on {
        let tps = ss.tokens as f64 / ss.secs;
        let tau = (ss.tokens - spec.len()) as f64 / ss.rounds.max(1) as f64;
        let ratio = tps / base_tps;
        let cpu_ratio = (cpu_base / bs.tokens as f64) / (cpu_spec / ss.tokens.max(1) as f64);
        let sampled = a.temperature > 0.0;
        let same = if sampled {
            format!("sampled at T = {}", a.temperature)
        } else {
            format!("greedy identical {identical}/{}", spec.len())
        };
        println!(
            "{:<15} {tps:7.1} tok/s  x{ratio:.2} vs baseline (cpu time x{cpu_ratio:.2}); tau {tau:.2}; achieved/ideal {:.0}%; draft {:.0}% / verify {:.0}% of decode; {same}",
            pipe.mode.as_str(),
            100.0 * ratio / tau,
            100.0 * ss.draft / ss.decode_secs,
            100.0 * ss.verify / ss.decode_secs,
        );
        if captures_base + captures_spec > 0 {
            println!("steps captured as device graphs: {captures_base} in the baseline runs, {captures_spec} in the {} runs", pipe.mode.as_str());
        }
        let decode_tps = ss.tokens.saturating_sub(spec.len()) as f64 / ss.decode_secs.max(1e-9);
        out["spec"] = json!({"mode": pipe.mode.as_str(), "drafter": pipe.drafter_name(), "tok_s": tps, "ratio_vs_baseline": ratio,
            "decode_tok_s": decode_tps, "decode_ratio_vs_baseline": decode_tps / base_decode_tps,
            "prefill_tok_s": ss.prompt_tokens as f64 / ss.prefill.max(1e-9),
            "mean_tau": tau, "achieved_over_ideal": ratio / tau, "draft_share": ss.draft / ss.decode_secs,
            "verify_share": ss.verify / ss.decode_secs, "max_draft": max_draft_label(&pipe, &a),
            "draft_vocab": pipe.draft_vocab_len(),
            "draft_vocab_prompt_ids": pipe.draft_vocab_len().map(|_| prompt_ids_join()),
            "lookup": pipe.spec.lookup, "rounds": ss.rounds, "lookup_rounds": ss.lookup_rounds, "lookup_accepted": ss.lookup_accepted,
            "rounds_by_draft_count": pipe.draft_budget().map(|b| b.rounds_by_count().to_vec()),
            "round_ms_by_draft_count": pipe.draft_budget().map(|b| (0..=b.block()).map(|k| b.round_cost(k).map(|c| 1e3 * c)).collect::<Vec<_>>()),
            "accept_rate_by_draft_position": pipe.draft_budget().map(|b| (0..b.block()).map(|i| b.accept_rate(i)).collect::<Vec<_>>()),
            "pct_of_baseline_ceiling": 100.0 * tps / ceiling, "cpu_ms_per_token": 1e3 * cpu_spec / ss.tokens.max(1) as f64,
            "cpu_time_ratio_vs_baseline": cpu_ratio, "step_captures": captures_spec});
        if sampled {
            out["spec"]["temperature"] = json!(a.temperature);
            out["spec"]["top_p"] = json!(a.top_p);
            out["spec"]["first_seed"] = json!(a.seed);
        } else {
            out["spec"]["greedy_identical"] = json!(identical);
        }
    }
    if !a.verify_cost.is_empty() {
        out["verify_cost"] = forced::verify_cost(&pipe, &ids[0], &a.verify_cost, 10)?;
    }
    if !a.oracle_tau.is_empty() {
        out["oracle"] = forced::oracle_runs(
            &mut pipe,
            &a.oracle_tau,
            &ids,
            &base_ids,
            &params,
            base_decode_tps,
        )?;
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
    if profile::enabled() {
        out["profile_per_decode_token_ms"] = json!({
            "baseline": print_ops("baseline", &prof_base, bs.tokens - base.len()),
            "spec": print_ops(pipe.mode.as_str(), &prof_spec, ss.tokens.saturating_sub(spec.len())),
        });
    }
    write_json(&a.out, &out)?;
    println!("wrote {}", a.out.display());
    Ok(())
}

/// What bounded the drafts per round: a configured count, the drafter's full block, the
/// measured cost-aware choice (`"auto"`, the default where the count may follow the clock), or
/// the per-request choice on prior costs (`"prior"`, DFlash/DSpark's default elsewhere, e.g.
/// seeded sampling).
fn max_draft_label<B: LaunchBackend>(pipe: &Pipeline<B>, a: &BenchArgs) -> serde_json::Value {
    use dspark_engine::spec::policy::{count_rule, CountRule};
    let rows_invariant = pipe.target.model.backend().rows_batch_invariant();
    let sampling = bench_sampling(a, 0);
    match count_rule(pipe.mode, pipe.spec.max_draft, &sampling, rows_invariant) {
        CountRule::Measured => return json!("auto"),
        CountRule::Prior => return json!("prior"),
        CountRule::Fixed => {}
    }
    if pipe.spec.max_draft == usize::MAX {
        json!("block")
    } else {
        json!(pipe.spec.max_draft)
    }
}

type OpTimes = std::collections::BTreeMap<&'static str, (f64, u64)>;

fn add_ops(acc: &mut OpTimes, ops: Vec<(&'static str, f64, u64)>) {
    for (name, secs, calls) in ops {
        let e = acc.entry(name).or_insert((0.0, 0));
        e.0 += secs;
        e.1 += calls;
    }
}

/// Prints the per-op table (ms per generated token, prefill included) and returns it as JSON.
fn print_ops(label: &str, ops: &OpTimes, tokens: usize) -> serde_json::Value {
    if ops.is_empty() || tokens == 0 {
        return json!(null);
    }
    let mut v: Vec<_> = ops.iter().collect();
    v.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    let total: f64 = v.iter().map(|(_, (s, _))| s).sum();
    println!(
        "per-op time, {label} ({tokens} tokens): {:.2} ms/token in backend ops",
        1e3 * total / tokens as f64
    );
    let mut j = serde_json::Map::new();
    for (name, (secs, calls)) in v {
        let ms = 1e3 * secs / tokens as f64;
        println!(
            "  {name:<22} {ms:8.3} ms/token  {:5.1}%  {:8.1} calls/token",
            100.0 * secs / total,
            *calls as f64 / tokens as f64
        );
        j.insert(
            name.to_string(),
            json!({"ms_per_token": ms, "calls_per_token": *calls as f64 / tokens as f64}),
        );
    }
    serde_json::Value::Object(j)
}

fn write_json(path: &std::path::Path, v: &serde_json::Value) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(v)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// User + system CPU seconds of this process so far (0 where /proc cannot be read).
fn process_cpu_secs() -> f64 {
    // clock ticks are 100 per second on Linux's every mainstream configuration
    dspark_engine::backend::cpu::contention::process_cpu_ticks().map_or(0.0, |t| t as f64 / 100.0)
}

/// (VmRSS, VmHWM) of this process in MB (Linux `/proc/self/status`; NaN elsewhere).
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1e3)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
