//! Cross-cutting HTTP layers: header limits (431), CORS (preflight answered here, before auth),
//! API-key auth on every route except OPTIONS, `/health` and `/openapi.json` (constant-time key
//! comparison),
//! and response-status counting for `/metrics`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use sha2::{Digest, Sha256};

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

/// Whether the presented key equals the configured one, in time independent of where they
/// differ and of either length: both are hashed with SHA-256 (so the loop below always runs
/// over 32 bytes, whatever the lengths) and the digests are compared with an OR-fold over every
/// byte, without an early exit. `black_box` keeps the optimizer from turning the fold into a
/// short-circuiting comparison.
fn key_matches(presented: &[u8], key: &[u8]) -> bool {
    let a = Sha256::digest(presented);
    let b = Sha256::digest(key);
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    diff == 0
}

pub async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = st.live.api_key() else {
        return next.run(req).await;
    };
    // the API description holds nothing secret; clients fetch it before they have a key
    if req.method() == Method::OPTIONS || matches!(req.uri().path(), "/health" | "/openapi.json") {
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

/// Refuses requests with more than `max_headers` header fields or more than `max_header_bytes`
/// of header names and values, with an OpenAI-shaped 431. (hyper itself refuses more than 100
/// fields or about 400 KiB of head with a bare 431 before this layer runs.)
pub async fn header_limits(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let (count, max_count) = (h.len(), st.cfg.max_headers);
    let bytes: usize = h.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
    let max_bytes = st.cfg.max_header_bytes;
    if count > max_count {
        return ApiError::HeadersTooLarge(format!(
            "{count} header fields; this server accepts at most {max_count}"
        ))
        .into_response();
    }
    if bytes > max_bytes {
        return ApiError::HeadersTooLarge(format!(
            "{bytes} bytes of header names and values; this server accepts at most {max_bytes}"
        ))
        .into_response();
    }
    next.run(req).await
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
        assert!(!key_matches(b"abcd", b"abc"));
        assert!(!key_matches(b"", b"abc"));
        // a difference in the last byte only, and in the first only
        assert!(!key_matches(b"sk-secret-key-1", b"sk-secret-key-2"));
        assert!(!key_matches(b"Xk-secret-key-1", b"sk-secret-key-1"));
    }

    /// The comparison's time does not depend on where the keys differ: the median over many
    /// runs of a mismatch in the first byte and one in the last byte agree within noise (a
    /// byte-wise early exit on a 4 KiB key would make them differ by the whole scan).
    #[test]
    fn key_comparison_time_does_not_depend_on_the_mismatch_position() {
        let key = vec![b'k'; 4096];
        let mut first = key.clone();
        first[0] = b'x';
        let mut last = key.clone();
        last[4095] = b'x';
        let time = |p: &[u8]| {
            let s = std::time::Instant::now();
            std::hint::black_box(key_matches(std::hint::black_box(p), &key));
            s.elapsed().as_nanos()
        };
        let median = |mut t: Vec<u128>| {
            t.sort_unstable();
            t[t.len() / 2] as f64
        };
        // warm up, then measure interleaved: a change in the machine's load (another test,
        // another process) slows both series alike instead of only the one it overlaps
        for _ in 0..50 {
            time(&first);
            time(&last);
        }
        let (mut ta, mut tb) = (Vec::with_capacity(301), Vec::with_capacity(301));
        for _ in 0..301 {
            ta.push(time(&first));
            tb.push(time(&last));
        }
        let (a, b) = (median(ta), median(tb));
        let ratio = a.max(b) / a.min(b).max(1.0);
        assert!(ratio < 2.0, "first-byte {a} ns vs last-byte {b} ns");
    }
}
