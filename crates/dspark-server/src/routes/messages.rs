//! Anthropic `POST /v1/messages` and `/v1/messages/count_tokens`: the request becomes a chat
//! request (see `validate::messages`), runs through the shared generation path, and comes
//! back as a `message` with thinking, text and tool_use blocks, or as Anthropic's event stream
//! (`anthropic_sse`). [`anthropic_layer`] gives these paths `x-api-key` auth and Anthropic's
//! error shape (`{"type":"error","error":{type,message}}`) for every failure.

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dspark_engine::generate::FinishReason;
use dspark_engine::worker::Summary;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::infer::{collect, start};
use crate::openai::{random_hex, XDspark};
use crate::tools::ToolCall;
use crate::validate::messages::parse_messages;
use crate::AppState;

/// Anthropic's `stop_reason` (and `stop_sequence`, known when only one was given).
pub fn stop_reason(s: &Summary, has_calls: bool, stops: &[String]) -> (&'static str, Value) {
    if has_calls {
        ("tool_use", Value::Null)
    } else if s.stopped_by_string {
        let which = match stops {
            [one] => json!(one),
            _ => Value::Null,
        };
        ("stop_sequence", which)
    } else if s.finish_reason == FinishReason::Length {
        ("max_tokens", Value::Null)
    } else {
        ("end_turn", Value::Null)
    }
}

/// Anthropic's `usage`: `input_tokens` excludes the tokens read from the prefix cache.
pub fn usage(s: &Summary) -> Value {
    let cached = s.stats.cached_tokens;
    json!({
        "input_tokens": s.stats.prompt_tokens.saturating_sub(cached),
        "output_tokens": s.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    })
}

/// A tool call's arguments as the `input` object of a tool_use block.
pub fn tool_input(c: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

pub fn tool_use_id() -> String {
    format!("toolu_{}", random_hex(12))
}

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

pub fn error_body(status: StatusCode, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

pub async fn handler(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = super::body_bytes(body, st.cfg.max_body_bytes)?;
    let m = parse_messages(&bytes, &st.limits(), false)?;
    let req = &m.req;
    let g = start(&st.engine, req, st.cfg.limits.default_max_tokens).await?;
    let id = format!("msg_{}", random_hex(12));
    let model = req.model.clone().unwrap_or_else(|| st.cfg.model_id.clone());
    let mode = st.engine.info().mode.clone();
    if req.stream {
        let em = crate::anthropic_sse::MessagesEmitter::new(
            id,
            model,
            mode,
            g.prompt_tokens,
            m.stop_sequences.clone(),
        );
        let sse = crate::event_stream::respond(g, req, em, st.metrics.clone(), st.cfg.keep_alive);
        return Ok(sse.into_response());
    }
    let c = collect(g, req).await?;
    st.metrics.record(&c.summary);
    let mut content = Vec::new();
    if !c.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": c.reasoning, "signature": ""}));
    }
    let text = if c.calls.is_empty() {
        c.content.as_str()
    } else {
        c.content.trim()
    };
    if !text.is_empty() || (c.calls.is_empty() && content.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &c.calls {
        content.push(
            json!({"type": "tool_use", "id": tool_use_id(), "name": call.name,
                            "input": tool_input(call)}),
        );
    }
    let (reason, seq) = stop_reason(&c.summary, !c.calls.is_empty(), &m.stop_sequences);
    let r = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": seq,
        "usage": usage(&c.summary),
        "x_dspark": XDspark::from_summary(&mode, &c.summary, c.queued_secs),
    });
    Ok(Json(r).into_response())
}

/// `POST /v1/messages/count_tokens`: the prompt's token count after the chat template.
pub async fn count_tokens(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = super::body_bytes(body, st.cfg.max_body_bytes)?;
    let m = parse_messages(&bytes, &st.limits(), true)?;
    let e = st.engine.clone();
    let prompt = m.req.prompt.clone();
    let prep = tokio::task::spawn_blocking(move || e.prepare(&prompt, 0))
        .await
        .map_err(|join| {
            let id = random_hex(12);
            tracing::error!(request = %id, "prepare task failed: {join}");
            ApiError::Internal { id }
        })?
        .map_err(ApiError::from_engine)?;
    Ok(Json(json!({"input_tokens": prep.ids.len()})).into_response())
}

/// Largest error body that is rewritten (ours are a few hundred bytes).
const MAX_ERROR_BODY: usize = 64 << 10;

/// Outermost layer for `/v1/messages*`: `x-api-key` stands in for a missing
/// `Authorization: Bearer`, and every error response (auth, validation, limits, 404/405,
/// queue full, internal) is rewritten into Anthropic's error shape, keeping its status.
pub async fn anthropic_layer(mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path != "/v1/messages" && !path.starts_with("/v1/messages/") {
        return next.run(req).await;
    }
    if !req.headers().contains_key(header::AUTHORIZATION) {
        let bearer = req
            .headers()
            .get("x-api-key")
            .and_then(|k| k.to_str().ok())
            .and_then(|k| HeaderValue::from_str(&format!("Bearer {}", k.trim())).ok());
        if let Some(b) = bearer {
            req.headers_mut().insert(header::AUTHORIZATION, b);
        }
    }
    let r = next.run(req).await;
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let bytes = to_bytes(body, MAX_ERROR_BODY).await.unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("request failed")
                .to_owned()
        });
    let out = error_body(status, &message).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(out))
}
