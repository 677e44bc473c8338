//! Chat templates: renders a model's Jinja `chat_template` with minijinja so that the
//! output matches transformers' `apply_chat_template(..., tokenize=False)` byte for byte
//! (pycompat string methods, trim/lstrip blocks, Python `json.dumps`-style `tojson`, floats
//! printed as Python does, Python's `sequence` test, `raise_exception`, `strftime_now`; see
//! chat_template_py.rs), after normalising OpenAI-style messages. Checked against
//! transformers on the Qwen3, Gemma 3 and Gemma 4 templates (tests/tests/chat_template.rs,
//! gemma4_template.rs).

use std::fmt::Write as _;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Serde, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value as Json};

pub use crate::chat_template_py::py_float_repr;
use crate::chat_template_py::{py_formatter, py_tojson_filter, strftime_utc};

const TEMPLATE_NAME: &str = "chat";
/// Context keys set by the renderer that `ChatOptions::kwargs` may not override.
const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// Errors from compiling or rendering a chat template.
#[derive(thiserror::Error, Debug)]
pub enum TemplateError {
    #[error("cannot compile chat template: {0}")]
    Compile(String),
    #[error("cannot render chat template: {0}")]
    Render(String),
    #[error("chat template raised: {0}")]
    Raised(String),
    #[error("invalid messages: {0}")]
    Messages(String),
    #[error("template kwarg `{0}` is reserved")]
    ReservedKwarg(String),
}

/// Options for one render, as in `apply_chat_template`.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    pub add_generation_prompt: bool,
    /// Tool schemas (a JSON list) or `None`.
    pub tools: Option<Json>,
    /// Extra template variables, e.g. `enable_thinking`.
    pub kwargs: Map<String, Json>,
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// The template renders content-part lists itself (Gemma 3/4: each text part trimmed,
    /// images as markers), so lists reach it as given, as in `apply_chat_template`.
    renders_parts: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("renders_parts", &self.renders_parts)
            .finish()
    }
}

/// Marker put in front of `raise_exception` messages to tell them apart from other errors.
const RAISED_MARKER: &str = "\u{1}raised:";

fn render_error(err: &Error) -> TemplateError {
    let detail = err.detail().unwrap_or_default();
    if let Some(msg) = detail.strip_prefix(RAISED_MARKER) {
        return TemplateError::Raised(msg.to_owned());
    }
    let mut msg = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        let _ = write!(msg, ": {s}");
        source = s.source();
    }
    TemplateError::Render(msg)
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are exposed to the template when set.
    pub fn new(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError::Compile(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(py_formatter);
        // Python's `sequence` test: anything with len() and [] (lists, dicts, strings,
        // undefined); minijinja's own takes lists only (Gemma 4 walks a dict as one)
        env.add_test("sequence", |v: &Value| {
            v.is_undefined()
                || matches!(
                    v.kind(),
                    ValueKind::Seq | ValueKind::Map | ValueKind::String
                )
        });
        env.add_filter("tojson", py_tojson_filter);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISED_MARKER}{msg}"),
            ))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            strftime_utc(&fmt, secs)
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| TemplateError::Compile(render_error(&e).to_string()))?;
        let mut t = ChatTemplate {
            env,
            source: source.to_owned(),
            bos_token,
            eos_token,
            renders_parts: false,
        };
        t.renders_parts = t.probe_parts();
        Ok(t)
    }

    /// Whether a user message given as one text part comes out with its text and without the
    /// part's own fields (`type`), i.e. the template walks content lists itself. Templates that
    /// read `content` as a string get all-text lists joined instead (OpenAI clients send lists).
    fn probe_parts(&self) -> bool {
        const NEEDLE: &str = "dspark-probe-7c1e";
        let messages = serde_json::json!([
            {"role": "user", "content": [{"type": "text", "text": NEEDLE}]}
        ]);
        self.render_raw(messages, &ChatOptions::default())
            .is_ok_and(|out| {
                out.contains(NEEDLE) && !out.contains("'type'") && !out.contains("\"type\"")
            })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (a JSON list of message objects) after `normalize_messages`.
    pub fn render(&self, messages: &Json, opts: &ChatOptions) -> Result<String, TemplateError> {
        let messages = normalize(messages, !self.renders_parts)?;
        self.render_raw(messages, opts)
    }

    fn render_raw(&self, messages: Json, opts: &ChatOptions) -> Result<String, TemplateError> {
        let mut ctx = Map::new();
        if let Some(bos) = &self.bos_token {
            ctx.insert("bos_token".into(), Json::String(bos.clone()));
        }
        if let Some(eos) = &self.eos_token {
            ctx.insert("eos_token".into(), Json::String(eos.clone()));
        }
        for (k, v) in &opts.kwargs {
            if RESERVED.contains(&k.as_str()) {
                return Err(TemplateError::ReservedKwarg(k.clone()));
            }
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), messages);
        ctx.insert("tools".into(), opts.tools.clone().unwrap_or(Json::Null));
        ctx.insert("documents".into(), Json::Null);
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(opts.add_generation_prompt),
        );
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| render_error(&e))?;
        tmpl.render(Value::from(Serde(&Json::Object(ctx))))
            .map_err(|e| render_error(&e))
    }
}

