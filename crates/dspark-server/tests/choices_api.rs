//! `logprobs`, `logit_bias`, `n` and lists of completions prompts through the HTTP layer
//! (`oneshot`) on the real engine worker with SmolLM2-135M (GGUF Q4_1, baseline): OpenAI's
//! response shapes, streamed chunks that add up to the whole response, greedy choices that
//! repeat, seeded choices equal to lone requests with the derived seed, summed usage, and
//! 400s naming `logit_bias`.

mod common;

use std::sync::Arc;

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::load::load_model;
use dspark_engine::pipeline::Pipeline;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_engine::tokenizer::artefact_dir;
use dspark_engine::worker::EngineHandle;
use dspark_engine::EngineError;
use dspark_server::{app, AppState, ServerConfig};
use serde_json::{json, Value};

use common::post;

fn router() -> axum::Router {
    let h = EngineHandle::spawn::<_, EngineError, _>(
        || {
            let b = CandleBackend::cpu();
            let path = artefact_dir().join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
            let lm = load_model(&b, &path, None)?;
            let spec = SpecParams {
                max_draft: 1,
                confidence_threshold: 0.0,
                lookup: false,
            };
            Pipeline::new(lm, Mode::Baseline, None, spec)
        },
        8,
    )
    .unwrap();
    app(AppState::new(Arc::new(h), ServerConfig::new("smol")))
}

fn chat(extra: Value) -> Value {
    let mut b =
        json!({"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// The `data:` JSON chunks of a streamed response (without `[DONE]`).
fn chunks(r: &common::Resp) -> Vec<Value> {
    r.sse()
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn texts(v: &Value, key: &str) -> Vec<String> {
    v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let t = if key == "text" {
                &c["text"]
            } else {
                &c["message"]["content"]
            };
            t.as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn chat_logprobs_whole_and_streamed() {
    let app = router();
    let r = post(
        &app,
        "/v1/chat/completions",
        chat(json!({"logprobs": true, "top_logprobs": 3})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for e in content {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // greedy: the chosen token is the likeliest one
        assert_eq!(e["token"], top[0]["token"]);
        assert_eq!(e["logprob"], top[0]["logprob"]);
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64());
        let lp = e["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0 && lp > -30.0, "{lp}");
        let bytes: Vec<u8> = e["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            e["token"].as_str().unwrap()
        );
    }
    // without logprobs the field is null
    let plain = post(&app, "/v1/chat/completions", chat(json!({})))
        .await
        .json();
    assert!(plain["choices"][0]["logprobs"].is_null());
    assert_eq!(texts(&plain, "content"), texts(&v, "content"));

    let s = post(
        &app,
        "/v1/chat/completions",
        chat(json!({"logprobs": true, "top_logprobs": 3, "stream": true})),
    )
    .await;
    let mut streamed = Vec::new();
    for c in chunks(&s) {
        if let Some(l) = c["choices"][0]["logprobs"]["content"].as_array() {
            streamed.extend(l.iter().cloned());
        }
    }
    assert_eq!(&streamed, content);
}

#[tokio::test]
async fn completion_logprobs_and_prompt_lists() {
    let app = router();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 6, "logprobs": 2});
    let v = post(&app, "/v1/completions", body).await.json();
    let c = &v["choices"][0];
    let lp = &c["logprobs"];
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.concat(), c["text"].as_str().unwrap());
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), tokens.len());
    let mut off = 0;
    for (i, t) in tokens.iter().enumerate() {
        assert_eq!(lp["text_offset"][i].as_u64().unwrap() as usize, off);
        off += t.chars().count();
        // the chosen token plus its two likeliest (greedy: the chosen is one of them)
        assert_eq!(lp["top_logprobs"][i].as_object().unwrap().len(), 2);
    }

    // two prompts, two choices each: index = prompt * n + choice; greedy choices repeat;
    // each prompt's choice equals a lone request for it
    let both =
        json!({"prompt": ["The capital of France is", "One, two,"], "max_tokens": 6, "n": 2});
    let v = post(&app, "/v1/completions", both).await.json();
    let idx: Vec<u64> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, vec![0, 1, 2, 3]);
    let t = texts(&v, "text");
    let lone = post(
        &app,
        "/v1/completions",
        json!({"prompt": "One, two,", "max_tokens": 6}),
    )
    .await
    .json();
    assert_eq!(
        (t[0] == t[1], &t[2], &t[3]),
        (true, &texts(&lone, "text")[0], &texts(&lone, "text")[0])
    );
    assert_eq!(t[0], c["text"].as_str().unwrap());
    let u = &v["usage"];
    let completion: u64 = u["completion_tokens"].as_u64().unwrap();
    assert_eq!(completion, 4 * 6, "{u}");
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + completion
    );
}

