//! The streaming loop shared by the Responses and Anthropic Messages routes: engine events →
//! post-processed pieces (reasoning, text, tool calls) → protocol events built by an
//! [`Emitter`], as SSE. Dropping the stream (client gone) drops the receiver, which cancels
//! the generation at its next round. (Chat and completions keep their own loop in `sse.rs`.)

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use dspark_engine::worker::{Event, Summary};
use futures_util::Stream;
use serde::Serialize;

use crate::error::ApiError;
use crate::infer::{Generation, Out, PostProcessor};
use crate::routes::metrics::Metrics;
use crate::validate::ValidRequest;

/// One protocol's events; each call returns the events to send, in order.
pub trait Emitter: Send + 'static {
    /// Before any output.
    fn start(&mut self) -> Vec<SseEvent>;
    /// One post-processed piece.
    fn piece(&mut self, out: Out) -> Vec<SseEvent>;
    /// The generation ended normally.
    fn done(&mut self, s: &Summary, queued_secs: f64) -> Vec<SseEvent>;
    /// The generation failed after the stream started.
    fn fail(&mut self, e: &ApiError) -> Vec<SseEvent>;
}

/// An SSE event named `name` whose data is `v` as JSON.
pub fn named<T: Serialize>(name: &str, v: &T) -> SseEvent {
    SseEvent::default()
        .event(name)
        .data(serde_json::to_string(v).unwrap_or_else(|_| "{}".into()))
}

struct Driver<E> {
    g: Generation,
    post: PostProcessor,
    emitter: E,
    metrics: Arc<Metrics>,
    pending: VecDeque<SseEvent>,
    queued_secs: f64,
    finished: bool,
}

impl<E: Emitter> Driver<E> {
    fn pieces(&mut self, outs: Vec<Out>) {
        for o in outs {
            let evs = self.emitter.piece(o);
            self.pending.extend(evs);
        }
    }

    fn fail(&mut self, e: ApiError) {
        let evs = self.emitter.fail(&e);
        self.pending.extend(evs);
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
                    self.pieces(outs);
                }
                Some(Event::Done(s)) => {
                    let tail = self.post.finish();
                    self.pieces(tail);
                    self.metrics.record(&s);
                    let evs = self.emitter.done(&s, self.queued_secs);
                    self.pending.extend(evs);
                    self.finished = true;
                }
                Some(Event::Error(e)) => self.fail(ApiError::from_engine(e)),
                None => self.fail(ApiError::from_engine(
                    dspark_engine::EngineError::WorkerGone,
                )),
            }
        }
    }
}

/// The SSE response for an accepted generation, events built by `emitter`.
pub fn respond<E: Emitter>(
    g: Generation,
    req: &ValidRequest,
    mut emitter: E,
    metrics: Arc<Metrics>,
    keep_alive: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let post = PostProcessor::new(req, g.thinking);
    let pending: VecDeque<SseEvent> = emitter.start().into();
    let d = Driver {
        g,
        post,
        emitter,
        metrics,
        pending,
        queued_secs: 0.0,
        finished: false,
    };
    let stream = futures_util::stream::unfold(d, |mut d| async move {
        let ev = d.next().await?;
        Some((Ok(ev), d))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive))
}
