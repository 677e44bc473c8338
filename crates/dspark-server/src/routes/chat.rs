//! `POST /v1/chat/completions` (and `/chat/completions`): chat in OpenAI's shape, whole or
//! streamed, with reasoning_content, tool calls, usage and x_dspark.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::choices::{add_usage, Plan};
use crate::error::ApiError;
use crate::infer::{collect, finish_reason, start, start_choice};
use crate::logprobs::ChatLogprobs;
use crate::openai::{
    random_hex, unix_now, AssistantMessage, ChatChoice, ChatCompletion, WireToolCall, XDspark,
};
use crate::sse::{respond, StreamMeta};
use crate::validate::{parse_body, Kind};
use crate::AppState;

pub async fn handler(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = super::body_bytes(body, st.cfg.max_body_bytes)?;
    let req = parse_body(&bytes, Kind::Chat, &st.limits())?;
    let g = start(&st.engine, &req, st.cfg.limits.default_max_tokens).await?;
    let id = format!("chatcmpl-{}", random_hex(12));
    let model = req.model.clone().unwrap_or_else(|| st.cfg.model_id.clone());
    let mode = st.engine.info().mode.clone();
    if req.stream {
        let meta = StreamMeta {
            id,
            created: unix_now(),
            model,
            mode,
            include_usage: req.include_usage,
            kind: Kind::Chat,
        };
        let plan = Plan {
            engine: st.engine.clone(),
            req,
            default_max: st.cfg.limits.default_max_tokens,
        };
        return Ok(respond(g, plan, meta, st.metrics.clone(), st.cfg.keep_alive).into_response());
    }
    let mut choices = Vec::with_capacity(req.n);
    let mut usage = None;
    let mut last = None;
    let mut first = Some(g);
    for i in 0..req.n {
        let c = if let Some(g) = first.take() {
            collect(g, &req).await?
        } else {
            let gi = start_choice(
                &st.engine,
                &req,
                &req.prompt,
                i,
                st.cfg.limits.default_max_tokens,
            )
            .await?;
            collect(gi, &req).await?
        };
        st.metrics.record(&c.summary);
        add_usage(&mut usage, &c.summary, i == 0);
        choices.push(choice(i, &c, req.sampling.logprobs.is_some()));
        last = Some(c);
    }
    let c = last.expect("n >= 1");
    let usage = usage.expect("n >= 1");
    let resp = ChatCompletion {
        id,
        object: "chat.completion",
        created: unix_now(),
        model,
        choices,
        usage,
        x_dspark: XDspark::from_summary(&mode, &c.summary, c.queued_secs),
    };
    Ok(Json(resp).into_response())
}

/// Choice `index` of a whole response.
fn choice(index: usize, c: &crate::infer::Collected, logprobs: bool) -> ChatChoice {
    let has_calls = !c.calls.is_empty();
    let content = if has_calls {
        Some(c.content.trim().to_owned()).filter(|s| !s.is_empty())
    } else {
        Some(c.content.clone())
    };
    let tool_calls =
        has_calls.then(|| c.calls.iter().map(|t| WireToolCall::new(t, None)).collect());
    let message = AssistantMessage {
        role: "assistant",
        content,
        reasoning_content: Some(c.reasoning.clone()).filter(|r| !r.is_empty()),
        tool_calls,
    };
    ChatChoice {
        index,
        message,
        logprobs: logprobs.then(|| ChatLogprobs::new(&c.logprobs)),
        finish_reason: finish_reason(&c.summary, has_calls),
    }
}
