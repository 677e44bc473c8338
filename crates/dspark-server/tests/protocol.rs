//! Protocol tests: the real router (`app()` via `oneshot`, no sockets) over the scripted
//! engine. They pin the OpenAI wire format, streaming order, tools, reasoning, and completions
//! (errors, auth, queueing and metrics are in protocol_errors.rs).

mod common;

use axum::http::StatusCode;
use common::*;
use dspark_server::scripted::Script;
use serde_json::{json, Value};

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
