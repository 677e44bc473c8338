//! Between validation and the engine: prepares the prompt on a blocking thread, picks
//! `max_tokens`, submits the job with a callback that forwards events into a tokio channel
//! (a dropped receiver = client gone = cancel), and post-processes text into reasoning,
//! content and tool calls. Knows no HTTP.

use std::sync::Arc;

use dspark_engine::sampling::logprobs::Rendered;
use dspark_engine::worker::{Event, JobParams, Prompt, Summary};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::engine::Engine;
use crate::error::ApiError;
use crate::thinking::{ThinkSplitter, Thinking};
use crate::tools::{Piece, ToolCall, ToolParser};
use crate::validate::{Kind, ToolMode, ValidRequest, ValidationError};

/// A generation that was accepted by the engine.
pub struct Generation {
    pub rx: UnboundedReceiver<Event>,
    pub prompt_tokens: usize,
    /// The thinking syntax of the rendered prompt's template, and whether the prompt leaves
    /// the model inside a thinking block.
    pub thinking: Thinking,
}

/// Prepares and submits `req` (its first prompt, choice 0). Errors: 400 (context, template),
/// 429 (queue full), 500.
pub async fn start(
    engine: &Arc<dyn Engine>,
    req: &ValidRequest,
    default_max: usize,
) -> Result<Generation, ApiError> {
    start_choice(engine, req, &req.prompt, 0, default_max).await
}

/// The seed of choice `choice` of a seeded request: `seed + choice` (wrapping), so choice 0
/// is the plain request and each choice can be reproduced alone.
pub fn choice_seed(seed: Option<u64>, choice: usize) -> Option<u64> {
    seed.map(|s| s.wrapping_add(choice as u64))
}

/// Refuses `logit_bias` ids the model does not have (400, param `logit_bias`).
pub fn check_bias(engine: &Arc<dyn Engine>, req: &ValidRequest) -> Result<(), ApiError> {
    let vocab = engine.info().vocab_size;
    if req
        .sampling
        .logit_bias
        .iter()
        .any(|b| b.0 as usize >= vocab)
    {
        return Err(ValidationError::Range {
            param: "logit_bias".into(),
            rule: "keyed by token ids of this model's vocabulary",
        }
        .into());
    }
    Ok(())
}

/// The engine-side state of a request's output grammar (compiled on a blocking thread: the
/// first request builds the token trie). 400 naming the parameter when refused.
async fn constrain(
    engine: &Arc<dyn Engine>,
    s: &crate::structured::Structured,
) -> Result<dspark_engine::constrain::Shared, ApiError> {
    let Some(tok) = engine.tokenizer() else {
        return Err(ValidationError::Unsupported {
            param: s.param.into(),
            msg: "this engine cannot constrain its output",
        }
        .into());
    };
    let s = s.clone();
    tokio::task::spawn_blocking(move || crate::structured::constraint(&tok, &s))
        .await
        .map_err(|join| {
            let id = crate::openai::random_hex(12);
            tracing::error!(request = %id, "grammar task failed: {join}");
            ApiError::Internal { id }
        })?
        .map_err(ApiError::from)
}

/// Prepares and submits choice `choice` (see [`choice_seed`]) of `prompt`, one of `req`'s.
pub async fn start_choice(
    engine: &Arc<dyn Engine>,
    req: &ValidRequest,
    prompt: &Prompt,
    choice: usize,
    default_max: usize,
) -> Result<Generation, ApiError> {
    check_bias(engine, req)?;
    let e = engine.clone();
    let prompt: Prompt = prompt.clone();
    let asked = req.max_tokens;
    let prep = tokio::task::spawn_blocking(move || e.prepare(&prompt, asked.unwrap_or(0)))
        .await
        .map_err(|join| {
            let id = crate::openai::random_hex(12);
            tracing::error!(request = %id, "prepare task failed: {join}");
            ApiError::Internal { id }
        })?
        .map_err(ApiError::from_engine)?;
    let ctx = engine.info().context_len;
    let max_new = match asked {
        Some(n) => n,
        None => default_max.min(ctx.saturating_sub(prep.ids.len())),
    };
    if max_new == 0 {
        return Err(ApiError::ContextOverflow {
            prompt: prep.ids.len(),
            max_new: 1,
            max: ctx,
        });
    }
    let mut sampling = req.sampling.clone();
    sampling.seed = choice_seed(sampling.seed, choice);
    if let Some(structured) = &req.grammar {
        sampling.constraint = Some(constrain(engine, structured).await?);
    }
    let params = JobParams {
        max_new_tokens: max_new,
        sampling,
        stop: req.stop.clone(),
    };
    let (tx, rx) = unbounded_channel();
    let prompt_tokens = prep.ids.len();
    // under a grammar the output is the structured reply itself, never reasoning
    let mut thinking = Thinking::of_prompt(&prep.text);
    thinking.open &= req.kind == Kind::Chat && req.grammar.is_none();
    engine
        .submit(prep.ids, params, Box::new(move |ev| tx.send(ev).is_ok()))
        .map_err(ApiError::from_engine)?;
    Ok(Generation {
        rx,
        prompt_tokens,
        thinking,
    })
}

