//! Anthropic `POST /v1/messages` validation: `system`, `messages` with string or block content
//! (text, tool_use, tool_result, thinking), `max_tokens` (required), `stop_sequences`,
//! `tools` (`input_schema`), `tool_choice` and `thinking` are checked and rewritten into the
//! equivalent chat body, which then goes through the chat validation: one internal request
//! and one generation path for every route.

use serde_json::{json, Map, Value as Json};

use super::{field, opt_uint, ty, Kind, Limits, VResult, ValidRequest, ValidationError};

fn unsupported(param: &str, msg: &'static str) -> ValidationError {
    ValidationError::Unsupported {
        param: param.into(),
        msg,
    }
}

/// A validated Messages request.
#[derive(Clone, Debug)]
pub struct MessagesRequest {
    pub req: ValidRequest,
    pub stop_sequences: Vec<String>,
}

/// Parses a Messages body (or a count_tokens body when `count_only`: `max_tokens` optional).
pub fn parse_messages(bytes: &[u8], limits: &Limits, count_only: bool) -> VResult<MessagesRequest> {
    let v: Json =
        serde_json::from_slice(bytes).map_err(|e| ValidationError::Json(e.to_string()))?;
    let Json::Object(o) = v else {
        return Err(ValidationError::NotObject);
    };
    let chat = to_chat(&o, count_only)?;
    let req = super::validate(&chat, Kind::Chat, limits).map_err(rename)?;
    Ok(MessagesRequest {
        stop_sequences: req.stop.clone(),
        req,
    })
}

/// Chat parameter names in errors → the Messages names they came from.
fn rename(e: ValidationError) -> ValidationError {
    let map = |p: String| -> String {
        if let Some(rest) = p.strip_prefix("response_format") {
            return format!("output_config.format{rest}");
        }
        match p.strip_prefix("stop") {
            Some(rest) if !rest.starts_with('_') => format!("stop_sequences{rest}"),
            _ => p,
        }
    };
    match e {
        ValidationError::Type { param, expected } => ValidationError::Type {
            param: map(param),
            expected,
        },
        ValidationError::Range { param, rule } => ValidationError::Range {
            param: map(param),
            rule,
        },
        ValidationError::Unsupported { param, msg } => ValidationError::Unsupported {
            param: map(param),
            msg,
        },
        other => other,
    }
}

