//! `POST /v1/responses` (OpenAI Responses API): the request becomes a chat request (see
//! `validate::responses`), runs through the shared generation path, and comes back as a
//! `response` object with `reasoning`, `message` and `function_call` output items, or as the
//! Responses event stream (`responses_sse`). Nothing is stored.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dspark_engine::generate::FinishReason;
use dspark_engine::worker::Summary;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::infer::{collect, start};
use crate::openai::{random_hex, unix_now, XDspark};
use crate::tools::ToolCall;
use crate::validate::responses::parse_responses;
use crate::AppState;

/// Identity of one response and the request fields it echoes.
#[derive(Clone, Debug)]
pub struct RespMeta {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub mode: String,
    pub body: Map<String, Value>,
}

/// `usage` of a finished generation.
pub fn usage(s: &Summary) -> Value {
    let p = s.stats.prompt_tokens;
    json!({
        "input_tokens": p,
        "input_tokens_details": {"cached_tokens": s.stats.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": s.completion_tokens,
        // the engine does not count reasoning tokens apart from the rest
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": p + s.completion_tokens,
    })
}

/// `incomplete` when the token limit cut the output, else `completed`.
pub fn status_of(s: &Summary) -> &'static str {
    if s.finish_reason == FinishReason::Length {
        "incomplete"
    } else {
        "completed"
    }
}

pub fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status != "completed" {
        json!([])
    } else {
        json!([{"type": "reasoning_text", "text": text}])
    };
    json!({"type": "reasoning", "id": id, "summary": [], "content": content, "status": status})
}

pub fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub fn message_item(id: &str, text: Option<&str>, status: &str) -> Value {
    let content = text.map_or_else(|| json!([]), |t| json!([text_part(t)]));
    json!({"type": "message", "id": id, "role": "assistant", "status": status, "content": content})
}

pub fn call_item(id: &str, c: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": c.id, "name": c.name,
           "arguments": arguments, "status": status})
}

pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex(12))
}

/// The `response` object; `done` carries the summary once the generation ended.
pub fn response_object(m: &RespMeta, output: Vec<Value>, done: Option<(&Summary, f64)>) -> Value {
    let b = &m.body;
    let echo = |k: &str, default: Value| b.get(k).cloned().unwrap_or(default);
    let status = done.map_or("in_progress", |(s, _)| status_of(s));
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    let mut r = json!({
        "id": m.id,
        "object": "response",
        "created_at": m.created_at,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "model": m.model,
        "output": output,
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": null,
        "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
        "store": false,
        "temperature": echo("temperature", json!(0.0)),
        "top_p": echo("top_p", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "truncation": "disabled",
        "metadata": echo("metadata", json!({})),
        "usage": null,
    });
    if let Some((s, queued)) = done {
        r["usage"] = usage(s);
        r["x_dspark"] = json!(XDspark::from_summary(&m.mode, s, queued));
    }
    r
}

pub async fn handler(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = super::body_bytes(body, st.cfg.max_body_bytes)?;
    let (req, body) = parse_responses(&bytes, &st.limits())?;
    let g = start(&st.engine, &req, st.cfg.limits.default_max_tokens).await?;
    let meta = RespMeta {
        id: item_id("resp"),
        created_at: unix_now(),
        model: req.model.clone().unwrap_or_else(|| st.cfg.model_id.clone()),
        mode: st.engine.info().mode.clone(),
        body,
    };
    if req.stream {
        let em = crate::responses_sse::ResponsesEmitter::new(meta);
        let sse = crate::event_stream::respond(g, &req, em, st.metrics.clone(), st.cfg.keep_alive);
        return Ok(sse.into_response());
    }
    let c = collect(g, &req).await?;
    st.metrics.record(&c.summary);
    let mut output = Vec::new();
    if !c.reasoning.is_empty() {
        output.push(reasoning_item(&item_id("rs"), &c.reasoning, "completed"));
    }
    let status = status_of(&c.summary);
    let text = if c.calls.is_empty() {
        Some(c.content.as_str())
    } else {
        Some(c.content.trim()).filter(|t| !t.is_empty())
    };
    if let Some(t) = text {
        output.push(message_item(&item_id("msg"), Some(t), status));
    }
    for call in &c.calls {
        output.push(call_item(
            &item_id("fc"),
            call,
            &call.arguments,
            "completed",
        ));
    }
    let r = response_object(&meta, output, Some((&c.summary, c.queued_secs)));
    Ok(Json(r).into_response())
}
