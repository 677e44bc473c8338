//! `ApiError`: every failure a client can see, and the one place OpenAI-shaped error JSON
//! (`{"error":{message,type,param,code}}`) is built, for HTTP responses and SSE error events.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use dspark_engine::EngineError;

use crate::openapi::{ErrorBody, ErrorObject};
use crate::validate::ValidationError;

/// Seconds a client is asked to wait after a 429.
pub const RETRY_AFTER_SECS: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("this model's maximum context length is {max} tokens; the prompt has {prompt} tokens and {max_new} new tokens were requested")]
    ContextOverflow {
        prompt: usize,
        max_new: usize,
        max: usize,
    },
    #[error("the server is busy: the request queue is full; retry later")]
    Overloaded,
    #[error("invalid or missing API key; send `Authorization: Bearer <key>`")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the request body exceeds the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// Over `--max-headers` or `--max-header-bytes`.
    #[error("the request headers exceed the limit: {0}")]
    HeadersTooLarge(String),
    #[error("the request could not be processed: {0}")]
    Unprocessable(String),
    /// Generic message to the client; the chain is logged once where it is created.
    #[error("internal server error (request {id})")]
    Internal { id: String },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid(_)
            | ApiError::ContextOverflow { .. }
            | ApiError::Unprocessable(_) => StatusCode::BAD_REQUEST,
            ApiError::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Invalid(_)
            | ApiError::ContextOverflow { .. }
            | ApiError::Unprocessable(_)
            | ApiError::MethodNotAllowed
            | ApiError::PayloadTooLarge(_)
            | ApiError::HeadersTooLarge(_) => "invalid_request_error",
            ApiError::Overloaded => "rate_limit_error",
            ApiError::Unauthorized => "authentication_error",
            ApiError::NotFound(_) => "not_found_error",
            ApiError::Internal { .. } => "server_error",
        }
    }

    pub fn code(&self) -> Option<&'static str> {
        match self {
            ApiError::Invalid(e) => Some(e.code()),
            ApiError::ContextOverflow { .. } => Some("context_length_exceeded"),
            ApiError::Overloaded => Some("queue_full"),
            ApiError::Unauthorized => Some("invalid_api_key"),
            ApiError::NotFound(_) => Some("not_found"),
            ApiError::MethodNotAllowed => Some("method_not_allowed"),
            ApiError::PayloadTooLarge(_) => Some("payload_too_large"),
            ApiError::HeadersTooLarge(_) => Some("request_header_fields_too_large"),
            ApiError::Unprocessable(_) => Some("invalid_prompt"),
            ApiError::Internal { .. } => None,
        }
    }

    pub fn param(&self) -> Option<String> {
        match self {
            ApiError::Invalid(e) => e.param().map(str::to_owned),
            ApiError::ContextOverflow { .. } => Some("messages".into()),
            _ => None,
        }
    }

    /// The JSON body, shared by responses and SSE error events.
    pub fn body(&self) -> serde_json::Value {
        let body = ErrorBody {
            error: ErrorObject {
                message: self.to_string(),
                kind: self.kind().to_owned(),
                param: self.param(),
                code: self.code().map(str::to_owned),
            },
        };
        serde_json::to_value(body).unwrap_or_default()
    }

    /// Maps an engine error; internal failures are logged here with a request id.
    pub fn from_engine(e: EngineError) -> ApiError {
        match e {
            EngineError::ContextOverflow {
                prompt,
                max_new,
                max,
            } => ApiError::ContextOverflow {
                prompt,
                max_new,
                max,
            },
            EngineError::QueueFull => ApiError::Overloaded,
            EngineError::Template(m) => ApiError::Unprocessable(m),
            EngineError::Tokenizer(m) | EngineError::Invalid(m) => ApiError::Unprocessable(m),
            other => {
                let id = crate::openai::random_hex(12);
                tracing::error!(request = %id, "engine failure: {other}");
                ApiError::Internal { id }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status(), axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Overloaded) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_maps_to_400_context_length_exceeded() {
        let e = ApiError::from_engine(EngineError::ContextOverflow {
            prompt: 10,
            max_new: 5,
            max: 12,
        });
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["code"], "context_length_exceeded");
    }

    #[test]
    fn internal_errors_hide_details() {
        let e = ApiError::from_engine(EngineError::WorkerGone);
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.to_string().contains("worker"), "{e}");
    }

    #[test]
    fn queue_full_is_429_with_retry_after() {
        let r = ApiError::from_engine(EngineError::QueueFull).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
