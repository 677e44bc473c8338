//! `/v1/responses` protocol tests over the scripted engine (router via `oneshot`): the response
//! object, the event stream's order and sequence numbers, function calls and their round trip,
//! reasoning items, the token limit, and errors naming the Responses parameter.

mod common;

use axum::http::StatusCode;
use common::*;
use dspark_server::scripted::Script;
use serde_json::{json, Value};

const TOOL_REPLY: &str = "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn tools() -> Value {
    json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}}}])
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
async fn whole_response_has_the_responses_shape() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/v1/responses",
        json!({"model": "m", "input": "hi", "instructions": "be nice", "max_output_tokens": 50,
               "store": false, "metadata": {"k": "v"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(
        (&v["object"], &v["status"], &v["model"]),
        (&json!("response"), &json!("completed"), &json!("m"))
    );
    assert_eq!(v["instructions"], "be nice");
    assert_eq!(v["metadata"], json!({"k": "v"}));
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(out[0]["role"], "assistant");
    assert_eq!(out[0]["content"][0]["type"], "output_text");
    assert_eq!(out[0]["content"][0]["text"], "Hello there!");
    let u = &v["usage"];
    assert_eq!(u["output_tokens"], 12);
    let input = u["input_tokens"].as_u64().unwrap();
    assert!(input > 0);
    assert_eq!(u["total_tokens"], input + 12);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(v["x_dspark"]["mode"], "scripted");
    assert!(v["x_dspark"]["target_forwards"].as_u64().is_some());
}

#[tokio::test]
async fn stream_events_in_order_with_sequence_numbers() {
    let app = simple("Hello there!");
    let r = post(
        &app,
        "/v1/responses",
        json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
               "stream": true}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let evs = events(&r);
    for (i, (name, data)) in evs.iter().enumerate() {
        assert_eq!(data["type"], json!(name), "event name = data.type");
        assert_eq!(data["sequence_number"], json!(i));
    }
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "response.output_text.delta")
        .count();
    assert_eq!(deltas, 3, "12 chars at 4 per round: {names:?}");
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(std::iter::repeat_n("response.output_text.delta", 3));
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, want);
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(text, "Hello there!");
    let (_, done) = &evs[evs.len() - 4];
    assert_eq!(done["text"], "Hello there!");
    let (_, last) = evs.last().unwrap();
    assert_eq!(last["response"]["status"], "completed");
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        "Hello there!"
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 12);
    assert_eq!(evs[0].1["response"]["status"], "in_progress");
}

#[tokio::test]
async fn function_calls_whole_and_streamed_then_round_trip() {
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
        "/v1/responses",
        json!({"input": "weather in Paris?", "tools": tools()}),
    )
    .await
    .json();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0]["content"][0]["text"], "Checking.");
    let call = &out[1];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(v["tools"], tools());

    let evs = events(
        &post(
            &app,
            "/v1/responses",
            json!({"input": "weather in Paris?", "tools": tools(), "stream": true}),
        )
        .await,
    );
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    let i = names
        .iter()
        .position(|n| *n == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(evs[i].1["name"], "get_weather");
    assert_eq!(names[i - 2], "response.output_item.added");
    assert_eq!(evs[i - 2].1["item"]["type"], "function_call");
    assert_eq!(evs[i - 2].1["output_index"], 1);
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["output"][1]["name"], "get_weather");

    // the call and its output go back as input items
    let input = json!([
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": call["call_id"], "name": "get_weather",
         "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"temp_c\": 22}"}
    ]);
    let v = post(
        &app,
        "/v1/responses",
        json!({"input": input, "tools": tools()}),
    )
    .await
    .json();
    assert_eq!(v["output"][0]["content"][0]["text"], "It is 22 C in Paris.");
}

#[tokio::test]
async fn think_becomes_a_reasoning_item() {
    let app = simple("<think>\nLet me think.\n</think>\n\nThe answer is 4.");
    let v = post(
        &app,
        "/v1/responses",
        json!({"input": "2+2?", "reasoning": {"effort": "medium"}}),
    )
    .await
    .json();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["content"][0]["text"], "Let me think.");
    assert_eq!(out[1]["content"][0]["text"], "The answer is 4.");
    let evs = events(
        &post(
            &app,
            "/v1/responses",
            json!({"input": "2+2?", "stream": true}),
        )
        .await,
    );
    let r: String = evs
        .iter()
        .filter(|(n, _)| n == "response.reasoning_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    let t: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(
        (r.as_str(), t.as_str()),
        ("Let me think.", "The answer is 4.")
    );
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["output"][0]["type"], "reasoning");
    assert_eq!(last["output"][1]["content"][0]["text"], "The answer is 4.");
}

#[tokio::test]
async fn token_limit_makes_the_response_incomplete() {
    let app = simple("Hello there!");
    let v = post(
        &app,
        "/v1/responses",
        json!({"input": "hi", "max_output_tokens": 5}),
    )
    .await
    .json();
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["output"][0]["content"][0]["text"], "Hello");
    let evs = events(
        &post(
            &app,
            "/v1/responses",
            json!({"input": "hi", "max_output_tokens": 5, "stream": true}),
        )
        .await,
    );
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
}

#[tokio::test]
async fn errors_are_openai_shaped_and_name_the_param() {
    let (app, _) = setup(Script::replying("x"), |c| c.api_key = Some("k".into()));
    let auth = [
        ("content-type", "application/json"),
        ("authorization", "Bearer k"),
    ];
    let cases = [
        (json!({}), "input"),
        (
            json!({"input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"input": "x", "store": true}), "store"),
        (
            json!({"input": "x", "max_output_tokens": -3}),
            "max_output_tokens",
        ),
        (json!({"input": [{"type": "input_image"}]}), "input[0].type"),
    ];
    for (body, param) in cases {
        let r = send(
            &app,
            request("POST", "/v1/responses", body.to_string(), &auth),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    let r = send(
        &app,
        request(
            "POST",
            "/v1/responses",
            json!({"input": "x"}).to_string(),
            &[("content-type", "application/json")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = send(
        &app,
        request(
            "POST",
            "/v1/responses",
            json!({"input": "x"}).to_string(),
            &auth,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}
