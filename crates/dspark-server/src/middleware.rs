//! Cross-cutting HTTP layers: CORS (preflight answered here, before auth), API-key auth on
//! every route except OPTIONS and `/health`, and response-status counting for `/metrics`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::AppState;

/// Which browser origins may call the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cors {
    /// Any origin (`--cors-origin '*'`).
    Any,
    /// http(s)://localhost, 127.0.0.1 and [::1] on any port, plus the listed origins.
    Local(Vec<String>),
}

impl Cors {
    /// From `--cors-origin` values: `*` anywhere means any origin.
    pub fn from_list(origins: &[String]) -> Cors {
        if origins.iter().any(|o| o == "*") {
            Cors::Any
        } else {
            Cors::Local(
                origins
                    .iter()
                    .map(|o| o.trim_end_matches('/').to_owned())
                    .collect(),
            )
        }
    }

    pub fn allows(&self, origin: &str) -> bool {
        match self {
            Cors::Any => true,
            Cors::Local(list) => {
                if list.iter().any(|o| o == origin) {
                    return true;
                }
                let rest = origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"));
                let Some(rest) = rest else { return false };
                let host = if rest.starts_with('[') {
                    rest.split_inclusive(']').next().unwrap_or("")
                } else {
                    rest.split(':').next().unwrap_or("")
                };
                let port_ok = rest[host.len()..].is_empty()
                    || rest[host.len()..]
                        .strip_prefix(':')
                        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
                matches!(host, "localhost" | "127.0.0.1" | "[::1]") && port_ok
            }
        }
    }
}

fn allowed_origin(st: &AppState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    st.cfg
        .cors
        .allows(origin.to_str().ok()?)
        .then(|| origin.clone())
}

pub async fn cors(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let origin = allowed_origin(&st, req.headers());
    if req.method() == Method::OPTIONS {
        let mut r = Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Body::empty())
            .unwrap_or_default();
        let h = r.headers_mut();
        if let Some(o) = origin {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD, POST, OPTIONS"),
            );
            let asked = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                asked.unwrap_or(HeaderValue::from_static("authorization, content-type")),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        h.insert(header::VARY, HeaderValue::from_static("origin"));
        h.insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, OPTIONS"),
        );
        return r;
    }
    let mut r = next.run(req).await;
    if let Some(o) = origin {
        r.headers_mut()
            .insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("origin"));
    }
    r
}

/// Constant-time comparison of the presented key.
fn key_matches(presented: &[u8], key: &[u8]) -> bool {
    presented.len() == key.len()
        && presented
            .iter()
            .zip(key)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

pub async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = st.live.api_key() else {
        return next.run(req).await;
    };
    if req.method() == Method::OPTIONS || req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match presented {
        Some(p) if key_matches(p.as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::Unauthorized.into_response(),
    }
}

pub async fn count_status(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    st.metrics.record_status(r.status().as_u16());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_origins_allowed_by_default_others_not() {
        let c = Cors::from_list(&["https://app.example".into()]);
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8080",
            "https://app.example",
        ] {
            assert!(c.allows(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://localhost:",
            "http://localhost:80x",
            "null",
        ] {
            assert!(!c.allows(bad), "{bad}");
        }
        assert!(Cors::from_list(&["*".into()]).allows("http://anything"));
    }

    #[test]
    fn key_comparison() {
        assert!(key_matches(b"abc", b"abc"));
        assert!(!key_matches(b"abd", b"abc"));
        assert!(!key_matches(b"ab", b"abc"));
    }
}
