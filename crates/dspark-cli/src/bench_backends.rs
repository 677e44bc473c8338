//! `dspark bench-backends`: the same model decoded greedily on candle-CPU and on MLX-CPU
//! (both f32, baseline mode), side by side: prefill and decode tok/s and whether the tokens
//! agree. Informational; MLX needs a build with `--features mlx` (on Linux through
//! `scripts/with-mlx`). [`side_by_side`] is callable from `dspark bench`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use dspark_engine::backend::Backend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::launch::{LaunchBackend, OnBackend};
use dspark_engine::load::load_model;
use dspark_engine::sampling::SamplingParams;
use serde_json::json;

use crate::model_arg::resolve_model;

#[derive(Args, Debug)]
pub struct BenchBackendsArgs {
    /// Model directory, .gguf file, or `demo`.
    #[arg(long, default_value = "demo")]
    pub model: String,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// JSON results file (optional).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

const PROMPTS: [&str; 3] = [
    "Explain how rainbows form, in a few sentences.",
    "Write a short poem about the sea.",
    "List three uses of a paperclip.",
];

/// One backend's totals over the prompts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendRun {
    pub backend: String,
    pub device: String,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    #[serde(skip)]
    pub tokens: Vec<Vec<u32>>,
}

pub fn run(a: BenchBackendsArgs) -> Result<()> {
    let path = resolve_model(&a.model)?;
    let runs = side_by_side(&path, &PROMPTS, a.max_tokens)?;
    println!(
        "{:<8} {:<6} {:>10} {:>14} {:>14}",
        "backend", "device", "new tok", "prefill tok/s", "decode tok/s"
    );
    for r in &runs {
        println!(
            "{:<8} {:<6} {:>10} {:>14.1} {:>14.1}",
            r.backend, r.device, r.new_tokens, r.prefill_tok_s, r.decode_tok_s
        );
    }
    let same = runs.windows(2).all(|w| w[0].tokens == w[1].tokens);
    if runs.len() > 1 {
        println!("greedy tokens identical across backends: {same}");
    } else {
        println!("(MLX not built in: rebuild with --features mlx for the side-by-side)");
    }
    if let Some(out) = &a.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).ok();
        }
        let doc = json!({ "model": a.model, "max_tokens": a.max_tokens, "runs": runs, "same_tokens": same });
        std::fs::write(out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// Greedy baseline decode of every prompt on candle-CPU, then MLX-CPU when built in.
pub fn side_by_side(model: &Path, prompts: &[&str], max_tokens: usize) -> Result<Vec<BackendRun>> {
    #[derive(Clone)]
    struct Measure<'a>(&'a Path, &'a [&'a str], usize);
    impl OnBackend for Measure<'_> {
        type Out = Result<BackendRun>;
        fn run<B: LaunchBackend>(self, b: B) -> Result<BackendRun> {
            measure(b, self.0, self.1, self.2)
        }
    }
    dspark_engine::launch::each_cpu_backend(Measure(model, prompts, max_tokens))
        .into_iter()
        .collect()
}

fn measure<B: Backend>(
    b: B,
    model: &Path,
    prompts: &[&str],
    max_tokens: usize,
) -> Result<BackendRun> {
    let lm = load_model(&b, model, None)
        .with_context(|| format!("loading {} on {}", model.display(), b.name()))?;
    let params = GenParams {
        max_new_tokens: max_tokens,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let mut run = BackendRun {
        backend: b.name().into(),
        device: b.device_label(),
        prompt_tokens: 0,
        new_tokens: 0,
        prefill_tok_s: 0.0,
        decode_tok_s: 0.0,
        tokens: vec![],
    };
    let (mut prefill_secs, mut decode_secs, mut decoded) = (0.0, 0.0, 0usize);
    // one untimed warm-up (allocations, thread pools, lazy kernels)
    let warm = lm.tokenizer.encode("Hello", false)?;
    baseline::generate(
        &lm.model,
        &mut lm.model.new_cache(),
        &warm,
        &GenParams {
            max_new_tokens: 4,
            ..params.clone()
        },
        &mut Vec::new(),
    )?;
    for p in prompts {
        let text = match lm.tokenizer.chat_template() {
            Some(t) => {
                let opts = ChatOptions {
                    add_generation_prompt: true,
                    ..Default::default()
                };
                t.render(&json!([{"role": "user", "content": p}]), &opts)?
            }
            None => p.to_string(),
        };
        let ids = lm.tokenizer.encode(&text, false)?;
        let r = baseline::generate(
            &lm.model,
            &mut lm.model.new_cache(),
            &ids,
            &params,
            &mut Vec::new(),
        )?;
        run.prompt_tokens += r.stats.prompt_tokens;
        run.new_tokens += r.tokens.len();
        prefill_secs += r.stats.prefill_secs;
        decode_secs += r.stats.decode_secs;
        // the first new token comes from the prefill
        decoded += r.tokens.len().saturating_sub(1);
        run.tokens.push(r.tokens);
    }
    run.prefill_tok_s = run.prompt_tokens as f64 / prefill_secs.max(1e-9);
    run.decode_tok_s = decoded as f64 / decode_secs.max(1e-9);
    Ok(run)
}