/// One piece of post-processed output.
#[derive(Debug, PartialEq)]
pub enum Out {
    Reasoning(String),
    Content(String),
    Call(ToolCall),
}

/// Text → reasoning / content / tool calls, incrementally. Completions pass text through.
pub struct PostProcessor {
    think: Option<ThinkSplitter>,
    tools: Option<ToolParser>,
}

impl PostProcessor {
    pub fn new(req: &ValidRequest, thinking: Thinking) -> Self {
        let chat = req.kind == Kind::Chat;
        PostProcessor {
            think: chat.then(|| ThinkSplitter::new(thinking)),
            tools: (chat && req.tools == ToolMode::On).then(ToolParser::new),
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Out> {
        self.step(text, false)
    }

    pub fn finish(&mut self) -> Vec<Out> {
        self.step("", true)
    }

    fn step(&mut self, text: &str, last: bool) -> Vec<Out> {
        let mut out = Vec::new();
        let (reasoning, content) = match &mut self.think {
            None => (String::new(), text.to_owned()),
            Some(t) => {
                let mut s = t.push(text);
                if last {
                    let f = t.finish();
                    s.reasoning += &f.reasoning;
                    s.content += &f.content;
                }
                (s.reasoning, s.content)
            }
        };
        if !reasoning.is_empty() {
            out.push(Out::Reasoning(reasoning));
        }
        match &mut self.tools {
            None => {
                if !content.is_empty() {
                    out.push(Out::Content(content));
                }
            }
            Some(p) => {
                let mut pieces = p.push(&content);
                if last {
                    pieces.extend(p.finish());
                }
                for piece in pieces {
                    out.push(match piece {
                        Piece::Text(t) => Out::Content(t),
                        Piece::Call(c) => Out::Call(c),
                    });
                }
            }
        }
        out
    }
}

/// A whole generation, collected (non-streaming responses).
pub struct Collected {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCall>,
    pub summary: Summary,
    pub queued_secs: f64,
    /// One per generated token when the request asked for log-probabilities.
    pub logprobs: Vec<Rendered>,
}

/// Awaits the end of `g`, post-processing its text.
pub async fn collect(mut g: Generation, req: &ValidRequest) -> Result<Collected, ApiError> {
    let mut post = PostProcessor::new(req, g.thinking);
    let mut outs = Vec::new();
    let mut queued_secs = 0.0;
    let mut logprobs = Vec::new();
    let summary = loop {
        match g.rx.recv().await {
            Some(Event::Started { queued_secs: q }) => queued_secs = q,
            Some(Event::Delta {
                text, logprobs: l, ..
            }) => {
                logprobs.extend(l);
                outs.extend(post.push(&text));
            }
            Some(Event::Done(s)) => break s,
            Some(Event::Error(e)) => return Err(ApiError::from_engine(e)),
            None => {
                return Err(ApiError::from_engine(
                    dspark_engine::EngineError::WorkerGone,
                ))
            }
        }
    };
    outs.extend(post.finish());
    let mut c = Collected {
        reasoning: String::new(),
        content: String::new(),
        calls: vec![],
        summary,
        queued_secs,
        logprobs,
    };
    for o in outs {
        match o {
            Out::Reasoning(r) => c.reasoning.push_str(&r),
            Out::Content(t) => c.content.push_str(&t),
            Out::Call(call) => c.calls.push(call),
        }
    }
    Ok(c)
}

/// OpenAI's finish_reason.
pub fn finish_reason(s: &Summary, has_calls: bool) -> &'static str {
    if has_calls {
        "tool_calls"
    } else {
        match s.finish_reason {
            dspark_engine::generate::FinishReason::Length => "length",
            _ => "stop",
        }
    }
}