/// The chat body equivalent to a Messages body.
pub fn to_chat(o: &Map<String, Json>, count_only: bool) -> VResult<Map<String, Json>> {
    let mut chat = Map::new();
    for k in ["model", "temperature", "top_p", "top_k", "stream"] {
        if let Some(v) = field(o, k) {
            chat.insert(k.into(), v.clone());
        }
    }
    match opt_uint(o, "max_tokens")? {
        Some(n) => {
            chat.insert("max_tokens".into(), json!(n));
        }
        None if count_only => {}
        None => {
            return Err(ValidationError::Missing {
                param: "max_tokens".into(),
            })
        }
    }
    if let Some(s) = field(o, "stop_sequences") {
        if !s.is_array() {
            return Err(ty("stop_sequences", "a list of strings"));
        }
        chat.insert("stop".into(), s.clone());
    }
    if let Some(m) = field(o, "mcp_servers").and_then(Json::as_array) {
        if !m.is_empty() {
            return Err(unsupported("mcp_servers", "MCP servers are not supported"));
        }
    }
    match field(o, "output_config") {
        None => {}
        // `effort` has no equivalent here and is ignored; a `format` (structured output)
        // gets the chat route's `response_format` treatment
        Some(Json::Object(c)) => match field(c, "format") {
            None => {}
            Some(Json::Object(f)) => {
                let schema = f.get("schema").cloned().unwrap_or(Json::Null);
                let rf = match f.get("type").and_then(Json::as_str) {
                    Some("json_schema") => json!({"type": "json_schema",
                        "json_schema": {"name": "output", "schema": schema, "strict": true}}),
                    _ => return Err(ty("output_config.format.type", "\"json_schema\"")),
                };
                chat.insert("response_format".into(), rf);
            }
            Some(_) => return Err(ty("output_config.format", "an object")),
        },
        Some(_) => return Err(ty("output_config", "an object")),
    }
    let mut messages = Vec::new();
    match field(o, "system") {
        None => {}
        Some(Json::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Json::Array(blocks)) => {
            let text = text_blocks(blocks, "system")?;
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(_) => return Err(ty("system", "a string or a list of text blocks")),
    }
    convo(o, &mut messages)?;
    chat.insert("messages".into(), Json::Array(messages));
    if let Some(t) = field(o, "tools") {
        chat.insert("tools".into(), tools(t)?);
    }
    if let Some(c) = field(o, "tool_choice") {
        chat.insert("tool_choice".into(), tool_choice(c)?);
    }
    match field(o, "thinking") {
        None => {}
        Some(Json::Object(t)) => match t.get("type").and_then(Json::as_str) {
            Some("enabled") => {
                match t.get("budget_tokens") {
                    Some(b) if matches!(super::numbers::non_negative(b), Some(Ok(_))) => {}
                    _ => {
                        return Err(ValidationError::Missing {
                            param: "thinking.budget_tokens".into(),
                        })
                    }
                }
                chat.insert("enable_thinking".into(), Json::Bool(true));
            }
            Some("adaptive") => {
                chat.insert("enable_thinking".into(), Json::Bool(true));
            }
            Some("disabled") => {
                chat.insert("enable_thinking".into(), Json::Bool(false));
            }
            _ => {
                return Err(ty(
                    "thinking.type",
                    "\"enabled\", \"adaptive\" or \"disabled\"",
                ))
            }
        },
        Some(_) => return Err(ty("thinking", "an object")),
    }
    Ok(chat)
}

/// Text of a list of `{type: "text", text}` blocks, joined with newlines.
fn text_blocks(blocks: &[Json], param: &str) -> VResult<String> {
    let mut texts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        match (
            b.get("type").and_then(Json::as_str),
            b.get("text").and_then(Json::as_str),
        ) {
            (Some("text"), Some(t)) => texts.push(t),
            _ => {
                return Err(unsupported(
                    &format!("{param}[{j}]"),
                    "only text blocks are supported here",
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

/// `messages` → chat messages appended to `out`.
fn convo(o: &Map<String, Json>, out: &mut Vec<Json>) -> VResult<()> {
    let msgs = match field(o, "messages") {
        None => {
            return Err(ValidationError::Missing {
                param: "messages".into(),
            })
        }
        Some(Json::Array(a)) if a.is_empty() => {
            return Err(ValidationError::Range {
                param: "messages".into(),
                rule: "a non-empty list",
            })
        }
        Some(Json::Array(a)) => a,
        Some(_) => return Err(ty("messages", "a list of message objects")),
    };
    for (i, m) in msgs.iter().enumerate() {
        let p = |s: &str| format!("messages[{i}]{s}");
        let m = m.as_object().ok_or_else(|| ValidationError::Type {
            param: p(""),
            expected: "an object",
        })?;
        let role = match m.get("role").and_then(Json::as_str) {
            Some(r @ ("user" | "assistant")) => r,
            Some(_) => {
                return Err(ValidationError::Range {
                    param: p(".role"),
                    rule: "\"user\" or \"assistant\"",
                })
            }
            None => return Err(ValidationError::Missing { param: p(".role") }),
        };
        match m.get("content") {
            Some(Json::String(s)) => out.push(json!({"role": role, "content": s})),
            Some(Json::Array(blocks)) => blocks_to_chat(role, blocks, &p(".content"), out)?,
            None => {
                return Err(ValidationError::Missing {
                    param: p(".content"),
                })
            }
            Some(_) => {
                return Err(ValidationError::Type {
                    param: p(".content"),
                    expected: "a string or a list of content blocks",
                })
            }
        }
        if i + 1 == msgs.len() && role == "assistant" {
            return Err(unsupported(
                &p(""),
                "a final assistant message (prefill) is not supported; end with a user turn",
            ));
        }
    }
    Ok(())
}

/// One message's blocks → chat messages: tool results become `tool` messages (first, as
/// Anthropic requires them first), text joins into the content, tool_use blocks become
/// `tool_calls`, thinking becomes `reasoning_content`.
fn blocks_to_chat(role: &str, blocks: &[Json], param: &str, out: &mut Vec<Json>) -> VResult<()> {
    let mut texts: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    let mut thinking = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let bp = |s: &str| format!("{param}[{j}]{s}");
        let typ = b.get("type").and_then(Json::as_str);
        match (role, typ) {
            (_, Some("text")) => match b.get("text") {
                Some(Json::String(t)) => texts.push(t),
                _ => return Err(ValidationError::Missing { param: bp(".text") }),
            },
            ("assistant", Some("tool_use")) => {
                let id = b.get("id").and_then(Json::as_str);
                let name = b.get("name").and_then(Json::as_str);
                let (Some(id), Some(name)) = (id, name) else {
                    return Err(ValidationError::Missing {
                        param: bp(".id/.name"),
                    });
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("assistant", Some("thinking")) => {
                if let Some(t) = b.get("thinking").and_then(Json::as_str) {
                    thinking.push_str(t);
                }
            }
            ("assistant", Some("redacted_thinking")) => {}
            ("user", Some("tool_result")) => {
                let Some(id) = b.get("tool_use_id").and_then(Json::as_str) else {
                    return Err(ValidationError::Missing {
                        param: bp(".tool_use_id"),
                    });
                };
                let content = match b.get("content") {
                    None | Some(Json::Null) => String::new(),
                    Some(Json::String(s)) => s.clone(),
                    Some(Json::Array(parts)) => text_blocks(parts, &bp(".content"))?,
                    Some(_) => {
                        return Err(ValidationError::Type {
                            param: bp(".content"),
                            expected: "a string or a list of text blocks",
                        })
                    }
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            _ => {
                return Err(unsupported(
                    &bp(".type"),
                    "supported blocks: text; tool_use and thinking (assistant); tool_result (user)",
                ))
            }
        }
    }
    if texts.is_empty() && calls.is_empty() && thinking.is_empty() {
        return Ok(());
    }
    let mut msg = Map::new();
    msg.insert("role".into(), json!(role));
    let content = texts.join("\n");
    msg.insert(
        "content".into(),
        if content.is_empty() && !calls.is_empty() {
            Json::Null
        } else {
            json!(content)
        },
    );
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), Json::Array(calls));
    }
    if !thinking.is_empty() {
        msg.insert("reasoning_content".into(), json!(thinking));
    }
    out.push(Json::Object(msg));
    Ok(())
}

/// Anthropic tools (`{name, description, input_schema}`) → chat tools.
fn tools(t: &Json) -> VResult<Json> {
    let list = t
        .as_array()
        .ok_or_else(|| ty("tools", "a list of tool objects"))?;
    let mut out = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        match tool.get("type").and_then(Json::as_str) {
            None | Some("custom") => {}
            Some(_) => {
                return Err(unsupported(
                    &format!("tools[{i}].type"),
                    "only custom (client) tools are supported, no server tools",
                ))
            }
        }
        let Some(name) = tool.get("name").and_then(Json::as_str) else {
            return Err(ValidationError::Missing {
                param: format!("tools[{i}].name"),
            });
        };
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        if let Some(d) = tool.get("description").filter(|v| !v.is_null()) {
            f.insert("description".into(), d.clone());
        }
        match tool.get("input_schema") {
            Some(s @ Json::Object(_)) => {
                f.insert("parameters".into(), s.clone());
            }
            None => {
                return Err(ValidationError::Missing {
                    param: format!("tools[{i}].input_schema"),
                })
            }
            Some(_) => return Err(ty(&format!("tools[{i}].input_schema"), "an object")),
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Json::Array(out))
}

/// `{type: auto|any|tool|none, name}` → chat's `tool_choice`.
fn tool_choice(c: &Json) -> VResult<Json> {
    let m = c
        .as_object()
        .ok_or_else(|| ty("tool_choice", "an object"))?;
    match m.get("type").and_then(Json::as_str) {
        Some("auto") => Ok(json!("auto")),
        Some("any") => Ok(json!("required")),
        Some("none") => Ok(json!("none")),
        Some("tool") => match m.get("name").and_then(Json::as_str) {
            Some(n) => Ok(json!({"type": "function", "function": {"name": n}})),
            None => Err(ValidationError::Missing {
                param: "tool_choice.name".into(),
            }),
        },
        _ => Err(ty(
            "tool_choice.type",
            "\"auto\", \"any\", \"tool\" or \"none\"",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Json) -> VResult<MessagesRequest> {
        parse_messages(body.to_string().as_bytes(), &Limits::default(), false)
    }

    fn chat(body: Json) -> Map<String, Json> {
        to_chat(body.as_object().unwrap(), false).unwrap()
    }

    #[test]
    fn system_blocks_and_tool_round_trip_become_chat_turns() {
        let c = chat(
            json!({"max_tokens": 5, "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "thanks"}]}
            ]}),
        );
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "a\nb"}));
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["reasoning_content"], "hmm");
        assert_eq!(m[2]["tool_calls"][0]["id"], "toolu_1");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "thanks"}));
        assert_eq!(c["max_tokens"], 5);
    }

    #[test]
    fn tools_choice_thinking_and_stops_map_to_chat() {
        let r = parse(json!({"max_tokens": 9, "messages": [{"role": "user", "content": "x"}],
            "stop_sequences": ["END"], "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "f", "input_schema": {"type": "object"}}, {"name": "g", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "g"}}))
        .unwrap();
        assert_eq!(r.stop_sequences, vec!["END".to_owned()]);
        let dspark_engine::worker::Prompt::Chat { options, .. } = &r.req.prompt else {
            panic!()
        };
        assert_eq!(options.kwargs["enable_thinking"], json!(true));
        let tools = options.tools.as_ref().unwrap();
        assert_eq!(tools[0]["function"]["name"], "g");
        assert_eq!(
            tools[0]["function"]["parameters"],
            json!({"type": "object"})
        );
        let c = chat(
            json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}}),
        );
        assert_eq!(
            c["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
    }

    #[test]
    fn errors_name_the_messages_param() {
        let u = json!([{"role": "user", "content": "x"}]);
        let cases = [
            (
                json!({"messages": u}),
                "max_tokens",
                "missing_required_parameter",
            ),
            (
                json!({"max_tokens": 0, "messages": u}),
                "max_tokens",
                "invalid_value",
            ),
            (
                json!({"max_tokens": 5}),
                "messages",
                "missing_required_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
                "invalid_value",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                "messages[0].content[0].type",
                "unsupported_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "pre"}]}),
                "messages[1]",
                "unsupported_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": u, "stop_sequences": [1]}),
                "stop_sequences",
                "invalid_type",
            ),
            (
                json!({"max_tokens": 5, "messages": u, "tools": [{"name": "f"}]}),
                "tools[0].input_schema",
                "missing_required_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": u, "tools": [{"type": "web_search_20250305", "name": "w"}]}),
                "tools[0].type",
                "unsupported_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": u, "thinking": {"type": "enabled"}}),
                "thinking.budget_tokens",
                "missing_required_parameter",
            ),
            (
                json!({"max_tokens": 5, "messages": u, "temperature": "hot"}),
                "temperature",
                "invalid_type",
            ),
        ];
        for (body, param, code) in cases {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!((e.param().unwrap_or(""), e.code()), (param, code), "{body}");
        }
        // count_tokens bodies need no max_tokens
        parse_messages(
            json!({"messages": u}).to_string().as_bytes(),
            &Limits::default(),
            true,
        )
        .unwrap();
    }
}
