//! Request validation: raw JSON → [`ValidRequest`]. Each rule has its own `ValidationError`
//! naming the offending `param`. Unknown fields are ignored; nothing here panics on any input.

use dspark_engine::sampling::SamplingParams;
use dspark_engine::worker::Prompt;
use serde_json::{Map, Value as Json};

/// Server-wide settings that shape validation.
#[derive(Clone, Debug)]
pub struct Limits {
    /// `max_tokens` when the request gives none (capped by the context left).
    pub default_max_tokens: usize,
    /// Thinking default of the template (`--no-thinking` sets false).
    pub thinking: bool,
    pub max_stops: usize,
    /// Most messages in one chat request (`--max-messages`; OpenAI's own limit is 2048).
    pub max_messages: usize,
    /// Most bytes of text, summed over every message's content (`--max-content-bytes`).
    pub max_content_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            default_max_tokens: 2048,
            thinking: true,
            max_stops: 16,
            max_messages: 2048,
            max_content_bytes: 4 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ValidationError {
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    #[error("the body must be a JSON object")]
    NotObject,
    #[error("`{param}` is required")]
    Missing { param: String },
    #[error("`{param}` must be {expected}")]
    Type {
        param: String,
        expected: &'static str,
    },
    #[error("`{param}` must be {rule}")]
    Range { param: String, rule: &'static str },
    #[error("`{param}`: {msg}")]
    Unsupported { param: String, msg: &'static str },
    /// A grammar the engine refused (a JSON-schema feature llguidance does not support).
    #[error("`{param}`: {msg}")]
    Refused { param: String, msg: String },
    /// Over a server limit (`--max-messages`, `--max-content-bytes`).
    #[error("`{param}` has {got} {unit}; this server accepts at most {max}")]
    OverLimit {
        param: String,
        unit: &'static str,
        got: usize,
        max: usize,
        code: &'static str,
    },
}

impl ValidationError {
    pub fn param(&self) -> Option<&str> {
        match self {
            ValidationError::Json(_) | ValidationError::NotObject => None,
            ValidationError::Missing { param }
            | ValidationError::Type { param, .. }
            | ValidationError::Range { param, .. }
            | ValidationError::Unsupported { param, .. }
            | ValidationError::Refused { param, .. }
            | ValidationError::OverLimit { param, .. } => Some(param),
        }
    }
    pub fn code(&self) -> &'static str {
        match self {
            ValidationError::Json(_) | ValidationError::NotObject => "invalid_json",
            ValidationError::Missing { .. } => "missing_required_parameter",
            ValidationError::Type { .. } => "invalid_type",
            ValidationError::Range { .. } => "invalid_value",
            ValidationError::Unsupported { .. } => "unsupported_parameter",
            ValidationError::Refused { .. } => "invalid_value",
            ValidationError::OverLimit { code, .. } => code,
        }
    }
}

mod chat;
pub mod messages;
mod numbers;
pub mod outputs;
pub mod responses;
mod unsupported;

type VResult<T> = Result<T, ValidationError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// What the client wants done with tools.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolMode {
    /// No tools offered (or `tool_choice: "none"`): no parsing.
    Off,
    /// Tools offered to the template and tool calls parsed from the output.
    On,
}

/// A request that passed validation.
#[derive(Clone, Debug)]
pub struct ValidRequest {
    pub kind: Kind,
    /// Echoed back as `model`.
    pub model: Option<String>,
    pub prompt: Prompt,
    /// `None`: the server default, capped by the context left.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub tools: ToolMode,
    /// Choices per prompt (`n`); choice `i` of a seeded request uses seed `seed + i`.
    pub n: usize,
    /// Completions only: the prompts after `prompt` when a list was sent.
    pub more_prompts: Vec<Prompt>,
    /// The grammar the output must match (`response_format`, forced `tool_choice`).
    pub grammar: Option<crate::structured::Structured>,
}

/// Parses the body bytes of a chat or completions request.
pub fn parse_body(bytes: &[u8], kind: Kind, limits: &Limits) -> VResult<ValidRequest> {
    let v: Json =
        serde_json::from_slice(bytes).map_err(|e| ValidationError::Json(e.to_string()))?;
    let obj = v.as_object().ok_or(ValidationError::NotObject)?;
    validate(obj, kind, limits)
}

fn ty(param: &str, expected: &'static str) -> ValidationError {
    ValidationError::Type {
        param: param.into(),
        expected,
    }
}

/// A present, non-null field.
fn field<'a>(o: &'a Map<String, Json>, k: &str) -> Option<&'a Json> {
    o.get(k).filter(|v| !v.is_null())
}

fn opt_str(o: &Map<String, Json>, k: &str) -> VResult<Option<String>> {
    field(o, k)
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| ty(k, "a string"))
        })
        .transpose()
}

