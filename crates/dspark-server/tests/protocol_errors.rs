//! Protocol tests, part 2: errors (400/404/405/413, context overflow), auth and CORS,
//! queue-full 429, disconnect-cancels, and metrics; `app()` via `oneshot` over the scripted engine.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use common::*;
use dspark_server::scripted::Script;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn wrong_types_are_400_with_param_in_openai_shape() {
    let app = simple("x");
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "temperature": "warm"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let e = &r.json()["error"];
    assert_eq!(e["param"], "temperature");
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("temperature"));
    let r = send(
        &app,
        request("POST", "/v1/chat/completions", "{\"messages\": [", &[]),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["code"], "invalid_json");
}

#[tokio::test]
async fn context_overflow_is_400_context_length_exceeded() {
    let app = simple("x");
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "max_tokens": 1_000_000}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    let long = "a".repeat(5000);
    let r = post(&app, "/v1/completions", json!({"prompt": long})).await;
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn unknown_route_404_and_wrong_method_405_are_json() {
    let app = simple("x");
    let r = get(&app, "/v1/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    let r = get(&app, "/v1/chat/completions").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.json()["error"]["code"], "method_not_allowed");
    let r = get(&app, "/v1/models/other").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn models_health_head_and_query_strings() {
    let app = simple("x");
    let v = get(&app, "/v1/models?foo=bar").await.json();
    assert_eq!(v["data"][0]["id"], "test-model");
    assert_eq!(
        get(&app, "/v1/models/test-model").await.json()["id"],
        "test-model"
    );
    assert_eq!(get(&app, "/health?x=1").await.json()["status"], "ok");
    let r = send(&app, request("HEAD", "/", Body::empty(), &[])).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    let r = post(
        &app,
        "/v1/chat/completions?api-version=2024",
        json!({"messages": user("hi")}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn api_key_checked_everywhere_except_health_and_options() {
    let (app, _) = setup(Script::replying("x"), |c| c.api_key = Some("sekret".into()));
    for (m, p) in [
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/"),
        ("HEAD", "/"),
        ("GET", "/nope"),
    ] {
        let r = send(&app, request(m, p, Body::empty(), &[])).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{m} {p}");
        if m != "HEAD" {
            assert_eq!(r.json()["error"]["type"], "authentication_error");
        }
        let r = send(
            &app,
            request(m, p, Body::empty(), &[("authorization", "Bearer wrong")]),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{m} {p} wrong key");
    }
    assert_eq!(get(&app, "/health").await.status, StatusCode::OK);
    let r = send(
        &app,
        request(
            "OPTIONS",
            "/v1/chat/completions",
            Body::empty(),
            &[("origin", "http://localhost:3000")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let body = json!({"messages": user("hi")}).to_string();
    let r = send(
        &app,
        request(
            "POST",
            "/v1/chat/completions",
            body,
            &[("authorization", "Bearer sekret")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        send(
            &app,
            request(
                "GET",
                "/v1/models",
                Body::empty(),
                &[("authorization", "Bearer sekret")]
            )
        )
        .await
        .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn cors_allows_configured_and_local_origins_only() {
    let (app, _) = setup(Script::replying("x"), |c| {
        c.cors = dspark_server::Cors::from_list(&["https://ui.example".into()])
    });
    let pre = |origin: &'static str| {
        request(
            "OPTIONS",
            "/v1/chat/completions",
            Body::empty(),
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
            ],
        )
    };
    let r = send(&app, pre("https://ui.example")).await;
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "https://ui.example"
    );
    assert!(r.headers["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    let r = send(&app, pre("https://evil.example")).await;
    assert!(r.headers.get("access-control-allow-origin").is_none());
    let r = send(
        &app,
        request(
            "GET",
            "/health",
            Body::empty(),
            &[("origin", "http://127.0.0.1:5173")],
        ),
    )
    .await;
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "http://127.0.0.1:5173"
    );
}

#[tokio::test]
async fn full_queue_is_429_with_retry_after() {
    let script = Script {
        queue: 0,
        ..Script::replying("x")
    };
    let (app, engine) = setup(script, |_| {});
    engine.hold();
    // the first request is accepted and parked inside the engine
    let first = app
        .clone()
        .oneshot(request(
            "POST",
            "/v1/chat/completions",
            json!({"messages": user("a"), "stream": true}).to_string(),
            &[],
        ))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let r = post(&app, "/v1/chat/completions", json!({"messages": user("b")})).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["error"]["code"], "queue_full");
    engine.release();
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).ends_with("data: [DONE]\n\n"));
    assert_eq!(
        post(&app, "/v1/chat/completions", json!({"messages": user("c")}))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn disconnect_mid_stream_cancels_generation_and_server_keeps_serving() {
    let script = Script {
        rules: vec![
            dspark_server::scripted::Rule {
                if_contains: Some("endless".into()),
                reply: "la ".into(),
                repeat: true,
            },
            rule(None, "ok"),
        ],
        round_ms: 1,
        round_chars: 1,
        context_len: 1 << 30,
        ..Script::replying("")
    };
    let (app, engine) = setup(script, |_| {});
    let resp = app
        .clone()
        .oneshot(request(
            "POST",
            "/v1/chat/completions",
            json!({"messages": user("endless"), "stream": true, "max_tokens": 100_000_000})
                .to_string(),
            &[],
        ))
        .await
        .unwrap();
    let mut body = resp.into_body();
    let mut seen = 0;
    while seen < 3 {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if frame.is_data() {
            seen += 1;
        }
    }
    drop(body); // the client goes away
                // the scripted worker runs one job at a time: when this answer arrives the first job has ended
    let v = tokio::time::timeout(
        Duration::from_secs(30),
        post(
            &app,
            "/v1/chat/completions",
            json!({"messages": user("again")}),
        ),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], "ok");
    let m = get(&app, "/metrics").await.json();
    assert_eq!(m["engine"]["cancelled"], 1);
    assert_eq!(m["engine"]["completed"], 1);
    use dspark_server::Engine;
    assert!(
        engine.counters().generated_tokens < 100_000,
        "the endless generation stopped"
    );
}

#[tokio::test]
async fn oversized_body_is_413_json() {
    let (app, _) = setup(Script::replying("x"), |c| c.max_body_bytes = 1024);
    let big = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "a".repeat(4096)
    );
    let r = send(&app, request("POST", "/v1/chat/completions", big, &[])).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn metrics_json_and_prometheus() {
    let app = simple("Hello");
    post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("hi")}),
    )
    .await;
    let m = get(&app, "/metrics").await.json();
    assert_eq!(m["requests"], 1);
    assert_eq!(m["completion_tokens"], 5);
    assert_eq!(m["http_responses"]["200"], 1);
    let r = get(&app, "/metrics?format=prometheus").await;
    let text = String::from_utf8(r.body).unwrap();
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        text.contains("# TYPE dspark_requests_total counter\ndspark_requests_total 1\n"),
        "{text}"
    );
    assert!(text.contains("dspark_engine_jobs_total{outcome=\"cancelled\"} 0"));
    let r = send(
        &app,
        request(
            "GET",
            "/metrics",
            Body::empty(),
            &[("accept", "text/plain;version=0.0.4")],
        ),
    )
    .await;
    assert!(String::from_utf8(r.body).unwrap().starts_with("# HELP"));
}
