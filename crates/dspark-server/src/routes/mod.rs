//! HTTP routes, one file per resource. Handlers translate between HTTP and `infer`; they hold
//! no generation logic.

pub mod chat;
pub mod completions;
pub mod health;
pub mod messages;
pub mod metrics;
pub mod models;
pub mod responses;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::validate::ValidationError;

/// Maps a body-read failure (too large, broken transfer) to an API error.
pub(crate) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::Invalid(ValidationError::Json(r.body_text()))
        }
    })
}
