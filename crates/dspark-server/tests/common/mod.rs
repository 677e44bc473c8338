//! Shared helpers for the server's protocol tests: a router over the scripted engine, one
//! request through `oneshot`, and SSE frame parsing.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use dspark_server::scripted::{Rule, Script, ScriptedEngine};
use dspark_server::{app, AppState, ServerConfig};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub fn rule(if_contains: Option<&str>, reply: &str) -> Rule {
    Rule {
        if_contains: if_contains.map(str::to_owned),
        reply: reply.to_owned(),
        repeat: false,
    }
}

pub fn setup(script: Script, cfg: impl FnOnce(&mut ServerConfig)) -> (Router, ScriptedEngine) {
    let engine = ScriptedEngine::new(script);
    let mut c = ServerConfig::new("test-model");
    cfg(&mut c);
    (app(AppState::new(Arc::new(engine.clone()), c)), engine)
}

pub fn simple(reply: &str) -> Router {
    setup(Script::replying(reply), |_| {}).0
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    /// `data:` payloads of an SSE body, in order.
    pub fn sse(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.body);
        text.split("\n\n")
            .filter_map(|frame| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            })
            .map(str::to_owned)
            .collect()
    }
}

pub fn request(
    method: &str,
    path: &str,
    body: impl Into<Body>,
    headers: &[(&str, &str)],
) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body.into()).unwrap()
}

pub async fn send(app: &Router, req: Request<Body>) -> Resp {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = r.into_body().collect().await.unwrap().to_bytes().to_vec();
    Resp {
        status,
        headers,
        body,
    }
}

pub async fn post(app: &Router, path: &str, body: Value) -> Resp {
    send(
        app,
        request(
            "POST",
            path,
            body.to_string(),
            &[("content-type", "application/json")],
        ),
    )
    .await
}

pub async fn get(app: &Router, path: &str) -> Resp {
    send(app, request("GET", path, Body::empty(), &[])).await
}
