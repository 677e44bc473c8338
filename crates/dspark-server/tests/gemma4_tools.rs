//! Gemma 4 tool calls end to end through the real Gemma 4 chat template (PyPI
//! llama-cpp-python 0.3.36's vendored llama.cpp `models/templates/google-gemma-4-31B-it.jinja`,
//! fetched by scripts/fetch-artefacts.sh) and the transformers goldens of
//! `tests/fixtures/golden/chat_template_gemma4.json`:
//! - every call the template writes parses back (tools.rs) into the call it was rendered from;
//! - over a loopback HTTP server, a request with tools reaches the engine as the transformers
//!   prompt, the engine's Gemma call text comes back as OpenAI `tool_calls` (whole and
//!   streamed), and the tool result sent back makes the transformers prompt of the next turn.
//! - the thought channel (`<|channel>thought\n…<channel|>`) the model writes with thinking on
//!   comes back as `reasoning_content` (whole and streamed; Anthropic thinking blocks and
//!   /v1/responses reasoning items too), never in `content`; sent back on a tool-call turn it is
//!   rendered as transformers renders it.
//!
//! The engine is the scripted one behind a renderer with the real template, so the prompt the
//! server builds is observable; no model runs (forced calls on a real engine:
//! gemma4_forced_calls.rs).

mod gemma4_common;

use std::sync::{Arc, Mutex};

use dspark_engine::chat_template::{ChatOptions, ChatTemplate};
use dspark_engine::queue::CountersSnapshot;
use dspark_engine::tokenizer::Tokenizer;
use dspark_engine::worker::{EventFn, JobParams, ModelInfo, Prepared, Prompt};
use dspark_engine::EngineError;
use dspark_server::engine::Engine;
use dspark_server::scripted::{Rule, Script, ScriptedEngine};
use dspark_server::tools::parse_all;
use gemma4_common::{post, post_to, serve_engine, streamed_calls, template};
use serde_json::{json, Value as Json};

fn golden() -> Json {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/golden/chat_template_gemma4.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn case<'a>(g: &'a Json, name: &str) -> &'a Json {
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no golden case {name}"))
}

fn options(case: &Json) -> ChatOptions {
    ChatOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        tools: Some(case["tools"].clone()).filter(|t| !t.is_null()),
        kwargs: case["kwargs"].as_object().cloned().unwrap_or_default(),
    }
}

/// The `<|tool_call>…<tool_call|>` blocks of a rendered conversation, in order.
fn call_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<|tool_call>") {
        let end = rest[i..].find("<tool_call|>").unwrap() + i + "<tool_call|>".len();
        out.push(&rest[i..end]);
        rest = &rest[end..];
    }
    out
}

/// (name, arguments as JSON) of every assistant tool call of `messages`, string arguments parsed.
fn message_calls(messages: &Json) -> Vec<(String, Json)> {
    let mut out = Vec::new();
    for m in messages.as_array().unwrap() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let f = &c["function"];
            let args = match &f["arguments"] {
                Json::String(s) => serde_json::from_str(s).unwrap(),
                other => other.clone(),
            };
            out.push((f["name"].as_str().unwrap().to_owned(), args));
        }
    }
    out
}

#[test]
fn every_call_the_template_writes_parses_back() {
    let g = golden();
    let tmpl = template();
    let mut checked = 0;
    for case in g["cases"].as_array().unwrap() {
        let want = message_calls(&case["messages"]);
        if want.is_empty() {
            continue;
        }
        let ours = tmpl.render(&case["messages"], &options(case)).unwrap();
        for text in [case["expected"].as_str().unwrap(), ours.as_str()] {
            let blocks = call_blocks(text);
            assert_eq!(blocks.len(), want.len(), "{}", case["name"]);
            // the model's output for the turn: the calls back to back, as the template writes them
            let (content, calls) = parse_all(&blocks.concat());
            assert_eq!(content, "", "{}", case["name"]);
            let got: Vec<(String, Json)> = calls
                .iter()
                .map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap()))
                .collect();
            assert_eq!(got, want, "{}", case["name"]);
            checked += want.len();
        }
    }
    // 16 calls in 14 conversations, each in transformers' rendering and ours
    assert_eq!(checked, 32);
}

