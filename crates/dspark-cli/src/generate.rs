//! `dspark generate`: one prompt, streamed to stdout, then a stats line on stderr.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Args;
use dspark_engine::backend::Backend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::generate::text::TextSink;
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::launch::{self, LaunchBackend, LaunchSpec, OnBackend};
use dspark_engine::load::LoadedModel;
use dspark_engine::sampling::SamplingParams;
use serde_json::json;

use crate::args::{flag_layer, ModelArgs, SamplingArgs, SpecArgs};
use crate::model_arg::{launch, layers};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, default_value = "Explain how rainbows form, in a few sentences.")]
    pub prompt: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Feed the prompt as raw text, without the model's chat template.
    #[arg(long)]
    pub no_chat_template: bool,
    /// A system message (chat template only).
    #[arg(long)]
    pub system: Option<String>,
    /// Disable thinking in templates that support it (enable_thinking=false).
    #[arg(long)]
    pub no_thinking: bool,
    /// Stop strings (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Flags over the environment (not the settings file: one-off runs stay reproducible); no
/// prefix cache for a single generation.
pub fn run(a: GenerateArgs) -> Result<()> {
    let mut flags = flag_layer(&a.model, &a.spec);
    flags.prefix_cache = Some(false);
    let l = launch(&layers(flags, None)?.merged())?;
    struct Gen(GenerateArgs, LaunchSpec);
    impl OnBackend for Gen {
        type Out = Result<()>;
        fn run<B: LaunchBackend>(self, b: B) -> Result<()> {
            run_on(b, self.0, &self.1)
        }
    }
    launch::with_backend(&l.spec.clone(), Gen(a, l.spec))?
}

fn run_on<B: LaunchBackend>(b: B, a: GenerateArgs, spec: &LaunchSpec) -> Result<()> {
    let lm = launch::load_target(spec, &b)?;
    let prompt = encode_prompt(&lm, &a)?;
    let mut pipe = launch::finish_pipeline(spec, &b, lm)?;
    let params = GenParams {
        max_new_tokens: a.sampling.max_tokens,
        sampling: SamplingParams {
            temperature: a.sampling.temperature,
            top_p: a.sampling.top_p,
            top_k: a.sampling.top_k,
            seed: a.sampling.seed,
            ..SamplingParams::default()
        },
        eos: pipe.target.eos_ids(),
    };
    let tokenizer = pipe.target.tokenizer.clone();
    let mut out = std::io::stdout();
    let mut sink = TextSink::new(&tokenizer, a.stop.clone(), |s: &str| {
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    });
    let r = pipe.generate(&prompt, &params, &mut sink)?;
    let (_text, _stopped) = sink.finish();
    println!();
    eprintln!("{}", stats_line(&r, pipe.mode.as_str()));
    Ok(())
}

/// Prompt ids: the chat template rendering (when the model has one), else the raw text with
/// the tokenizer's own special tokens (a GGUF's `add_bos_token`: Gemma needs its `<bos>`).
pub fn encode_prompt<B: Backend>(lm: &LoadedModel<B>, a: &GenerateArgs) -> Result<Vec<u32>> {
    let templated = lm.tokenizer.chat_template().is_some() && !a.no_chat_template;
    let text = match (lm.tokenizer.chat_template(), a.no_chat_template) {
        (Some(t), false) => {
            let mut msgs = vec![];
            if let Some(s) = &a.system {
                msgs.push(json!({"role": "system", "content": s}));
            }
            msgs.push(json!({"role": "user", "content": a.prompt}));
            let mut opts = ChatOptions {
                add_generation_prompt: true,
                ..Default::default()
            };
            if a.no_thinking {
                opts.kwargs.insert("enable_thinking".into(), json!(false));
            }
            t.render(&json!(msgs), &opts)?
        }
        _ => a.prompt.clone(),
    };
    // a rendered template carries its own bos
    let ids = lm.tokenizer.encode(&text, !templated)?;
    if ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    Ok(ids)
}

pub fn stats_line(r: &GenResult, mode: &str) -> String {
    let s = &r.stats;
    format!(
        "[{mode}] {} tokens · {:.2} s · {:.1} tok/s (decode {:.1} tok/s, prefill {} tok at {:.1} tok/s) · accept {:.2}/round · {} target fwds · draft {:.0} ms · verify {:.0} ms · finish {}",
        r.num_tokens(),
        s.prefill_secs + s.decode_secs,
        r.tokens_per_sec(),
        r.decode_tokens_per_sec(),
        s.prompt_tokens,
        r.prefill_tokens_per_sec(),
        r.mean_accept_len(),
        s.target_forwards,
        s.draft_secs * 1e3,
        s.verify_secs * 1e3,
        r.finish_reason.as_str()
    )
}
