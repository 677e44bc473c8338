//! What the Gemma 4 HTTP tests share: the real Gemma 4 chat template (PyPI llama-cpp-python
//! 0.3.36's vendored llama.cpp `models/templates/google-gemma-4-31B-it.jinja`, fetched by
//! scripts/fetch-artefacts.sh), a real server on a loopback port, a blocking HTTP/1.1 client,
//! and the tool calls of a streamed chat completion.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::sync::Arc;

use dspark_engine::chat_template::ChatTemplate;
use dspark_engine::tokenizer::artefact_dir;
use dspark_server::engine::Engine;
use dspark_server::{app, AppState, ServerConfig};
use serde_json::Value as Json;

pub fn template() -> ChatTemplate {
    let p = artefact_dir().join("gemma4/google-gemma-4-31B-it.jinja");
    let src = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `bash scripts/fetch-artefacts.sh` first",
            p.display()
        )
    });
    ChatTemplate::new(&src, Some("<bos>".into()), Some("<eos>".into())).unwrap()
}

/// A real server on a loopback port over `engine`; stop it by sending on the returned
/// channel and awaiting the handle.
pub async fn serve_engine(
    engine: Arc<dyn Engine>,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let router = app(AppState::new(engine, ServerConfig::new("gemma-4")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dspark_server::serve(listener, router, async {
        let _ = stop_rx.await;
    }));
    (addr, stop_tx, server)
}

/// One chat completion over a fresh connection: (status, body).
pub fn post(addr: std::net::SocketAddr, body: &Json) -> (u16, String) {
    post_to(addr, "/v1/chat/completions", body)
}

/// One HTTP/1.1 POST to `path` over a fresh connection: (status, body), chunked bodies joined.
pub fn post_to(addr: std::net::SocketAddr, path: &str, body: &Json) -> (u16, String) {
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_owned());
    }
    let (mut body, mut rest) = (String::new(), rest);
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return (status, body);
        }
        body.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
}

/// The streamed chunks' tool calls, reassembled (each arrives whole), and the finish reason.
pub fn streamed_calls(sse: &str) -> (Vec<Json>, String) {
    let mut calls = Vec::new();
    let mut finish = String::new();
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Json = serde_json::from_str(data).unwrap();
        let choice = &chunk["choices"][0];
        calls.extend(
            choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_owned();
        }
    }
    (calls, finish)
}