fn opt_bool(o: &Map<String, Json>, k: &str) -> VResult<Option<bool>> {
    field(o, k)
        .map(|v| v.as_bool().ok_or_else(|| ty(k, "a boolean")))
        .transpose()
}

fn opt_f32(
    o: &Map<String, Json>,
    k: &str,
    lo: f64,
    hi: f64,
    rule: &'static str,
) -> VResult<Option<f32>> {
    let Some(v) = field(o, k) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| ty(k, "a number"))?;
    if !(lo..=hi).contains(&x) {
        return Err(ValidationError::Range {
            param: k.into(),
            rule,
        });
    }
    Ok(Some(x as f32))
}

fn opt_uint(o: &Map<String, Json>, k: &str) -> VResult<Option<u64>> {
    let Some(v) = field(o, k) else {
        return Ok(None);
    };
    match numbers::non_negative(v) {
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(())) => Err(ValidationError::Range {
            param: k.into(),
            rule: "a non-negative integer",
        }),
        None => Err(ty(k, "an integer")),
    }
}

pub fn validate(o: &Map<String, Json>, kind: Kind, limits: &Limits) -> VResult<ValidRequest> {
    unsupported::check(o, kind)?;
    let model = opt_str(o, "model")?;
    let mut max_tokens = None;
    for k in ["max_completion_tokens", "max_tokens"] {
        if let Some(n) = opt_uint(o, k)? {
            if n == 0 {
                return Err(ValidationError::Range {
                    param: k.into(),
                    rule: "at least 1",
                });
            }
            // far beyond any context, and small enough that `prompt + max` cannot overflow
            max_tokens = Some(n.min(u64::from(u32::MAX)) as usize);
        }
    }
    let temperature = opt_f32(o, "temperature", 0.0, 2.0, "between 0 and 2")?.unwrap_or(0.0);
    let top_p = numbers::top_p(o)?.unwrap_or(1.0);
    let top_k = opt_uint(o, "top_k")?.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let seed = match field(o, "seed") {
        None => None,
        Some(v) => Some(numbers::seed(v).ok_or_else(|| ty("seed", "an integer"))?),
    };
    let n = outputs::n(o)?;
    let stop = parse_stop(o, limits)?;
    let stream = opt_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match field(o, "stream_options") {
        None => false,
        Some(Json::Object(so)) => opt_bool(so, "include_usage")
            .map_err(|_| ty("stream_options.include_usage", "a boolean"))?
            .unwrap_or(false),
        Some(_) => return Err(ty("stream_options", "an object")),
    };
    let sampling = SamplingParams {
        temperature,
        top_p,
        top_k,
        seed,
        min_p: opt_f32(o, "min_p", 0.0, 1.0, "between 0 and 1")?.unwrap_or(0.0),
        presence_penalty: opt_f32(o, "presence_penalty", -2.0, 2.0, "between -2 and 2")?
            .unwrap_or(0.0),
        frequency_penalty: opt_f32(o, "frequency_penalty", -2.0, 2.0, "between -2 and 2")?
            .unwrap_or(0.0),
        repetition_penalty: opt_f32(
            o,
            "repetition_penalty",
            numbers::MIN_REPETITION_PENALTY,
            10.0,
            "between 0.01 and 10",
        )?
        .unwrap_or(1.0),
        logit_bias: outputs::logit_bias(o)?,
        logprobs: outputs::logprobs(o, kind == Kind::Chat)?,
        ..Default::default()
    };
    let grammar = crate::structured::request_grammar(o, kind)?;
    let mut more_prompts = Vec::new();
    let (prompt, tools) = match kind {
        Kind::Chat => chat::chat_prompt(o, limits)?,
        Kind::Completion => {
            let mut texts = outputs::completion_prompts(o)?.into_iter();
            let first = texts.next().unwrap_or_default();
            for t in texts {
                more_prompts.push(Prompt::Text(completion_prompt(t, limits)?));
            }
            (
                Prompt::Text(completion_prompt(first, limits)?),
                ToolMode::Off,
            )
        }
    };
    Ok(ValidRequest {
        kind,
        model,
        prompt,
        max_tokens,
        sampling,
        stop,
        stream,
        include_usage,
        tools,
        n,
        more_prompts,
        grammar,
    })
}

fn parse_stop(o: &Map<String, Json>, limits: &Limits) -> VResult<Vec<String>> {
    let stops = match field(o, "stop") {
        None => vec![],
        Some(Json::String(s)) => vec![s.clone()],
        Some(Json::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ty("stop", "a string or a list of strings"))
            })
            .collect::<VResult<_>>()?,
        Some(_) => return Err(ty("stop", "a string or a list of strings")),
    };
    if stops.len() > limits.max_stops {
        return Err(ValidationError::Range {
            param: "stop".into(),
            rule: "at most 16 strings",
        });
    }
    Ok(stops)
}

