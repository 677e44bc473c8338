//! The Responses API event stream: `response.created`, `response.in_progress`, then per output
//! item `response.output_item.added`, `response.content_part.added`, text or reasoning deltas
//! (`response.output_text.delta`, `response.reasoning_text.delta`) or function-call arguments,
//! the matching `.done` events, `response.output_item.done`, and finally `response.completed`
//! (or `response.incomplete` at the token limit). Every event has a `sequence_number`.

use axum::response::sse::Event as SseEvent;
use dspark_engine::worker::Summary;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::event_stream::{named, Emitter};
use crate::infer::Out;
use crate::routes::responses::{
    call_item, item_id, message_item, reasoning_item, response_object, status_of, text_part,
    RespMeta,
};

#[derive(PartialEq)]
enum Kind {
    Reasoning,
    Message,
}

/// The output item being streamed.
struct Open {
    kind: Kind,
    id: String,
    index: usize,
    text: String,
}

pub struct ResponsesEmitter {
    meta: RespMeta,
    seq: u64,
    /// Finished output items, for the final `response` object.
    output: Vec<Value>,
    open: Option<Open>,
    /// Whitespace-only text seen before any message item (dropped before a tool call).
    held: String,
    messages: usize,
    calls: usize,
}

impl ResponsesEmitter {
    pub fn new(meta: RespMeta) -> Self {
        ResponsesEmitter {
            meta,
            seq: 0,
            output: Vec::new(),
            open: None,
            held: String::new(),
            messages: 0,
            calls: 0,
        }
    }

    fn ev(&mut self, typ: &str, mut v: Value) -> SseEvent {
        v["type"] = json!(typ);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        named(typ, &v)
    }

    /// Opens an item of `kind` (closing another kind first); returns its events.
    fn open(&mut self, kind: Kind, evs: &mut Vec<SseEvent>) {
        if self.open.as_ref().is_some_and(|o| o.kind == kind) {
            return;
        }
        self.close("completed", evs);
        let index = self.output.len();
        let (id, item, part) = match kind {
            Kind::Reasoning => {
                let id = item_id("rs");
                let item = reasoning_item(&id, "", "in_progress");
                (id, item, json!({"type": "reasoning_text", "text": ""}))
            }
            Kind::Message => {
                let id = item_id("msg");
                self.messages += 1;
                (
                    id.clone(),
                    message_item(&id, None, "in_progress"),
                    text_part(""),
                )
            }
        };
        evs.push(self.ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        evs.push(self.ev(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        ));
        self.open = Some(Open {
            kind,
            id,
            index,
            text: String::new(),
        });
    }

    fn close(&mut self, status: &str, evs: &mut Vec<SseEvent>) {
        let Some(o) = self.open.take() else { return };
        let base = json!({"item_id": o.id, "output_index": o.index, "content_index": 0});
        let (done_name, mut done, part, item) = match o.kind {
            Kind::Reasoning => (
                "response.reasoning_text.done",
                base.clone(),
                json!({"type": "reasoning_text", "text": o.text}),
                reasoning_item(&o.id, &o.text, "completed"),
            ),
            Kind::Message => {
                let mut d = base.clone();
                d["logprobs"] = json!([]);
                (
                    "response.output_text.done",
                    d,
                    text_part(&o.text),
                    message_item(&o.id, Some(&o.text), status),
                )
            }
        };
        done["text"] = json!(o.text);
        evs.push(self.ev(done_name, done));
        let mut pd = base;
        pd["part"] = part;
        evs.push(self.ev("response.content_part.done", pd));
        evs.push(self.ev(
            "response.output_item.done",
            json!({"output_index": o.index, "item": item}),
        ));
        self.output.push(item);
    }

    fn delta(&mut self, name: &str, text: &str, evs: &mut Vec<SseEvent>) {
        let Some(o) = self.open.as_mut() else { return };
        o.text.push_str(text);
        let mut v = json!({"item_id": o.id, "output_index": o.index, "content_index": 0,
                           "delta": text});
        if name == "response.output_text.delta" {
            v["logprobs"] = json!([]);
        }
        evs.push(self.ev(name, v));
    }
}

impl Emitter for ResponsesEmitter {
    fn start(&mut self) -> Vec<SseEvent> {
        let r = response_object(&self.meta, vec![], None);
        vec![
            self.ev("response.created", json!({"response": r})),
            self.ev("response.in_progress", json!({"response": r})),
        ]
    }

    fn piece(&mut self, out: Out) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        match out {
            Out::Reasoning(t) => {
                self.open(Kind::Reasoning, &mut evs);
                self.delta("response.reasoning_text.delta", &t, &mut evs);
            }
            Out::Content(t) => {
                let in_message = self.open.as_ref().is_some_and(|o| o.kind == Kind::Message);
                let t = if in_message {
                    t
                } else {
                    self.held.push_str(&t);
                    if self.held.trim().is_empty() {
                        return evs;
                    }
                    std::mem::take(&mut self.held)
                };
                self.open(Kind::Message, &mut evs);
                self.delta("response.output_text.delta", &t, &mut evs);
            }
            Out::Call(c) => {
                self.close("completed", &mut evs);
                self.held.clear();
                self.calls += 1;
                let index = self.output.len();
                let id = item_id("fc");
                evs.push(self.ev(
                    "response.output_item.added",
                    json!({"output_index": index, "item": call_item(&id, &c, "", "in_progress")}),
                ));
                evs.push(self.ev(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": c.arguments}),
                ));
                evs.push(self.ev(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": c.name,
                           "arguments": c.arguments}),
                ));
                let item = call_item(&id, &c, &c.arguments, "completed");
                evs.push(self.ev(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.output.push(item);
            }
        }
        evs
    }

    fn done(&mut self, s: &Summary, queued_secs: f64) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        let status = status_of(s);
        // like the whole response: a message item always, unless the output is tool calls
        if self.messages == 0 && self.calls == 0 {
            let held = std::mem::take(&mut self.held);
            self.open(Kind::Message, &mut evs);
            if !held.is_empty() {
                self.delta("response.output_text.delta", &held, &mut evs);
            }
        }
        self.close(status, &mut evs);
        let output = std::mem::take(&mut self.output);
        let r = response_object(&self.meta, output, Some((s, queued_secs)));
        let name = if status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        evs.push(self.ev(name, json!({"response": r})));
        evs
    }

    fn fail(&mut self, e: &ApiError) -> Vec<SseEvent> {
        vec![self.ev(
            "error",
            json!({"code": e.code(), "message": e.to_string(), "param": e.param()}),
        )]
    }
}
