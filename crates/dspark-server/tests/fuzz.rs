//! Malformed-input property test: 10,000+ generated bad requests (wrong types, huge numbers,
//! invalid UTF-8, deep nesting, >10 MB bodies, truncated JSON, odd paths and methods) through
//! `app()` with a fixed seed. No response may be a 5xx, nothing may panic, and a good request
//! must still succeed afterwards.

mod common;

use axum::body::Body;
use common::*;
use dspark_server::scripted::Script;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

const SEED: u64 = 0x5eed_d5a7;
const CASES: usize = 10_000;

fn good_chat() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.7,
           "top_p": 0.9, "top_k": 40, "seed": 1, "stop": ["\n"], "stream": false,
           "stream_options": {"include_usage": true},
           "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "auto",
           "chat_template_kwargs": {"enable_thinking": false}, "enable_thinking": true})
}

fn weird_value(rng: &mut ChaCha8Rng, depth: usize) -> Value {
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(u64::MAX),
        4 => json!(-1),
        5 => json!(1e308),
        6 => json!(f64::MIN_POSITIVE),
        7 => json!("\u{0}\u{ffff}😀"),
        8 => json!("x".repeat(rng.random_range(0..5000))),
        9 => json!([]),
        10 => json!({}),
        11 if depth < 4 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| weird_value(rng, depth + 1))
                .collect(),
        ),
        12 if depth < 4 => {
            let mut m = serde_json::Map::new();
            for k in [
                "role",
                "content",
                "name",
                "type",
                "text",
                "function",
                "arguments",
            ] {
                if rng.random::<bool>() {
                    m.insert(k.into(), weird_value(rng, depth + 1));
                }
            }
            Value::Object(m)
        }
        _ => json!(-0.5),
    }
}

/// One malformed body (bytes) by a randomly chosen strategy.
fn body(rng: &mut ChaCha8Rng, case: usize) -> Vec<u8> {
    let fields = [
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "chat_template_kwargs",
        "enable_thinking",
        "n",
    ];
    if case % 2000 == 7 {
        // bodies over 10 MB, a handful of times
        return vec![b'['; 10 * 1024 * 1024 + 17];
    }
    match rng.random_range(0..9) {
        // a field of a good request replaced by a value of a random type
        0..=2 => {
            let mut v = good_chat();
            for _ in 0..rng.random_range(1..4) {
                let f = fields[rng.random_range(0..fields.len())];
                v[f] = weird_value(rng, 0);
            }
            v.to_string().into_bytes()
        }
        // truncated JSON
        3 => {
            let s = good_chat().to_string();
            s.as_bytes()[..rng.random_range(0..s.len())].to_vec()
        }
        // random bytes (mostly invalid UTF-8)
        4 => (0..rng.random_range(0..256))
            .map(|_| rng.random::<u8>())
            .collect(),
        // invalid UTF-8 inside a JSON string
        5 => {
            let mut b = br#"{"messages":[{"role":"user","content":""#.to_vec();
            b.extend((0..rng.random_range(1..16)).map(|_| rng.random_range(0x80..=0xff)));
            b.extend_from_slice(br#""}]}"#);
            b
        }
        // deep nesting
        6 => {
            let d = rng.random_range(100..20_000);
            let mut s = String::from("{\"messages\":");
            s.push_str(&"[".repeat(d));
            s.push_str(&"]".repeat(d));
            s.push('}');
            s.into_bytes()
        }
        // huge numbers as literal text
        7 => {
            let f = fields[rng.random_range(3..9)];
            format!(
                "{{\"messages\":[{{\"role\":\"user\",\"content\":\"x\"}}],\"{f}\":1{}}}",
                "0".repeat(rng.random_range(20..400))
            )
            .into_bytes()
        }
        _ => weird_value(rng, 0).to_string().into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_malformed_requests_never_5xx_and_server_still_works() {
    let (app, _) = setup(Script::replying("fine"), |c| c.api_key = None);
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let paths = [
        "/v1/chat/completions",
        "/v1/completions",
        "/chat/completions",
        "/completions",
        "/v1/models",
        "/metrics",
        "/health",
        "/",
        "/v1/chat/completions?x=%ff",
        "/%00",
        "/v1/../v1/models",
    ];
    let methods = [
        "POST", "POST", "POST", "GET", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH",
    ];
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for case in 0..CASES {
        let (method, path) = if case % 2000 == 7 {
            ("POST", "/v1/chat/completions")
        } else {
            let p = paths[rng.random_range(0..paths.len())];
            (
                if rng.random_range(0..4) == 0 {
                    methods[rng.random_range(0..methods.len())]
                } else {
                    "POST"
                },
                p,
            )
        };
        let b = body(&mut rng, case);
        let stream_it = rng.random::<bool>();
        let ct = if stream_it {
            "application/json"
        } else {
            "text/plain"
        };
        let r = send(
            &app,
            request(method, path, Body::from(b), &[("content-type", ct)]),
        )
        .await;
        assert!(
            !r.status.is_server_error(),
            "case {case}: {method} {path} -> {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        *by_status.entry(r.status.as_u16()).or_default() += 1;
    }
    eprintln!("statuses over {CASES} malformed requests: {by_status:?}");
    assert!(
        by_status.get(&400).copied().unwrap_or(0) > CASES / 3,
        "{by_status:?}"
    );
    assert!(by_status.contains_key(&413), "{by_status:?}");
    let r = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "fine");
}