/// One completions prompt (of the list [`outputs::completion_prompts`] parsed), checked.
fn completion_prompt(p: String, limits: &Limits) -> VResult<String> {
    if p.is_empty() {
        return Err(ValidationError::Range {
            param: "prompt".into(),
            rule: "a non-empty string",
        });
    }
    if p.len() > limits.max_content_bytes {
        return Err(ValidationError::OverLimit {
            param: "prompt".into(),
            unit: "bytes",
            got: p.len(),
            max: limits.max_content_bytes,
            code: "string_above_max_length",
        });
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Json, kind: Kind) -> VResult<ValidRequest> {
        parse_body(body.to_string().as_bytes(), kind, &Limits::default())
    }

    fn err_param(body: Json) -> (String, &'static str) {
        let e = check(body, Kind::Chat).unwrap_err();
        (e.param().unwrap_or("").to_owned(), e.code())
    }

    #[test]
    fn minimal_chat_defaults_greedy() {
        let r = check(
            json!({"messages": [{"role": "user", "content": "hi"}], "whatever": 1}),
            Kind::Chat,
        )
        .unwrap();
        assert!(r.sampling.is_greedy());
        assert_eq!(
            (r.max_tokens, r.stream, r.tools.clone()),
            (None, false, ToolMode::Off)
        );
    }

    #[test]
    fn wrong_types_name_the_param() {
        let m = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (
                json!({"messages": m, "temperature": "hot"}),
                "temperature",
                "invalid_type",
            ),
            (
                json!({"messages": m, "temperature": 3}),
                "temperature",
                "invalid_value",
            ),
            (
                json!({"messages": m, "max_tokens": -1}),
                "max_tokens",
                "invalid_value",
            ),
            (
                json!({"messages": m, "max_tokens": 1.5}),
                "max_tokens",
                "invalid_type",
            ),
            (json!({"messages": m, "stop": [1]}), "stop", "invalid_type"),
            (
                json!({"messages": m, "stream": "yes"}),
                "stream",
                "invalid_type",
            ),
            (json!({"messages": m, "n": 0}), "n", "invalid_value"),
            (json!({"messages": "hi"}), "messages", "invalid_type"),
            (json!({"messages": []}), "messages", "invalid_value"),
            (
                json!({"messages": [{"content": "x"}]}),
                "messages[0].role",
                "missing_required_parameter",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
                "invalid_type",
            ),
            (json!({"messages": m, "tools": {}}), "tools", "invalid_type"),
            (
                json!({"messages": m, "stream_options": {"include_usage": 1}}),
                "stream_options.include_usage",
                "invalid_type",
            ),
            (
                json!({"messages": m, "enable_thinking": "no"}),
                "enable_thinking",
                "invalid_type",
            ),
        ];
        for (body, param, code) in cases {
            assert_eq!(err_param(body.clone()), (param.to_owned(), code), "{body}");
        }
    }

    #[test]
    fn penalties_and_min_p_are_parsed_and_bounded() {
        let m = json!([{"role": "user", "content": "hi"}]);
        let r = check(
            json!({"messages": m, "presence_penalty": 0.5, "frequency_penalty": -1,
                   "repetition_penalty": 1.2, "min_p": 0.05}),
            Kind::Chat,
        )
        .unwrap();
        let s = r.sampling;
        assert_eq!(
            (
                s.presence_penalty,
                s.frequency_penalty,
                s.repetition_penalty,
                s.min_p
            ),
            (0.5, -1.0, 1.2, 0.05)
        );
        let d = check(json!({"messages": m}), Kind::Chat).unwrap().sampling;
        assert_eq!(
            (d.presence_penalty, d.repetition_penalty, d.min_p),
            (0.0, 1.0, 0.0)
        );
        for (k, v) in [
            ("presence_penalty", json!(2.5)),
            ("frequency_penalty", json!(-3)),
            ("repetition_penalty", json!(0)),
            ("min_p", json!(1.5)),
        ] {
            let mut b = json!({"messages": m});
            b[k] = v;
            assert_eq!(err_param(b), (k.to_owned(), "invalid_value"));
        }
    }

    #[test]
    fn response_format_becomes_a_grammar() {
        use crate::structured::{Output, Structured};
        use dspark_engine::constrain::Grammar;
        let m = json!([{"role": "user", "content": "hi"}]);
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        for (v, g) in [
            (json!({"type": "json_object"}), Grammar::JsonObject),
            (
                json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}),
                Grammar::JsonSchema(schema.clone()),
            ),
        ] {
            for (body, kind) in [
                (json!({"messages": m, "response_format": v}), Kind::Chat),
                (
                    json!({"prompt": "a", "response_format": v}),
                    Kind::Completion,
                ),
            ] {
                let r = check(body, kind).unwrap();
                let want = Structured {
                    param: "response_format",
                    output: Output::Grammar(g.clone()),
                };
                assert_eq!(r.grammar, Some(want));
            }
        }
        // the neutral values SDKs send by default pass, with no grammar
        let r = check(
            json!({"messages": m, "logit_bias": {}, "logprobs": false, "top_logprobs": 0,
                   "response_format": {"type": "text"}}),
            Kind::Chat,
        )
        .unwrap();
        assert_eq!(r.grammar, None);
        check(json!({"prompt": "a", "logprobs": 0}), Kind::Completion).unwrap();
        assert_eq!(
            err_param(json!({"messages": m, "response_format": {"type": "yaml"}})),
            ("response_format.type".to_owned(), "invalid_type")
        );
    }

    #[test]
    fn content_parts_tools_and_thinking_flags() {
        let r = check(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
                   "tool_choice": {"type": "function", "function": {"name": "g"}},
                   "chat_template_kwargs": {"enable_thinking": true}, "enable_thinking": false}),
            Kind::Chat,
        )
        .unwrap();
        assert_eq!(r.tools, ToolMode::On);
        let Prompt::Chat { options, .. } = r.prompt else {
            panic!()
        };
        assert_eq!(options.tools.unwrap().as_array().unwrap().len(), 1);
        assert_eq!(options.kwargs["enable_thinking"], json!(false));
    }

    #[test]
    fn tool_choice_none_turns_tools_off() {
        let r = check(
            json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}),
            Kind::Chat,
        )
        .unwrap();
        assert_eq!(r.tools, ToolMode::Off);
    }

    #[test]
    fn completion_prompt_forms() {
        assert!(check(json!({"prompt": ["a"]}), Kind::Completion).is_ok());
        assert_eq!(
            check(json!({"prompt": 3}), Kind::Completion)
                .unwrap_err()
                .param(),
            Some("prompt")
        );
        let two = check(json!({"prompt": ["a", "b"], "n": 2}), Kind::Completion).unwrap();
        assert_eq!((two.more_prompts.len(), two.n), (1, 2));
        assert_eq!(
            check(json!({"prompt": [[1, 2]]}), Kind::Completion)
                .unwrap_err()
                .code(),
            "unsupported_parameter"
        );
        assert_eq!(
            check(json!({}), Kind::Completion).unwrap_err().code(),
            "missing_required_parameter"
        );
    }

    #[test]
    fn message_count_and_content_size_are_limited() {
        let limits = Limits {
            max_messages: 3,
            max_content_bytes: 10,
            ..Limits::default()
        };
        let msg = |c: &str| json!({"role": "user", "content": c});
        let run = |b: Json, k: Kind| validate(b.as_object().unwrap(), k, &limits);
        assert!(run(
            json!({"messages": [msg("a"), msg("b"), msg("c")]}),
            Kind::Chat
        )
        .is_ok());
        let e = run(
            json!({"messages": [msg("a"), msg("b"), msg("c"), msg("d")]}),
            Kind::Chat,
        )
        .unwrap_err();
        assert_eq!(
            (e.param(), e.code()),
            (Some("messages"), "array_above_max_length")
        );
        assert!(e.to_string().contains("4 messages") && e.to_string().contains("at most 3"));
        // 10 bytes pass; 11 bytes, split over a string and a text part, do not
        assert!(run(
            json!({"messages": [msg("12345"), msg("67890")]}),
            Kind::Chat
        )
        .is_ok());
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "678901"}]});
        let e = run(json!({"messages": [msg("12345"), parts]}), Kind::Chat).unwrap_err();
        assert_eq!(
            (e.param(), e.code()),
            (Some("messages"), "string_above_max_length")
        );
        assert!(run(json!({"prompt": "0123456789"}), Kind::Completion).is_ok());
        let e = run(json!({"prompt": "0123456789a"}), Kind::Completion).unwrap_err();
        assert_eq!(
            (e.param(), e.code()),
            (Some("prompt"), "string_above_max_length")
        );
    }

    #[test]
    fn malformed_bodies_are_json_errors() {
        for b in [&b"{"[..], b"\xff\xfe", b"[]", b"null"] {
            assert!(parse_body(b, Kind::Chat, &Limits::default()).is_err());
        }
        let deep = "[".repeat(100_000);
        assert_eq!(
            parse_body(deep.as_bytes(), Kind::Chat, &Limits::default())
                .unwrap_err()
                .code(),
            "invalid_json"
        );
    }
}