/// Makes OpenAI-style messages look like what transformers templates expect:
/// null/missing `content` becomes "", content given as a list of text parts is joined,
/// and tool-call `arguments` given as JSON strings are parsed into objects.
///
/// The arguments: OpenAI clients send them as a JSON string; templates iterate them as a
/// mapping (Qwen3's `tojson`, Gemma 4's `key:value` list), and a string would be copied
/// verbatim (Gemma 4: `call:f{{"a": 1}}`, a form the model never writes). transformers'
/// own OpenAI server (`transformers serve`) `json.loads` them before templating too, so a
/// conversation renders as the model wrote it. A string that is not a JSON object stays.
pub fn normalize_messages(messages: &Json) -> Result<Json, TemplateError> {
    normalize(messages, true)
}

/// `normalize_messages`; `join_parts: false` keeps content-part lists for templates that
/// render them ([`ChatTemplate`] probes this once).
fn normalize(messages: &Json, join_parts: bool) -> Result<Json, TemplateError> {
    let list = messages
        .as_array()
        .ok_or_else(|| TemplateError::Messages("expected a list of messages".into()))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, msg) in list.iter().enumerate() {
        let Json::Object(obj) = msg else {
            return Err(TemplateError::Messages(format!(
                "message {i} is not an object"
            )));
        };
        let mut obj = obj.clone();
        match obj.get("content") {
            None | Some(Json::Null) => {
                obj.insert("content".into(), Json::String(String::new()));
            }
            Some(Json::Array(parts)) if join_parts => {
                let texts: Option<Vec<&str>> = parts
                    .iter()
                    // a part without `type` is text, as the server's validator takes it
                    .map(|p| match p.get("type").and_then(Json::as_str) {
                        None | Some("text") => p.get("text").and_then(Json::as_str),
                        _ => None,
                    })
                    .collect();
                if let Some(texts) = texts {
                    obj.insert("content".into(), Json::String(texts.join("\n")));
                }
            }
            Some(Json::Array(parts)) => {
                // kept for the template; a part without `type` is text here too
                let parts = parts
                    .iter()
                    .map(|p| match p {
                        Json::Object(o) if !o.contains_key("type") && o.contains_key("text") => {
                            let mut o = o.clone();
                            o.insert("type".into(), Json::String("text".into()));
                            Json::Object(o)
                        }
                        other => other.clone(),
                    })
                    .collect();
                obj.insert("content".into(), Json::Array(parts));
            }
            Some(_) => {}
        }
        if let Some(Json::Array(calls)) = obj.get_mut("tool_calls") {
            for call in calls.iter_mut() {
                let target = match call.get_mut("function") {
                    Some(f @ Json::Object(_)) => f,
                    _ => call,
                };
                if let Some(args) = target.get_mut("arguments") {
                    if let Json::String(s) = args {
                        if let Ok(parsed @ Json::Object(_)) = serde_json::from_str::<Json>(s) {
                            *args = parsed;
                        }
                    }
                }
            }
        }
        out.push(Json::Object(obj));
    }
    Ok(Json::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render_one(src: &str, messages: Json) -> String {
        let t = ChatTemplate::new(src, None, None).unwrap();
        t.render(&messages, &ChatOptions::default()).unwrap()
    }

    fn tojson(expr: &str, value: Json) -> String {
        let t = ChatTemplate::new(&format!("{{{{ x | {expr} }}}}"), None, None).unwrap();
        let mut kwargs = Map::new();
        kwargs.insert("x".into(), value);
        let opts = ChatOptions {
            kwargs,
            ..Default::default()
        };
        t.render(&json!([]), &opts).unwrap()
    }

    #[test]
    fn tojson_like_python() {
        let v = json!({"b": "don't <a> & \"q\" \\ \n\u{1} é🎉", "a": [1, 2.5e-05, true, null], "e": {}, "l": []});
        assert_eq!(
            tojson("tojson", v.clone()),
            r#"{"b": "don't <a> & \"q\" \\ \n\u0001 é🎉", "a": [1, 2.5e-05, true, null], "e": {}, "l": []}"#
        );
        assert_eq!(
            tojson(
                "tojson(indent=2, sort_keys=true)",
                json!({"b": [1, {"c": 2}], "a": "x"})
            ),
            "{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    {\n      \"c\": 2\n    }\n  ]\n}"
        );
        assert_eq!(
            tojson("tojson(ensure_ascii=true)", json!("é🎉")),
            r#""\u00e9\ud83c\udf89""#
        );
        assert_eq!(
            tojson("tojson(separators=(',', ':'))", json!({"a": [1, 2]})),
            r#"{"a":[1,2]}"#
        );
    }

    #[test]
    fn pycompat_and_trim() {
        let src = "{% for m in messages %}\n  {% if m.content.startswith('x') %}{{ m.content.split('-')[1] | upper }}{% endif %}\n{% endfor %}";
        assert_eq!(
            render_one(src, json!([{"content": "x-yz"}, {"content": "q"}])),
            "YZ"
        );
    }

    #[test]
    fn python_floats_and_sequence_test() {
        let t = ChatTemplate::new(
            "{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ m is sequence }}|{{ 'ab' is sequence }}|{{ l is sequence }}|{{ u is sequence }}|{{ none is sequence }}|{{ 3 is sequence }}",
            None,
            None,
        )
        .unwrap();
        let mut kwargs = Map::new();
        for (k, v) in [
            ("a", json!(1e-05)),
            ("b", json!(2.0)),
            ("c", json!(1250.5)),
            ("d", json!(1e16)),
            ("m", json!({"x": 1})),
            ("l", json!([1])),
        ] {
            kwargs.insert(k.into(), v);
        }
        let opts = ChatOptions {
            kwargs,
            ..Default::default()
        };
        assert_eq!(
            t.render(&json!([]), &opts).unwrap(),
            "1e-05|2.0|1250.5|1e+16|True|True|True|True|False|False"
        );
    }

    #[test]
    fn content_parts_reach_templates_that_walk_them() {
        let walks = "{% for m in messages %}{% if m.content is string %}S:{{ m.content }}{% else %}{% for p in m.content %}[{{ p.text | trim }}]{% endfor %}{% endif %}{% endfor %}";
        let reads = "{% for m in messages %}{{ m.content }}{% endfor %}";
        let m =
            json!([{"role": "user", "content": [{"type": "text", "text": " a "}, {"text": "b"}]}]);
        assert_eq!(render_one(walks, m.clone()), "[a][b]");
        assert_eq!(render_one(reads, m), " a \nb");
    }

    #[test]
    fn raise_exception_is_typed() {
        let t =
            ChatTemplate::new("{{ raise_exception('roles must alternate') }}", None, None).unwrap();
        match t.render(&json!([]), &ChatOptions::default()) {
            Err(TemplateError::Raised(m)) => assert_eq!(m, "roles must alternate"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(ChatTemplate::new("{% if %}", None, None).is_err());
        let err = t.render(&json!({"a": 1}), &ChatOptions::default());
        assert!(matches!(err, Err(TemplateError::Messages(_))));
    }

    #[test]
    fn normalizes_messages() {
        let m = json!([
            {"role": "assistant", "content": null, "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                {"name": "g", "arguments": "not json"}
            ]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "tool", "content": [{"text": "c"}, {"type": "text", "text": "d"}]}
        ]);
        let n = normalize_messages(&m).unwrap();
        assert_eq!(n[0]["content"], json!(""));
        assert_eq!(
            n[0]["tool_calls"][0]["function"]["arguments"],
            json!({"x": 1})
        );
        assert_eq!(n[0]["tool_calls"][1]["arguments"], json!("not json"));
        assert_eq!(n[1]["content"], json!("a\nb"));
        assert_eq!(n[2]["content"], json!("c\nd"));
    }

    #[test]
    fn context_and_kwargs() {
        let t = ChatTemplate::new(
            "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ enable_thinking }}|{{ add_generation_prompt }}",
            Some("<s>".into()),
            Some("</s>".into()),
        )
        .unwrap();
        let mut kwargs = Map::new();
        kwargs.insert("enable_thinking".into(), json!(false));
        let opts = ChatOptions {
            add_generation_prompt: true,
            tools: None,
            kwargs,
        };
        assert_eq!(
            t.render(&json!([]), &opts).unwrap(),
            "<s>|</s>|True|False|True"
        );
        let mut bad = opts.clone();
        bad.kwargs.insert("messages".into(), json!([]));
        assert!(matches!(
            t.render(&json!([]), &bad),
            Err(TemplateError::ReservedKwarg(_))
        ));
    }
}
