//! Engine events → Server-Sent Events: role chunk first (chat), then one chunk per round of
//! reasoning/content, each tool call as one complete `delta.tool_calls` entry, a final chunk
//! with finish_reason (+ usage when asked, + x_dspark), then `data: [DONE]`. Errors after
//! the stream started go out as an OpenAI error object on a `data:` line.
//!
//! With several choices (`n > 1`, or a list of completions prompts) they run one after
//! another: every chunk carries its choice's `index`, each choice ends with its own
//! finish_reason chunk, and usage (summed, see [`crate::choices`]) rides on the last one.
//! Log-probabilities of a round ride on the first chunk emitted after it (or on the choice's
//! finish chunk when post-processing held the text back).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use dspark_engine::sampling::logprobs::Rendered;
use dspark_engine::worker::{Event, Prompt, Summary};
use futures_util::Stream;
use serde::Serialize;

use crate::choices::{add_usage, Plan};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::infer::{finish_reason, start_choice, Generation, Out, PostProcessor};
use crate::logprobs::{ChatLogprobs, TextLogprobs};
use crate::openai::{
    ChatChunk, ChunkChoice, Completion, Delta, TextChoice, Usage, WireToolCall, XDspark,
};
use crate::routes::metrics::Metrics;
use crate::validate::{Kind, ValidRequest};

/// Identity of one streamed response.
pub struct StreamMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub mode: String,
    pub include_usage: bool,
    pub kind: Kind,
}

struct State {
    g: Generation,
    req: ValidRequest,
    engine: Arc<dyn Engine>,
    default_max: usize,
    /// Choices still to run after the current one: (prompt, choice within it, index).
    queue: VecDeque<(Prompt, usize, usize)>,
    /// `index` of the current choice.
    index: usize,
    usage: Option<Usage>,
    /// Log-probabilities not yet sent, and the text offset reached (completions).
    logprobs: Vec<Rendered>,
    text_offset: usize,
    post: PostProcessor,
    meta: StreamMeta,
    metrics: Arc<Metrics>,
    pending: VecDeque<SseEvent>,
    tool_index: usize,
    queued_secs: f64,
    finished: bool,
}

fn data<T: Serialize>(v: &T) -> SseEvent {
    SseEvent::default().data(serde_json::to_string(v).unwrap_or_else(|_| "{}".into()))
}

