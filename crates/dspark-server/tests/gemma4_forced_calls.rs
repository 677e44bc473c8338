//! A forced `tool_choice` (`required`, or a named function) on a real engine whose chat
//! template writes Gemma 4 calls: the baseline over a tiny random target whose logits cover
//! the Gemma 4 vocabulary, with the Gemma 4 tokenizer (vocab GGUF) and template of
//! scripts/fetch-artefacts.sh, behind a real server on a loopback port. Constrained decoding
//! must write one `<|tool_call>call:NAME{…}<tool_call|>` block whose arguments follow the
//! function's schema, returned as `tool_calls` with finish_reason `tool_calls` (whole and
//! streamed).

mod gemma4_common;

use std::sync::{Arc, Mutex};

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::load::LoadedModel;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::pipeline::Pipeline;
use dspark_engine::queue::CountersSnapshot;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_engine::testing::{random_target, RandomSpec};
use dspark_engine::tokenizer::{artefact_dir, Tokenizer};
use dspark_engine::worker::{EngineHandle, Event, EventFn, JobParams, ModelInfo, Prepared, Prompt};
use dspark_engine::EngineError;
use dspark_server::engine::Engine;
use gemma4_common::{post, serve_engine, streamed_calls, template};
use serde_json::{json, Value as Json};

/// The real engine (baseline) over a tiny random target whose logits cover the Gemma 4
/// vocabulary, with the Gemma 4 tokenizer and template; what it writes is recorded.
struct Recorded {
    inner: EngineHandle,
    text: Arc<Mutex<String>>,
}

impl Recorded {
    fn start() -> Self {
        let mut tok =
            Tokenizer::from_gguf_file(&artefact_dir().join("gemma4/ggml-vocab-gemma-4.gguf"))
                .unwrap();
        tok.set_chat_template(Some(template()));
        let tok = Arc::new(tok);
        let inner = EngineHandle::spawn::<_, EngineError, _>(
            move || {
                let (cfg, src) = random_target(&RandomSpec::tiny(tok.vocab_size()), 7);
                let lm = LoadedModel {
                    model: Transformer::load(&CandleBackend::cpu(), cfg, &src)?,
                    tokenizer: tok,
                    path: "random-gemma4-vocab".into(),
                    load_report: None,
                };
                let spec = SpecParams {
                    max_draft: 1,
                    confidence_threshold: 0.0,
                    lookup: false,
                };
                Pipeline::new(lm, Mode::Baseline, None, spec)
            },
            4,
        )
        .unwrap();
        Recorded {
            inner,
            text: Arc::default(),
        }
    }
}

impl Engine for Recorded {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError> {
        self.inner.prepare(prompt, max_new)
    }
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        mut on: EventFn,
    ) -> Result<(), EngineError> {
        let text = self.text.clone();
        text.lock().unwrap().clear();
        let record = move |ev: Event| {
            if let Event::Delta { text: t, .. } = &ev {
                text.lock().unwrap().push_str(t);
            }
            on(ev)
        };
        self.inner.submit(prompt, params, Box::new(record))
    }
    fn counters(&self) -> CountersSnapshot {
        self.inner.counters()
    }
    fn tokenizer(&self) -> Option<Arc<Tokenizer>> {
        Some(self.inner.tokenizer().clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_choice_writes_a_gemma4_call() {
    let engine = Arc::new(Recorded::start());
    let (addr, stop_tx, server) = serve_engine(engine.clone()).await;
    let ask = |body: Json| tokio::task::spawn_blocking(move || post(addr, &body));
    // bounded arguments (strict-mode style): a random model ends every value
    let weather = json!({"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 16},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer"}},
        "required": ["city", "unit"], "additionalProperties": false}});
    let time = json!({"name": "get_time", "parameters": {"type": "object", "properties": {},
        "additionalProperties": false}});
    let tools = json!([{"type": "function", "function": weather},
                       {"type": "function", "function": time}]);
    let messages = json!([{"role": "user", "content": "Weather in Paris?"}]);
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for (choice, stream) in [
        (json!("required"), false),
        (named.clone(), false),
        (named, true),
    ] {
        let req = json!({"model": "gemma-4", "messages": messages, "tools": tools,
                         "tool_choice": choice, "stream": stream, "temperature": 0,
                         "max_tokens": 120});
        let (status, body) = ask(req).await.unwrap();
        assert_eq!(status, 200, "{body}");
        // the model wrote one Gemma 4 call block and nothing else
        let raw = engine.text.lock().unwrap().clone();
        assert!(raw.starts_with("<|tool_call>call:"), "{raw:?}");
        assert!(raw.ends_with("}<tool_call|>"), "{raw:?}");
        let (calls, finish) = if stream {
            streamed_calls(&body)
        } else {
            let v: Json = serde_json::from_str(&body).unwrap();
            let msg = &v["choices"][0]["message"];
            assert!(msg["content"].as_str().unwrap_or("").is_empty(), "{body}");
            let calls = msg["tool_calls"].as_array().cloned().unwrap_or_default();
            (
                calls,
                v["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        };
        assert_eq!((calls.len(), finish.as_str()), (1, "tool_calls"), "{body}");
        let f = &calls[0]["function"];
        let args: Json = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
        if f["name"] == "get_time" && choice == "required" {
            assert_eq!(args, json!({}), "{raw}");
            continue;
        }
        assert_eq!(f["name"], "get_weather", "{body}");
        let city = args["city"].as_str().unwrap_or_else(|| panic!("{raw}"));
        assert!(city.chars().count() <= 16, "{raw}");
        assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
        assert!(args.get("days").is_none_or(Json::is_i64), "{raw}");
        assert!(args.as_object().unwrap().len() <= 3, "{raw}");
    }
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