/// The scripted engine behind the real template: `prepare` renders like the real engine and
/// records the prompt; a "token" is a character, as in the scripted engine.
struct Templated {
    inner: ScriptedEngine,
    tmpl: ChatTemplate,
    prompts: Mutex<Vec<String>>,
}

impl Engine for Templated {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn prepare(&self, prompt: &Prompt, _max_new: usize) -> Result<Prepared, EngineError> {
        let text = match prompt {
            Prompt::Chat { messages, options } => self
                .tmpl
                .render(messages, options)
                .map_err(|e| EngineError::Template(e.to_string()))?,
            Prompt::Text(t) => t.clone(),
        };
        self.prompts.lock().unwrap().push(text.clone());
        Ok(Prepared {
            ids: text.chars().map(u32::from).collect(),
            text,
        })
    }
    fn submit(&self, prompt: Vec<u32>, params: JobParams, on: EventFn) -> Result<(), EngineError> {
        self.inner.submit(prompt, params, on)
    }
    fn counters(&self) -> CountersSnapshot {
        self.inner.counters()
    }
    fn tokenizer(&self) -> Option<Arc<Tokenizer>> {
        None
    }
}

/// A real server on a loopback port over `script` behind the real template; stop it by
/// sending on the returned channel and awaiting the handle.
async fn serve(
    script: Script,
) -> (
    Arc<Templated>,
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let engine = Arc::new(Templated {
        inner: ScriptedEngine::new(script),
        tmpl: template(),
        prompts: Mutex::default(),
    });
    let (addr, stop_tx, server) = serve_engine(engine.clone()).await;
    (engine, addr, stop_tx, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_round_trip_over_http_matches_transformers_prompts() {
    let g = golden();
    let first = case(&g, "e2e_first");
    let second = case(&g, "e2e_second");
    // what the model writes for the call: the template's own rendering of it
    let call_text = call_blocks(second["expected"].as_str().unwrap()).concat();
    let answer = "It is 18 C and sunny in Paris.";
    let rule = |if_contains: Option<&str>, reply: &str| Rule {
        if_contains: if_contains.map(str::to_owned),
        reply: reply.to_owned(),
        repeat: false,
    };
    let script = Script {
        rules: vec![
            rule(Some("<tool_response|>"), answer),
            rule(None, &call_text),
        ],
        context_len: 1 << 20,
        ..Script::replying("")
    };
    let (engine, addr, stop_tx, server) = serve(script).await;
    let ask = |body: Json| tokio::task::spawn_blocking(move || post(addr, &body));
    let last_prompt = || engine.prompts.lock().unwrap().last().cloned().unwrap();
    let want_args = json!({"city": "Paris", "unit": "celsius"});

    // 1. the question with tools: the transformers prompt in, an OpenAI tool call out
    let req = json!({"model": "gemma-4", "messages": first["messages"], "tools": first["tools"]});
    let (status, body) = ask(req.clone()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_prompt(), first["expected"].as_str().unwrap());
    let resp: Json = serde_json::from_str(&body).unwrap();
    let choice = &resp["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    let msg = choice["message"].clone();
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{body}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args = calls[0]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Json>(args).unwrap(), want_args);
    assert!(msg["content"].as_str().unwrap_or("").is_empty(), "{body}");

    // 1b. the same, streamed
    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    let (status, sse) = ask(streamed).await.unwrap();
    assert_eq!(status, 200, "{sse}");
    assert_eq!(last_prompt(), first["expected"].as_str().unwrap());
    let (scalls, finish) = streamed_calls(&sse);
    assert_eq!((scalls.len(), finish.as_str()), (1, "tool_calls"), "{sse}");
    assert_eq!(scalls[0]["function"]["name"], "get_weather");
    let sargs = scalls[0]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Json>(sargs).unwrap(), want_args);
    assert!(scalls[0]["id"].as_str().unwrap().starts_with("call_"));

    // 2. the assistant message as returned (arguments a JSON string) and the tool's result:
    //    the transformers prompt of the next turn in, the answer out
    let mut messages = first["messages"].as_array().unwrap().clone();
    messages.push(msg.clone());
    messages
        .push(json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": "18 C and sunny"}));
    let req = json!({"model": "gemma-4", "messages": messages, "tools": first["tools"]});
    let (status, body) = ask(req).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_prompt(), second["expected"].as_str().unwrap());
    let resp: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(resp["choices"][0]["message"]["content"], answer, "{body}");
    assert_eq!(resp["choices"][0]["finish_reason"], "stop");
    assert!(resp["choices"][0]["message"]["tool_calls"].is_null());

    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// The JSON of every `data:` line of an SSE body (`[DONE]` left out).
fn sse_data(sse: &str) -> Vec<Json> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The concatenated string field `key` of `at(event)` over the events `keep` selects.
fn joined(evs: &[Json], keep: impl Fn(&Json) -> bool, at: impl Fn(&Json) -> &Json) -> String {
    evs.iter()
        .filter(|e| keep(e))
        .filter_map(|e| at(e).as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thought_channel_becomes_reasoning_content() {
    let g = golden();
    let thinking_on = case(&g, "thinking_on");
    let first = case(&g, "e2e_first");
    let second = case(&g, "e2e_second");
    let call_text = call_blocks(second["expected"].as_str().unwrap()).concat();
    let thought = "Need the weather tool.";
    let sky = "Because air scatters blue light more (Rayleigh).";
    let rule = |if_contains: &str, reply: String| Rule {
        if_contains: Some(if_contains.to_owned()).filter(|s| !s.is_empty()),
        reply,
        repeat: false,
    };
    let script = Script {
        rules: vec![
            rule(
                "<tool_response|>",
                "<|channel>thought\nThe tool says 18 C.\n<channel|>It is 18 C in Paris.".into(),
            ),
            rule(
                "Why is the sky blue?",
                format!("<|channel>thought\nLight scatters; blue\nmost.\n<channel|>\n\n{sky}"),
            ),
            rule("2+2?", "4, as <b>4</b>.".into()),
            rule(
                "",
                format!("<|channel>thought\n{thought}\n<channel|>{call_text}"),
            ),
        ],
        // an odd round length: markers fall across chunk boundaries
        round_chars: 3,
        context_len: 1 << 20,
        ..Script::replying("")
    };
    let (engine, addr, stop_tx, server) = serve(script).await;
    let ask = |path: &'static str, body: Json| {
        tokio::task::spawn_blocking(move || post_to(addr, path, &body))
    };
    let last_prompt = || engine.prompts.lock().unwrap().last().cloned().unwrap();
    let sky_thought = "Light scatters; blue\nmost.";

    // 1. thinking on: the transformers prompt in, the channel out as reasoning_content
    let on = json!({"enable_thinking": true});
    let req = json!({"model": "gemma-4", "messages": thinking_on["messages"],
                     "chat_template_kwargs": on});
    let (status, body) = ask("/v1/chat/completions", req.clone()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_prompt(), thinking_on["expected"].as_str().unwrap());
    let resp: Json = serde_json::from_str(&body).unwrap();
    let msg = &resp["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], sky_thought, "{body}");
    assert_eq!(msg["content"], sky, "{body}");

    // 1b. streamed: the deltas join to the same two channels
    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    let (status, sse) = ask("/v1/chat/completions", streamed).await.unwrap();
    assert_eq!(status, 200, "{sse}");
    let evs = sse_data(&sse);
    let delta = |key: &'static str| joined(&evs, |_| true, move |e| &e["choices"][0]["delta"][key]);
    assert_eq!(
        (delta("reasoning_content"), delta("content")),
        (sky_thought.to_owned(), sky.to_owned()),
        "{sse}"
    );

    // 1c. the Anthropic and Responses front ends split the same way, whole and streamed
    let anth = json!({"model": "gemma-4", "max_tokens": 200, "messages": thinking_on["messages"],
                      "thinking": {"type": "enabled", "budget_tokens": 1024}});
    let (status, body) = ask("/v1/messages", anth.clone()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_prompt(), thinking_on["expected"].as_str().unwrap());
    let v: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": sky_thought, "signature": ""},
               {"type": "text", "text": sky}]),
        "{body}"
    );
    let mut anth_s = anth;
    anth_s["stream"] = json!(true);
    let (_, sse) = ask("/v1/messages", anth_s).await.unwrap();
    let evs = sse_data(&sse);
    let of = |kind: &'static str, key: &'static str| {
        joined(
            &evs,
            move |e| e["delta"]["type"] == kind,
            move |e| &e["delta"][key],
        )
    };
    assert_eq!(of("thinking_delta", "thinking"), sky_thought, "{sse}");
    assert_eq!(of("text_delta", "text"), sky, "{sse}");
    let resp_req = json!({"model": "gemma-4", "input": thinking_on["messages"],
                          "reasoning": {"effort": "medium"}, "stream": true});
    let (status, sse) = ask("/v1/responses", resp_req).await.unwrap();
    assert_eq!(status, 200, "{sse}");
    assert_eq!(last_prompt(), thinking_on["expected"].as_str().unwrap());
    let evs = sse_data(&sse);
    let of = |kind: &'static str| joined(&evs, move |e| e["type"] == kind, |e| &e["delta"]);
    assert_eq!(of("response.reasoning_text.delta"), sky_thought, "{sse}");
    assert_eq!(of("response.output_text.delta"), sky, "{sse}");

    // 2. thinking on with tools: the thought, then the call
    let req = json!({"model": "gemma-4", "messages": first["messages"], "tools": first["tools"],
                     "chat_template_kwargs": on});
    let (status, body) = ask("/v1/chat/completions", req).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let resp: Json = serde_json::from_str(&body).unwrap();
    let msg = resp["choices"][0]["message"].clone();
    assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls", "{body}");
    assert_eq!(msg["reasoning_content"], thought, "{body}");
    assert!(msg["content"].as_str().unwrap_or("").is_empty(), "{body}");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_weather");

    // 3. the message sent back with its reasoning_content: the template puts the thought
    //    before the call (a tool-call turn after the last user message), as transformers does
    //    in the `reasoning_on_tool_turn` golden; the model's next thought is split off again
    let mut messages = first["messages"].as_array().unwrap().clone();
    messages.push(msg.clone());
    let id = msg["tool_calls"][0]["id"].clone();
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "18 C and sunny"}));
    let req = json!({"model": "gemma-4", "messages": messages, "tools": first["tools"],
                     "chat_template_kwargs": on, "stream": true});
    let (status, sse) = ask("/v1/chat/completions", req).await.unwrap();
    assert_eq!(status, 200, "{sse}");
    let turn = format!("<|turn>model\n<|channel>thought\n{thought}\n<channel|>{call_text}");
    let reference = case(&g, "reasoning_on_tool_turn")["expected"]
        .as_str()
        .unwrap();
    assert!(reference.contains(&format!("{turn}<|tool_response>")));
    let want = second["expected"]
        .as_str()
        .unwrap()
        .replace("<|turn>system\n", "<|turn>system\n<|think|>\n")
        .replace(&format!("<|turn>model\n{call_text}"), &turn);
    assert_eq!(last_prompt(), want);
    let evs = sse_data(&sse);
    let delta = |key: &'static str| joined(&evs, |_| true, move |e| &e["choices"][0]["delta"][key]);
    assert_eq!(delta("reasoning_content"), "The tool says 18 C.", "{sse}");
    assert_eq!(delta("content"), "It is 18 C in Paris.", "{sse}");

    // 4. thinking off: the prompt closes an empty channel; plain text stays content, untouched
    let off = case(&g, "thinking_off_explicit");
    let req = json!({"model": "gemma-4", "messages": off["messages"],
                     "chat_template_kwargs": {"enable_thinking": false}});
    let (status, body) = ask("/v1/chat/completions", req).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_prompt(), off["expected"].as_str().unwrap());
    let resp: Json = serde_json::from_str(&body).unwrap();
    let msg = &resp["choices"][0]["message"];
    assert!(msg["reasoning_content"].is_null(), "{body}");
    assert_eq!(msg["content"], "4, as <b>4</b>.", "{body}");

    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
