//! Anthropic's Messages event stream: `message_start`, `ping`, then per content block
//! `content_block_start`, `content_block_delta` (`thinking_delta`, `text_delta` or
//! `input_json_delta`) and `content_block_stop`, then `message_delta` (stop_reason, usage) and
//! `message_stop`. A failure after the stream started is an `error` event in Anthropic's shape.

use axum::response::sse::Event as SseEvent;
use dspark_engine::worker::Summary;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::event_stream::{named, Emitter};
use crate::infer::Out;
use crate::openai::XDspark;
use crate::routes::messages::{error_body, stop_reason, tool_input, tool_use_id, usage};

#[derive(Clone, Copy, PartialEq)]
enum Block {
    Thinking,
    Text,
}

pub struct MessagesEmitter {
    id: String,
    model: String,
    mode: String,
    prompt_tokens: usize,
    stops: Vec<String>,
    /// Index of the next block.
    next: usize,
    open: Option<Block>,
    /// Whitespace-only text seen before any text block (dropped before a tool call).
    held: String,
    calls: usize,
}

impl MessagesEmitter {
    pub fn new(
        id: String,
        model: String,
        mode: String,
        prompt_tokens: usize,
        stops: Vec<String>,
    ) -> Self {
        MessagesEmitter {
            id,
            model,
            mode,
            prompt_tokens,
            stops,
            next: 0,
            open: None,
            held: String::new(),
            calls: 0,
        }
    }

    fn ev(name: &str, mut v: Value) -> SseEvent {
        v["type"] = json!(name);
        named(name, &v)
    }

    fn open(&mut self, b: Block, evs: &mut Vec<SseEvent>) {
        if self.open == Some(b) {
            return;
        }
        self.close(evs);
        let block = match b {
            Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::Text => json!({"type": "text", "text": ""}),
        };
        evs.push(Self::ev(
            "content_block_start",
            json!({"index": self.next, "content_block": block}),
        ));
        self.open = Some(b);
    }

    fn close(&mut self, evs: &mut Vec<SseEvent>) {
        if self.open.take().is_some() {
            evs.push(Self::ev("content_block_stop", json!({"index": self.next})));
            self.next += 1;
        }
    }

    fn delta(&self, delta: Value) -> SseEvent {
        Self::ev(
            "content_block_delta",
            json!({"index": self.next, "delta": delta}),
        )
    }
}

impl Emitter for MessagesEmitter {
    fn start(&mut self) -> Vec<SseEvent> {
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0,
                      "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        });
        vec![
            Self::ev("message_start", json!({"message": message})),
            Self::ev("ping", json!({})),
        ]
    }

    fn piece(&mut self, out: Out) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        match out {
            Out::Reasoning(t) => {
                self.open(Block::Thinking, &mut evs);
                evs.push(self.delta(json!({"type": "thinking_delta", "thinking": t})));
            }
            Out::Content(t) => {
                let t = if self.open == Some(Block::Text) {
                    t
                } else {
                    self.held.push_str(&t);
                    if self.held.trim().is_empty() {
                        return evs;
                    }
                    std::mem::take(&mut self.held)
                };
                self.open(Block::Text, &mut evs);
                evs.push(self.delta(json!({"type": "text_delta", "text": t})));
            }
            Out::Call(c) => {
                self.close(&mut evs);
                self.held.clear();
                self.calls += 1;
                let block = json!({"type": "tool_use", "id": tool_use_id(), "name": c.name,
                                   "input": {}});
                evs.push(Self::ev(
                    "content_block_start",
                    json!({"index": self.next, "content_block": block}),
                ));
                let args = tool_input(&c).to_string();
                evs.push(self.delta(json!({"type": "input_json_delta", "partial_json": args})));
                evs.push(Self::ev("content_block_stop", json!({"index": self.next})));
                self.next += 1;
            }
        }
        evs
    }

    fn done(&mut self, s: &Summary, queued_secs: f64) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        // like the whole message: a text block when nothing else was produced
        if (self.next == 0 && self.open.is_none()) || (!self.held.is_empty() && self.calls == 0) {
            let held = std::mem::take(&mut self.held);
            self.open(Block::Text, &mut evs);
            if !held.is_empty() {
                evs.push(self.delta(json!({"type": "text_delta", "text": held})));
            }
        }
        self.close(&mut evs);
        let (reason, seq) = stop_reason(s, self.calls > 0, &self.stops);
        evs.push(Self::ev(
            "message_delta",
            json!({
                "delta": {"stop_reason": reason, "stop_sequence": seq},
                "usage": usage(s),
                "x_dspark": XDspark::from_summary(&self.mode, s, queued_secs),
            }),
        ));
        evs.push(Self::ev("message_stop", json!({})));
        evs
    }

    fn fail(&mut self, e: &ApiError) -> Vec<SseEvent> {
        vec![named("error", &error_body(e.status(), &e.to_string()))]
    }
}
