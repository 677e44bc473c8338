//! Engine events → Server-Sent Events: role chunk first (chat), then one chunk per round of
//! reasoning/content, each tool call as one complete `delta.tool_calls` entry, a final chunk
//! with finish_reason (+ usage when asked, + x_dspark), then `data: [DONE]`. Errors after
//! the stream started go out as an OpenAI error object on a `data:` line.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use dspark_engine::worker::{Event, Summary};
use futures_util::Stream;
use serde::Serialize;

use crate::error::ApiError;
use crate::infer::{finish_reason, Generation, Out, PostProcessor};
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
    fn chat_chunk(&self, delta: Delta, finish: Option<&'static str>) -> ChatChunk {
        ChatChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk",
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: finish,
            }],
            usage: None,
            x_dspark: None,
        }
    }

    fn text_chunk(&self, text: String, finish: Option<&'static str>) -> Completion {
        Completion {
            id: self.meta.id.clone(),
            object: "text_completion",
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices: vec![TextChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: finish,
            }],
            usage: None,
            x_dspark: None,
        }
    }

    fn emit(&mut self, outs: Vec<Out>) {
        for o in outs {
            let ev = match (self.meta.kind, o) {
                (Kind::Completion, Out::Content(t) | Out::Reasoning(t)) => {
                    data(&self.text_chunk(t, None))
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
                    data(&self.chat_chunk(
                        Delta {
                            tool_calls: Some(vec![call]),
                            ..Default::default()
                        },
                        None,
                    ))
                }
            };
            self.pending.push_back(ev);
        }
    }

    fn done(&mut self, s: Summary) {
        let tail = self.post.finish();
        self.emit(tail);
        self.metrics.record(&s);
        let finish = finish_reason(&s, self.tool_index > 0);
        let usage = self.meta.include_usage.then(|| Usage::from_summary(&s));
        let x = Some(XDspark::from_summary(&self.meta.mode, &s, self.queued_secs));
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
        self.pending.push_back(SseEvent::default().data("[DONE]"));
        self.finished = true;
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
                Some(Event::Delta { text, .. }) => {
                    let outs = self.post.push(&text);
                    self.emit(outs);
                }
                Some(Event::Done(s)) => self.done(s),
                Some(Event::Error(e)) => self.fail(ApiError::from_engine(e)),
                None => self.fail(ApiError::from_engine(
                    dspark_engine::EngineError::WorkerGone,
                )),
            }
        }
    }
}

/// The SSE response for an accepted generation. Dropping it (client gone) drops the
/// receiver, which cancels the generation at its next round.
pub fn respond(
    g: Generation,
    req: &ValidRequest,
    meta: StreamMeta,
    metrics: Arc<Metrics>,
    keep_alive: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let post = PostProcessor::new(req, g.starts_in_thinking);
    let mut st = State {
        g,
        post,
        meta,
        metrics,
        pending: VecDeque::new(),
        tool_index: 0,
        queued_secs: 0.0,
        finished: false,
    };
    if st.meta.kind == Kind::Chat {
        let role = st.chat_chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Default::default()
            },
            None,
        );
        st.pending.push_back(data(&role));
    }
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let ev = st.next().await?;
        Some((Ok(ev), st))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive))
}