impl State {
    fn chat_chunk(&mut self, delta: Delta, finish: Option<&'static str>) -> ChatChunk {
        let logprobs = self.take_logprobs().map(|l| ChatLogprobs::new(&l));
        ChatChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk",
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices: vec![ChunkChoice {
                index: self.index,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
            x_dspark: None,
        }
    }

    fn text_chunk(&mut self, text: String, finish: Option<&'static str>) -> Completion {
        let logprobs = self
            .take_logprobs()
            .map(|l| TextLogprobs::new(&l, &mut self.text_offset));
        Completion {
            id: self.meta.id.clone(),
            object: "text_completion",
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices: vec![TextChoice {
                index: self.index,
                text,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
            x_dspark: None,
        }
    }

    /// The held log-probabilities, when the request asked for them.
    fn take_logprobs(&mut self) -> Option<Vec<Rendered>> {
        self.req
            .sampling
            .logprobs
            .map(|_| std::mem::take(&mut self.logprobs))
    }

    fn emit(&mut self, outs: Vec<Out>) {
        for o in outs {
            let ev = match (self.meta.kind, o) {
                (Kind::Completion, Out::Content(t) | Out::Reasoning(t)) => {
                    let c = self.text_chunk(t, None);
                    data(&c)
                }
                (_, Out::Content(t)) => data(&self.chat_chunk(
                    Delta {
                        content: Some(t),
                        ..Default::default()
                    },
                    None,
                )),
                (_, Out::Reasoning(t)) => data(&self.chat_chunk(
                    Delta {
                        reasoning_content: Some(t),
                        ..Default::default()
                    },
                    None,
                )),
                (_, Out::Call(c)) => {
                    let call = WireToolCall::new(&c, Some(self.tool_index));
                    self.tool_index += 1;
                    let c = self.chat_chunk(
                        Delta {
                            tool_calls: Some(vec![call]),
                            ..Default::default()
                        },
                        None,
                    );
                    data(&c)
                }
            };
            self.pending.push_back(ev);
        }
    }

    /// The current choice ended with `s`; returns whether another choice follows.
    fn done(&mut self, s: Summary) -> bool {
        let tail = self.post.finish();
        self.emit(tail);
        self.metrics.record(&s);
        let finish = finish_reason(&s, self.tool_index > 0);
        let first_of_prompt = self.index.is_multiple_of(self.req.n.max(1));
        add_usage(&mut self.usage, &s, first_of_prompt);
        let last = self.queue.is_empty();
        let usage = (last && self.meta.include_usage)
            .then(|| self.usage.clone())
            .flatten();
        let x = last.then(|| XDspark::from_summary(&self.meta.mode, &s, self.queued_secs));
        let ev = match self.meta.kind {
            Kind::Chat => {
                let mut c = self.chat_chunk(Delta::default(), Some(finish));
                (c.usage, c.x_dspark) = (usage, x);
                data(&c)
            }
            Kind::Completion => {
                let mut c = self.text_chunk(String::new(), Some(finish));
                (c.usage, c.x_dspark) = (usage, x);
                data(&c)
            }
        };
        self.pending.push_back(ev);
        if last {
            self.pending.push_back(SseEvent::default().data("[DONE]"));
            self.finished = true;
        }
        !last
    }

    /// Starts the next queued choice.
    async fn next_choice(&mut self) {
        let Some((prompt, choice, index)) = self.queue.pop_front() else {
            return;
        };
        match start_choice(&self.engine, &self.req, &prompt, choice, self.default_max).await {
            Ok(g) => {
                self.post = PostProcessor::new(&self.req, g.thinking);
                self.g = g;
                self.index = index;
                self.tool_index = 0;
                self.text_offset = 0;
                self.logprobs.clear();
                if self.meta.kind == Kind::Chat {
                    self.push_role();
                }
            }
            Err(e) => self.fail(e),
        }
    }

    fn push_role(&mut self) {
        let role = self.chat_chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Default::default()
            },
            None,
        );
        self.pending.push_back(data(&role));
    }

    fn fail(&mut self, e: ApiError) {
        self.pending.push_back(data(&e.body()));
        self.pending.push_back(SseEvent::default().data("[DONE]"));
        self.finished = true;
    }

    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.finished {
                return None;
            }
            match self.g.rx.recv().await {
                Some(Event::Started { queued_secs }) => self.queued_secs = queued_secs,
                Some(Event::Delta { text, logprobs, .. }) => {
                    self.logprobs.extend(logprobs);
                    let outs = self.post.push(&text);
                    self.emit(outs);
                }
                Some(Event::Done(s)) => {
                    if self.done(s) {
                        self.next_choice().await;
                    }
                }
                Some(Event::Error(e)) => self.fail(ApiError::from_engine(e)),
                None => self.fail(ApiError::from_engine(
                    dspark_engine::EngineError::WorkerGone,
                )),
            }
        }
    }
}

/// The SSE response for an accepted generation (the first choice of `plan`; the others
/// start when the one before ends). Dropping it (client gone) drops the receiver, which
/// cancels the generation at its next round.
pub fn respond(
    g: Generation,
    plan: Plan,
    meta: StreamMeta,
    metrics: Arc<Metrics>,
    keep_alive: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let post = PostProcessor::new(&plan.req, g.thinking);
    let mut queue: VecDeque<_> = plan.choices().into();
    queue.pop_front();
    let mut st = State {
        g,
        req: plan.req,
        engine: plan.engine,
        default_max: plan.default_max,
        queue,
        index: 0,
        usage: None,
        logprobs: Vec::new(),
        text_offset: 0,
        post,
        meta,
        metrics,
        pending: VecDeque::new(),
        tool_index: 0,
        queued_secs: 0.0,
        finished: false,
    };
    if st.meta.kind == Kind::Chat {
        st.push_role();
    }
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let ev = st.next().await?;
        Some((Ok(ev), st))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive))
}
