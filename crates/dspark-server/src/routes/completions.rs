//! `POST /v1/completions` (and `/completions`): raw-text completion, no chat template.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::choices::{add_usage, Plan};
use crate::error::ApiError;
use crate::infer::{collect, finish_reason, start, start_choice};
use crate::logprobs::TextLogprobs;
use crate::openai::{random_hex, unix_now, Completion, TextChoice, XDspark};
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
        let plan = Plan {
            engine: st.engine.clone(),
            req,
            default_max: st.cfg.limits.default_max_tokens,
        };
        return Ok(respond(g, plan, meta, st.metrics.clone(), st.cfg.keep_alive).into_response());
    }
    let plan = Plan {
        engine: st.engine.clone(),
        req: req.clone(),
        default_max: st.cfg.limits.default_max_tokens,
    };
    let mut first = Some(g);
    let mut choices = Vec::new();
    let (mut usage, mut last) = (None, None);
    for (prompt, i, index) in plan.choices() {
        let g = match first.take() {
            Some(g) => g,
            None => start_choice(&st.engine, &req, &prompt, i, plan.default_max).await?,
        };
        let c = collect(g, &req).await?;
        st.metrics.record(&c.summary);
        add_usage(&mut usage, &c.summary, i == 0);
        choices.push(TextChoice {
            index,
            text: c.reasoning.clone() + &c.content,
            logprobs: req
                .sampling
                .logprobs
                .map(|_| TextLogprobs::new(&c.logprobs, &mut 0)),
            finish_reason: Some(finish_reason(&c.summary, false)),
        });
        last = Some(c);
    }
    let c = last.expect("at least one choice");
    let resp = Completion {
        id,
        object: "text_completion",
        created: unix_now(),
        model,
        choices,
        usage,
        x_dspark: Some(XDspark::from_summary(&mode, &c.summary, c.queued_secs)),
    };
    Ok(Json(resp).into_response())
}