#[tokio::test]
async fn seeded_choices_equal_lone_requests_with_derived_seeds() {
    let app = router();
    let sampled = json!({"temperature": 1.2, "seed": 40, "max_tokens": 10});
    let mut b = chat(sampled.clone());
    b["n"] = json!(3);
    let v = post(&app, "/v1/chat/completions", b).await.json();
    let got = texts(&v, "content");
    assert_eq!(got.len(), 3);
    for (i, text) in got.iter().enumerate() {
        let mut one = chat(sampled.clone());
        one["seed"] = json!(40 + i);
        let lone = post(&app, "/v1/chat/completions", one).await.json();
        assert_eq!(&texts(&lone, "content")[0], text, "choice {i}");
        assert_eq!(v["choices"][i]["index"], json!(i));
    }
    assert!(
        got[0] != got[1] || got[1] != got[2],
        "three seeds gave one text: {got:?}"
    );

    // greedy n = 2 streamed: chunks tagged 0 then 1, the same text, usage on the last chunk
    let mut s = chat(json!({"n": 2, "stream": true, "stream_options": {"include_usage": true}}));
    s["max_tokens"] = json!(8);
    let cs = chunks(&post(&app, "/v1/chat/completions", s).await);
    let mut per = [String::new(), String::new()];
    let mut finishes = 0;
    for c in &cs {
        let ch = &c["choices"][0];
        let i = ch["index"].as_u64().unwrap() as usize;
        per[i] += ch["delta"]["content"].as_str().unwrap_or("");
        finishes += usize::from(!ch["finish_reason"].is_null());
    }
    assert_eq!((finishes, &per[0]), (2, &per[1]));
    let last = cs.last().unwrap();
    assert_eq!(last["usage"]["completion_tokens"], json!(16));
}

#[tokio::test]
async fn logit_bias_changes_output_and_bad_ids_are_400() {
    let app = router();
    let plain = post(
        &app,
        "/v1/completions",
        json!({"prompt": "One, two,", "max_tokens": 4, "logprobs": 0}),
    )
    .await
    .json();
    let vocab_probe = post(
        &app,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 1, "logit_bias": {"49152": 5}}),
    )
    .await;
    assert_eq!(vocab_probe.status, 400);
    assert_eq!(vocab_probe.json()["error"]["param"], "logit_bias");
    let range = post(
        &app,
        "/v1/completions",
        json!({"prompt": "x", "logit_bias": {"5": 150}}),
    )
    .await;
    assert_eq!(
        (
            range.status.as_u16(),
            range.json()["error"]["param"].clone()
        ),
        (400, json!("logit_bias"))
    );
    // +100 on one token id makes it the only output token
    let forced = post(
        &app,
        "/v1/completions",
        json!({"prompt": "One, two,", "max_tokens": 3, "logit_bias": {"28": 100}, "logprobs": 0}),
    )
    .await
    .json();
    let toks = forced["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(toks.len(), 3);
    assert!(toks.iter().all(|t| t == &toks[0]), "{toks:?}");
    assert_ne!(forced["choices"][0]["text"], plain["choices"][0]["text"]);
    let lp = forced["choices"][0]["logprobs"]["token_logprobs"][0]
        .as_f64()
        .unwrap();
    assert!(lp > -1e-3, "a +100 bias makes the token certain: {lp}");
}
