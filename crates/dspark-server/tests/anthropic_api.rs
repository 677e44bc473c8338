//! Anthropic `/v1/messages` protocol tests over the scripted engine (router via `oneshot`): the
//! message shape, the event stream, tool_use / tool_result round trips, thinking blocks, stop
//! reasons, `x-api-key` auth, Anthropic's error shape and count_tokens.

mod common;

use axum::http::StatusCode;
use common::*;
use dspark_server::scripted::Script;
use serde_json::{json, Value};

const TOOL_REPLY: &str = "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn tools() -> Value {
    json!([{"name": "get_weather", "description": "weather", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string"}}}}])
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// (event name, data) of each SSE frame.
fn events(r: &Resp) -> Vec<(String, Value)> {
    let text = String::from_utf8_lossy(&r.body);
    text.split("\n\n")
        .filter(|f| f.contains("data:"))
        .map(|f| {
            let name = f
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("")
                .to_owned();
            let data = f.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn whole_message_has_anthropics_shape() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/v1/messages",
        json!({"model": "m", "max_tokens": 50, "system": "be nice", "messages": user("hi"),
               "metadata": {"user_id": "u"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        (&v["type"], &v["role"]),
        (&json!("message"), &json!("assistant"))
    );
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Hello there!"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    let u = &v["usage"];
    assert_eq!(u["output_tokens"], 12);
    assert!(u["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(u["cache_read_input_tokens"], 0);
    assert_eq!(v["x_dspark"]["mode"], "scripted");
}

#[tokio::test]
async fn stream_has_anthropics_event_sequence() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/v1/messages",
        json!({"max_tokens": 50, "messages": user("hi"), "stream": true}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let evs = events(&r);
    for (name, data) in &evs {
        assert_eq!(data["type"], json!(name), "event name = data.type");
    }
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &evs[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert!(start["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let text: String = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Hello there!");
    let md = &evs[7].1;
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["output_tokens"], 12);
}

#[tokio::test]
async fn tool_use_whole_and_streamed_then_tool_result_round_trip() {
    let script = Script {
        rules: vec![
            rule(Some("\"role\":\"tool\""), "It is 22 C in Paris."),
            rule(None, TOOL_REPLY),
        ],
        ..Script::replying("")
    };
    let (app, _) = setup(script, |_| {});
    let body = json!({"max_tokens": 200, "messages": user("weather?"), "tools": tools()});
    let v = post(&app, "/v1/messages", body.clone()).await.json();
    assert_eq!(v["stop_reason"], "tool_use");
    let content = v["content"].as_array().unwrap();
    assert_eq!(content[0], json!({"type": "text", "text": "Checking."}));
    let tu = &content[1];
    assert_eq!(tu["type"], "tool_use");
    assert_eq!(tu["name"], "get_weather");
    assert_eq!(tu["input"], json!({"city": "Paris"}));
    assert!(tu["id"].as_str().unwrap().starts_with("toolu_"));

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let evs = events(&post(&app, "/v1/messages", sb).await);
    let starts: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(starts[1]["content_block"]["type"], "tool_use");
    assert_eq!(starts[1]["content_block"]["name"], "get_weather");
    let json_delta = evs
        .iter()
        .find(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .unwrap();
    let input: Value =
        serde_json::from_str(json_delta.1["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"city": "Paris"}));
    let md = evs.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(md.1["delta"]["stop_reason"], "tool_use");

    let msgs = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu["id"],
                                      "content": "{\"temp_c\": 22}"}]}
    ]);
    let v = post(
        &app,
        "/v1/messages",
        json!({"max_tokens": 200, "messages": msgs, "tools": tools()}),
    )
    .await
    .json();
    assert_eq!(v["content"][0]["text"], "It is 22 C in Paris.");
    assert_eq!(v["stop_reason"], "end_turn");
}

#[tokio::test]
async fn think_becomes_thinking_blocks() {
    let app = simple("<think>\nLet me think.\n</think>\n\nThe answer is 4.");
    let body = json!({"max_tokens": 100, "messages": user("2+2?"),
                      "thinking": {"type": "enabled", "budget_tokens": 1024}});
    let v = post(&app, "/v1/messages", body.clone()).await.json();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": "Let me think.", "signature": ""},
               {"type": "text", "text": "The answer is 4."}])
    );
    let mut sb = body;
    sb["stream"] = json!(true);
    let evs = events(&post(&app, "/v1/messages", sb).await);
    let collect = |kind: &str, key: &str| -> String {
        evs.iter()
            .filter(|(_, d)| d["delta"]["type"] == kind)
            .filter_map(|(_, d)| d["delta"][key].as_str())
            .collect()
    };
    assert_eq!(collect("thinking_delta", "thinking"), "Let me think.");
    assert_eq!(collect("text_delta", "text"), "The answer is 4.");
    let starts: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| &d["content_block"]["type"])
        .collect();
    assert_eq!(starts, [&json!("thinking"), &json!("text")]);
}

#[tokio::test]
async fn stop_reasons_max_tokens_and_stop_sequence() {
    let app = simple("one, two, three");
    let v = post(
        &app,
        "/v1/messages",
        json!({"max_tokens": 3, "messages": user("count")}),
    )
    .await
    .json();
    assert_eq!(
        (&v["stop_reason"], &v["content"][0]["text"]),
        (&json!("max_tokens"), &json!("one"))
    );
    let v = post(
        &app,
        "/v1/messages",
        json!({"max_tokens": 50, "messages": user("count"), "stop_sequences": [", three"]}),
    )
    .await
    .json();
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["stop_sequence"], ", three");
    assert_eq!(v["content"][0]["text"], "one, two");
}

#[tokio::test]
async fn x_api_key_auth_and_anthropic_error_shape() {
    let (app, _) = setup(Script::replying("ok"), |c| c.api_key = Some("k".into()));
    let body = json!({"max_tokens": 5, "messages": user("hi")}).to_string();
    let ct = ("content-type", "application/json");
    for headers in [
        vec![ct, ("x-api-key", "k"), ("anthropic-version", "2023-06-01")],
        vec![ct, ("authorization", "Bearer k")],
    ] {
        let r = send(
            &app,
            request("POST", "/v1/messages", body.clone(), &headers),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{headers:?}");
        assert_eq!(r.json()["content"][0]["text"], "ok");
    }
    let anthropic_error = |r: &Resp, status: StatusCode, typ: &str| {
        assert_eq!(r.status, status);
        let v = r.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], typ, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 3);
        v["error"]["message"].as_str().unwrap().to_owned()
    };
    let r = send(
        &app,
        request(
            "POST",
            "/v1/messages",
            body.clone(),
            &[ct, ("x-api-key", "bad")],
        ),
    )
    .await;
    anthropic_error(&r, StatusCode::UNAUTHORIZED, "authentication_error");
    let r = send(&app, request("POST", "/v1/messages", body.clone(), &[ct])).await;
    anthropic_error(&r, StatusCode::UNAUTHORIZED, "authentication_error");
    let key = [ct, ("x-api-key", "k")];
    let bad = json!({"messages": user("hi")}).to_string();
    let r = send(&app, request("POST", "/v1/messages", bad, &key)).await;
    let msg = anthropic_error(&r, StatusCode::BAD_REQUEST, "invalid_request_error");
    assert!(msg.contains("max_tokens"), "{msg}");
    let r = send(&app, request("POST", "/v1/messages", "{", &key)).await;
    anthropic_error(&r, StatusCode::BAD_REQUEST, "invalid_request_error");
    let r = send(
        &app,
        request("POST", "/v1/messages/nope", body.clone(), &key),
    )
    .await;
    anthropic_error(&r, StatusCode::NOT_FOUND, "not_found_error");
    let r = send(&app, request("GET", "/v1/messages", "", &key)).await;
    anthropic_error(&r, StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error");
    // other routes keep OpenAI's shape
    let r = send(&app, request("POST", "/v1/chat/completions", "{}", &[ct])).await;
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    assert!(r.json().get("type").is_none());
}

#[tokio::test]
async fn count_tokens_matches_the_prompt_usage() {
    let app = simple("Hello there!");
    let msgs = json!({"system": "be nice", "messages": user("hi")});
    let n = post(&app, "/v1/messages/count_tokens", msgs.clone())
        .await
        .json()["input_tokens"]
        .as_u64()
        .unwrap();
    let mut b = msgs;
    b["max_tokens"] = json!(20);
    let v = post(&app, "/v1/messages", b).await.json();
    assert_eq!(v["usage"]["input_tokens"], n);
}

#[tokio::test]
async fn queue_full_is_a_429_rate_limit_error_with_retry_after() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let script = Script {
        queue: 0,
        ..Script::replying("x")
    };
    let (app, engine) = setup(script, |_| {});
    engine.hold();
    // a streamed request is accepted and parked inside the engine
    let body = json!({"max_tokens": 5, "messages": user("a"), "stream": true}).to_string();
    let first = app
        .clone()
        .oneshot(request("POST", "/v1/messages", body, &[]))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let r = post(
        &app,
        "/v1/messages",
        json!({"max_tokens": 5, "messages": user("b")}),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    engine.release();
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("event: message_stop"));
}
