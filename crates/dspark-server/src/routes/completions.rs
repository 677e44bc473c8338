//! `POST /v1/completions` (and `/completions`): raw-text completion, no chat template.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::ApiError;
use crate::infer::{collect, finish_reason, start};
use crate::openai::{random_hex, unix_now, Completion, TextChoice, Usage, XDspark};
use crate::sse::{respond, StreamMeta};
use crate::validate::{parse_body, Kind};
use crate::AppState;

pub async fn handler(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = super::body_bytes(body, st.cfg.max_body_bytes)?;
    let req = parse_body(&bytes, Kind::Completion, &st.limits())?;
    let g = start(&st.engine, &req, st.cfg.limits.default_max_tokens).await?;
    let id = format!("cmpl-{}", random_hex(12));
    let model = req.model.clone().unwrap_or_else(|| st.cfg.model_id.clone());
    let mode = st.engine.info().mode.clone();
    if req.stream {
        let meta = StreamMeta {
            id,
            created: unix_now(),
            model,
            mode,
            include_usage: req.include_usage,
            kind: Kind::Completion,
        };
        return Ok(respond(g, &req, meta, st.metrics.clone(), st.cfg.keep_alive).into_response());
    }
    let c = collect(g, &req).await?;
    st.metrics.record(&c.summary);
    let resp = Completion {
        id,
        object: "text_completion",
        created: unix_now(),
        model,
        choices: vec![TextChoice {
            index: 0,
            text: c.reasoning + &c.content,
            logprobs: None,
            finish_reason: Some(finish_reason(&c.summary, false)),
        }],
        usage: Some(Usage::from_summary(&c.summary)),
        x_dspark: Some(XDspark::from_summary(&mode, &c.summary, c.queued_secs)),
    };
    Ok(Json(resp).into_response())
}
