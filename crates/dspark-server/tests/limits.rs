//! Request limits, enforced and in OpenAI's error shape: header count and size (431), message
//! count and content size (400 with `param`), body size (413), through `app()` and over a real
//! socket (where hyper's own bound on header fields sits behind ours).

mod common;

use std::io::{Read, Write};

use axum::http::StatusCode;
use common::{post, request, send, setup};
use dspark_server::scripted::Script;
use serde_json::{json, Value};

fn is_openai_error(v: &Value, code: &str) {
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert_eq!(e["type"], "invalid_request_error", "{v}");
    assert_eq!(e["code"], code, "{v}");
}

#[tokio::test]
async fn header_count_and_size_are_limited_with_431() {
    let (app, _) = setup(Script::replying("x"), |c| {
        c.max_headers = 10;
        c.max_header_bytes = 1000;
    });
    let names: Vec<String> = (0..9).map(|i| format!("x-h{i}")).collect();
    let nine: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    // 9 custom + content-type = 10 fields: allowed
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut h = nine.clone();
    h.push(("content-type", "application/json"));
    let r = send(
        &app,
        request("POST", "/v1/chat/completions", body.clone(), &h),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    // 11 fields: 431
    h.push(("x-one-more", "v"));
    let r = send(
        &app,
        request("POST", "/v1/chat/completions", body.clone(), &h),
    )
    .await;
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    is_openai_error(&r.json(), "request_header_fields_too_large");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("11 header fields"));
    // one large value: 431 even on a GET and on /health
    let big = "v".repeat(1001);
    for path in ["/v1/models", "/health"] {
        let r = send(&app, request("GET", path, "", &[("x-big", &big)])).await;
        assert_eq!(
            r.status,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "{path}"
        );
        is_openai_error(&r.json(), "request_header_fields_too_large");
    }
    let r = send(
        &app,
        request("GET", "/v1/models", "", &[("x-big", &big[..900])]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn message_count_and_content_size_are_400_with_param() {
    let (app, _) = setup(Script::replying("x"), |c| {
        c.limits.max_messages = 4;
        c.limits.max_content_bytes = 100;
    });
    let m = |s: &str| json!({"role": "user", "content": s});
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [m("a"), m("b"), m("c"), m("d")]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [m("a"), m("b"), m("c"), m("d"), m("e")]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    is_openai_error(&r.json(), "array_above_max_length");
    assert_eq!(r.json()["error"]["param"], "messages");
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [m(&"a".repeat(60)), m(&"b".repeat(41))]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    is_openai_error(&r.json(), "string_above_max_length");
    let r = post(&app, "/v1/completions", json!({"prompt": "p".repeat(101)})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["param"], "prompt");
}

/// Raw HTTP/1.1 over a socket: `extra` header lines, then the status line of the answer and
/// the body.
fn raw_get(addr: std::net::SocketAddr, extra: &[String]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = String::from("GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for h in extra {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn over_a_socket_our_limit_answers_first_and_hyper_bounds_the_rest() {
    let (app, _) = setup(Script::replying("x"), |_| {});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dspark_server::serve(listener, app, async {
        let _ = stopped.await;
    }));
    let lines = |n: usize| (0..n).map(|i| format!("x-h{i}: v")).collect::<Vec<_>>();
    let res = tokio::task::spawn_blocking(move || {
        (
            raw_get(addr, &lines(10)),
            raw_get(addr, &lines(70)),
            raw_get(addr, &lines(150)),
            raw_get(addr, &[format!("x-big: {}", "v".repeat(40 << 10))]),
        )
    })
    .await
    .unwrap();
    let (ok, ours, hypers, big) = res;
    assert_eq!(ok.0, 200, "{}", ok.1);
    // default 64 fields: 70 + host + connection is ours to refuse, with a JSON body
    assert_eq!(ours.0, 431);
    is_openai_error(
        &serde_json::from_str(&ours.1).unwrap(),
        "request_header_fields_too_large",
    );
    // over hyper's 100 fields the connection layer refuses before any handler runs
    assert_eq!(hypers.0, 431);
    // 40 KiB of one value, over the default 32 KiB
    assert_eq!(big.0, 431);
    is_openai_error(
        &serde_json::from_str(&big.1).unwrap(),
        "request_header_fields_too_large",
    );
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
