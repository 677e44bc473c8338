//! Protocol tests: the real router (`app()` via `oneshot`, no sockets) over the scripted
//! engine. They pin the OpenAI wire format, streaming order, tools, reasoning, errors,
//! auth/CORS, queue-full and cancellation.

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
async fn chat_non_stream_has_openai_shape_usage_and_x_dspark() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "m", "messages": user("hi"), "max_tokens": 50, "unknown_field": [1]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "m");
    assert_eq!(
        v["choices"][0]["message"],
        json!({"role": "assistant", "content": "Hello there!"})
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 12);
    assert_eq!(u["total_tokens"], u["prompt_tokens"].as_u64().unwrap() + 12);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);
    for k in [
        "mode",
        "accept_len",
        "tokens_per_sec",
        "target_forwards",
        "draft_ms",
        "verify_ms",
    ] {
        assert!(
            v["x_dspark"].get(k).is_some(),
            "x_dspark.{k} missing: {}",
            v["x_dspark"]
        );
    }
}

#[tokio::test]
async fn max_tokens_cut_gives_length() {
    let app = simple("Hello there!");
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "max_completion_tokens": 5}),
    )
    .await
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["model"], "test-model");
}

#[tokio::test]
async fn stream_role_first_then_deltas_then_final_with_usage_then_done() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/chat/completions",
        json!({"messages": user("hi"), "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let frames = r.sse();
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    let text: String = chunks[1..]
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello there!");
    assert!(
        chunks.len() >= 5,
        "one chunk per round (4 chars): {}",
        chunks.len()
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["usage"]["completion_tokens"], 12);
    assert!(last["x_dspark"]["mode"].is_string());
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage() {
    let app = simple("Hi");
    let frames = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("x"), "stream": true}),
    )
    .await
    .sse();
    let last: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
    assert!(last.get("usage").is_none());
    assert!(last.get("x_dspark").is_some());
}

const TOOL_REPLY: &str = "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

#[tokio::test]
async fn tool_call_non_stream_sets_tool_calls_and_finish_reason() {
    let app = simple(TOOL_REPLY);
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("weather?"), "tools": tools()}),
    )
    .await
    .json();
    let m = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(m["content"], "Checking.");
    let call = &m["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
}

#[tokio::test]
async fn tool_call_streams_text_live_and_call_as_one_complete_delta() {
    let app = simple(TOOL_REPLY);
    let frames = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("weather?"), "tools": tools(), "stream": true}),
    )
    .await
    .sse();
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let calls: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("tool_calls").is_some())
        .collect();
    assert_eq!(calls.len(), 1);
    let tc = &calls[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (tc["index"].clone(), tc["function"]["name"].clone()),
        (json!(0), json!("get_weather"))
    );
    assert!(tc["function"]["arguments"]
        .as_str()
        .unwrap()
        .contains("Paris"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Checking.");
    // "Checking." arrived in more than one chunk, before the call
    let first_call = chunks
        .iter()
        .position(|c| c["choices"][0]["delta"].get("tool_calls").is_some())
        .unwrap();
    let text_chunks = chunks[..first_call]
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .count();
    assert!(text_chunks >= 2, "text not streamed live");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn tool_markup_is_plain_content_without_tools() {
    let app = simple(TOOL_REPLY);
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("weather?")}),
    )
    .await
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], TOOL_REPLY);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn tool_result_round_trip_uses_tool_message() {
    let script = Script {
        rules: vec![
            rule(Some("\"role\":\"tool\""), "It is 22 C in Paris."),
            rule(None, TOOL_REPLY),
        ],
        ..Script::replying("")
    };
    let (app, _) = setup(script, |_| {});
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("weather?"), "tools": tools()}),
    )
    .await
    .json();
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    let msgs = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"temp_c\": 22}"}
    ]);
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": msgs, "tools": tools()}),
    )
    .await
    .json();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "It is 22 C in Paris."
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn think_goes_to_reasoning_content_never_content() {
    let app = simple("<think>\nLet me think.\n</think>\n\nThe answer is 4.");
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("2+2?")}),
    )
    .await
    .json();
    let m = &v["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "Let me think.");
    assert_eq!(m["content"], "The answer is 4.");
    let frames = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("2+2?"), "stream": true}),
    )
    .await
    .sse();
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let r: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    let c: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        (r.as_str(), c.as_str()),
        ("Let me think.", "The answer is 4.")
    );
    assert!(!c.contains("think"));
}

#[tokio::test]
async fn stop_string_cuts_output() {
    let app = simple("one, two, three");
    let v = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": user("count"), "stop": ", t"}),
    )
    .await
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], "one");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn completions_whole_and_streamed() {
    let app = simple("Paris.");
    let v = post(
        &app,
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 20}),
    )
    .await
    .json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "Paris.");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    let frames = post(
        &app,
        "/completions",
        json!({"prompt": ["The capital"], "stream": true}),
    )
    .await
    .sse();
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert!(
        chunks[0]["choices"][0].get("delta").is_none(),
        "no role chunk for completions"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "Paris.");
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
