//! `POST /v1/responses` validation: an OpenAI Responses body (`input` as text or items,
//! `instructions`, function tools, `reasoning`, `max_output_tokens`) is checked and rewritten
//! into the equivalent chat body, which then goes through the chat validation, so both
//! routes share one internal request and one generation path.

use serde_json::{json, Map, Value as Json};

use super::{field, opt_uint, ty, Kind, Limits, VResult, ValidRequest, ValidationError};

fn unsupported(param: &str, msg: &'static str) -> ValidationError {
    ValidationError::Unsupported {
        param: param.into(),
        msg,
    }
}

/// Parses a Responses body: the internal request, and the body itself (fields such as
/// `instructions` and `tools` are echoed in the response object).
pub fn parse_responses(
    bytes: &[u8],
    limits: &Limits,
) -> VResult<(ValidRequest, Map<String, Json>)> {
    let v: Json =
        serde_json::from_slice(bytes).map_err(|e| ValidationError::Json(e.to_string()))?;
    let Json::Object(o) = v else {
        return Err(ValidationError::NotObject);
    };
    let chat = to_chat(&o)?;
    let req = super::validate(&chat, Kind::Chat, limits).map_err(rename)?;
    Ok((req, o))
}

/// Chat parameter names in errors → the Responses names they came from.
fn rename(e: ValidationError) -> ValidationError {
    let map = |p: String| -> String {
        if let Some(rest) = p.strip_prefix("max_tokens") {
            format!("max_output_tokens{rest}")
        } else if let Some(rest) = p.strip_prefix("response_format") {
            format!("text.format{rest}")
        } else if let Some(rest) = p.strip_prefix("messages") {
            format!("input{rest}")
        } else {
            p
        }
    };
    match e {
        ValidationError::Missing { param } => ValidationError::Missing { param: map(param) },
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

/// The chat body equivalent to a Responses body.
pub fn to_chat(o: &Map<String, Json>) -> VResult<Map<String, Json>> {
    reject_stateful(o)?;
    let mut chat = Map::new();
    // sampling and model fields have the same names and meaning on both routes
    for k in [
        "model",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "stream",
    ] {
        if let Some(v) = field(o, k) {
            chat.insert(k.into(), v.clone());
        }
    }
    if let Some(n) = opt_uint(o, "max_output_tokens")? {
        chat.insert("max_tokens".into(), json!(n));
    }
    let mut messages = Vec::new();
    match field(o, "instructions") {
        None => {}
        Some(Json::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(ty("instructions", "a string")),
    }
    input_messages(o, &mut messages)?;
    chat.insert("messages".into(), Json::Array(messages));
    if let Some(t) = field(o, "tools") {
        chat.insert("tools".into(), tools(t)?);
    }
    if let Some(c) = field(o, "tool_choice") {
        chat.insert("tool_choice".into(), tool_choice(c)?);
    }
    match field(o, "reasoning") {
        None => {}
        Some(Json::Object(r)) => {
            let off = matches!(r.get("effort").and_then(Json::as_str), Some("none"));
            chat.insert("enable_thinking".into(), Json::Bool(!off));
        }
        Some(_) => return Err(ty("reasoning", "an object")),
    }
    match field(o, "text") {
        None => {}
        Some(Json::Object(t)) => {
            if let Some(f) = field(t, "format") {
                chat.insert("response_format".into(), text_format(f)?);
            }
        }
        Some(_) => return Err(ty("text", "an object")),
    }
    Ok(chat)
}

/// We keep no state between requests: fields that need stored responses are refused.
fn reject_stateful(o: &Map<String, Json>) -> VResult<()> {
    if field(o, "previous_response_id").is_some() {
        return Err(unsupported(
            "previous_response_id",
            "this server does not store responses; send the whole conversation in `input`",
        ));
    }
    if field(o, "conversation").is_some() {
        return Err(unsupported(
            "conversation",
            "this server does not store conversations; send the whole conversation in `input`",
        ));
    }
    match field(o, "store") {
        None | Some(Json::Bool(false)) => {}
        Some(Json::Bool(true)) => {
            return Err(unsupported(
                "store",
                "this server does not store responses; send `store: false` or leave it out",
            ))
        }
        Some(_) => return Err(ty("store", "a boolean")),
    }
    match field(o, "background") {
        None | Some(Json::Bool(false)) => {}
        Some(Json::Bool(true)) => {
            return Err(unsupported(
                "background",
                "background responses need stored responses, which this server does not keep",
            ))
        }
        Some(_) => return Err(ty("background", "a boolean")),
    }
    if field(o, "prompt").is_some() {
        return Err(unsupported(
            "prompt",
            "stored prompt templates are not supported; send `input`",
        ));
    }
    if opt_uint(o, "top_logprobs")?.is_some_and(|n| n > 0) {
        return Err(unsupported(
            "top_logprobs",
            "log-probabilities are not returned on this route",
        ));
    }
    if field(o, "max_tool_calls").is_some() {
        return Err(unsupported("max_tool_calls", "is not supported"));
    }
    match field(o, "truncation").map(|t| t.as_str()) {
        None | Some(Some("disabled")) => {}
        Some(Some("auto")) => {
            return Err(unsupported(
                "truncation",
                "`auto` truncation is not supported: a prompt longer than the context is refused",
            ))
        }
        Some(_) => return Err(ty("truncation", "\"auto\" or \"disabled\"")),
    }
    Ok(())
}

/// `input` (a string or a list of items) → chat messages appended to `out`.
fn input_messages(o: &Map<String, Json>, out: &mut Vec<Json>) -> VResult<()> {
    let items = match field(o, "input") {
        None => {
            return Err(ValidationError::Missing {
                param: "input".into(),
            })
        }
        Some(Json::String(s)) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Some(Json::Array(a)) if a.is_empty() => {
            return Err(ValidationError::Range {
                param: "input".into(),
                rule: "a non-empty string or list",
            })
        }
        Some(Json::Array(a)) => a,
        Some(_) => return Err(ty("input", "a string or a list of input items")),
    };
    for (i, item) in items.iter().enumerate() {
        let p = |s: &str| format!("input[{i}]{s}");
        let it = item.as_object().ok_or_else(|| ValidationError::Type {
            param: p(""),
            expected: "an object",
        })?;
        let typ = it.get("type").and_then(Json::as_str);
        match typ {
            None | Some("message") => out.push(message_item(it, &p)?),
            Some("function_call") => {
                let call_id = req_str(it, "call_id", &p)?;
                let name = req_str(it, "name", &p)?;
                let arguments = req_str(it, "arguments", &p)?;
                let call = json!({"id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": arguments}});
                // consecutive calls (and the text before them) form one assistant turn
                match out.last_mut() {
                    Some(Json::Object(m)) if m.get("role") == Some(&json!("assistant")) => {
                        let calls = m.entry("tool_calls").or_insert_with(|| json!([]));
                        if let Json::Array(a) = calls {
                            a.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => {
                let call_id = req_str(it, "call_id", &p)?;
                let output = match it.get("output") {
                    Some(Json::String(s)) => s.clone(),
                    Some(Json::Array(parts)) => parts_text(parts, &p(".output"))?,
                    None => return Err(ValidationError::Missing { param: p(".output") }),
                    Some(_) => {
                        return Err(ValidationError::Type {
                            param: p(".output"),
                            expected: "a string or a list of input_text parts",
                        })
                    }
                };
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            // earlier reasoning is not replayed to the model (chat templates drop it too)
            Some("reasoning") => {}
            Some(_) => {
                return Err(unsupported(
                    &p(".type"),
                    "only message, function_call, function_call_output and reasoning items are supported",
                ))
            }
        }
    }
    Ok(())
}

fn req_str(it: &Map<String, Json>, k: &str, p: &dyn Fn(&str) -> String) -> VResult<String> {
    match it.get(k) {
        Some(Json::String(s)) => Ok(s.clone()),
        None | Some(Json::Null) => Err(ValidationError::Missing {
            param: p(&format!(".{k}")),
        }),
        Some(_) => Err(ValidationError::Type {
            param: p(&format!(".{k}")),
            expected: "a string",
        }),
    }
}

fn message_item(it: &Map<String, Json>, p: &dyn Fn(&str) -> String) -> VResult<Json> {
    let role = req_str(it, "role", p)?;
    if !["user", "system", "developer", "assistant"].contains(&role.as_str()) {
        return Err(ValidationError::Range {
            param: p(".role"),
            rule: "one of user, system, developer, assistant",
        });
    }
    let content = match it.get("content") {
        Some(Json::String(s)) => s.clone(),
        Some(Json::Array(parts)) => parts_text(parts, &p(".content"))?,
        None | Some(Json::Null) => {
            return Err(ValidationError::Missing {
                param: p(".content"),
            })
        }
        Some(_) => {
            return Err(ValidationError::Type {
                param: p(".content"),
                expected: "a string or a list of content parts",
            })
        }
    };
    Ok(json!({"role": role, "content": content}))
}

/// Text parts (`input_text`, `output_text`, `text`) joined with newlines, as chat joins parts.
fn parts_text(parts: &[Json], param: &str) -> VResult<String> {
    let mut texts = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let typ = part.get("type").and_then(Json::as_str);
        let text = part.get("text").and_then(Json::as_str);
        match (typ, text) {
            (Some("input_text" | "output_text" | "text") | None, Some(t)) => texts.push(t),
            (Some("refusal"), _) => {
                if let Some(r) = part.get("refusal").and_then(Json::as_str) {
                    texts.push(r);
                }
            }
            _ => {
                return Err(ValidationError::Unsupported {
                    param: format!("{param}[{j}]"),
                    msg: "only text parts (input_text, output_text) are supported",
                })
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Responses function tools (`{type, name, description, parameters}`) → chat tools.
fn tools(t: &Json) -> VResult<Json> {
    let list = t
        .as_array()
        .ok_or_else(|| ty("tools", "a list of tool objects"))?;
    let mut out = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        match tool.get("type").and_then(Json::as_str) {
            Some("function") => {}
            _ => {
                return Err(unsupported(
                    &format!("tools[{i}].type"),
                    "only function tools are supported (no hosted tools)",
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
        for k in ["description", "parameters", "strict"] {
            if let Some(v) = tool.get(k).filter(|v| !v.is_null()) {
                f.insert(k.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Json::Array(out))
}

/// `none` / `auto` / `required` / `{type: "function", name}` → chat's `tool_choice`.
fn tool_choice(c: &Json) -> VResult<Json> {
    match c {
        Json::String(_) => Ok(c.clone()),
        Json::Object(m) => match (m.get("type").and_then(Json::as_str), m.get("name")) {
            (Some("function"), Some(Json::String(n))) => {
                Ok(json!({"type": "function", "function": {"name": n}}))
            }
            (Some("function"), _) => Err(ValidationError::Missing {
                param: "tool_choice.name".into(),
            }),
            _ => Err(unsupported(
                "tool_choice.type",
                "only `function` tool choices are supported",
            )),
        },
        _ => Err(ty("tool_choice", "a string or an object")),
    }
}

/// `text.format` → chat's `response_format` (same types; the schema moves one level up).
fn text_format(f: &Json) -> VResult<Json> {
    let m = f
        .as_object()
        .ok_or_else(|| ty("text.format", "an object"))?;
    match m.get("type").and_then(Json::as_str) {
        Some("json_schema") => {
            let mut s = m.clone();
            s.remove("type");
            Ok(json!({"type": "json_schema", "json_schema": s}))
        }
        _ => Ok(f.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Json) -> VResult<(ValidRequest, Map<String, Json>)> {
        parse_responses(body.to_string().as_bytes(), &Limits::default())
    }

    fn messages(body: Json) -> Json {
        to_chat(body.as_object().unwrap()).unwrap()["messages"].clone()
    }

    #[test]
    fn string_input_and_instructions_become_system_then_user() {
        assert_eq!(
            messages(json!({"input": "hi", "instructions": "be brief"})),
            json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
        );
        let (r, _) = parse(json!({"input": "hi", "max_output_tokens": 7})).unwrap();
        assert_eq!(r.max_tokens, Some(7));
    }

    #[test]
    fn items_with_calls_and_outputs_become_chat_turns() {
        let m = messages(json!({"input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "message", "role": "user", "content": "weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\":1}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ]}));
        assert_eq!(m[0], json!({"role": "developer", "content": "a\nb"}));
        assert_eq!(m[2]["role"], "assistant");
        assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(m[2]["tool_calls"][1]["function"]["name"], "g");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(m[4], json!({"role": "assistant", "content": "done"}));
    }

    #[test]
    fn errors_name_the_responses_param() {
        let cases = [
            (json!({}), "input", "missing_required_parameter"),
            (json!({"input": 3}), "input", "invalid_type"),
            (
                json!({"input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
                "invalid_value",
            ),
            (
                json!({"input": "x", "temperature": 9}),
                "temperature",
                "invalid_value",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}),
                "input[0].content[0]",
                "unsupported_parameter",
            ),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0].role",
                "invalid_value",
            ),
            (
                json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0].call_id",
                "missing_required_parameter",
            ),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
                "unsupported_parameter",
            ),
            (
                json!({"input": "x", "store": true}),
                "store",
                "unsupported_parameter",
            ),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
                "unsupported_parameter",
            ),
            (
                json!({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}),
                "tool_choice.function.name",
                "invalid_value",
            ),
        ];
        for (body, param, code) in cases {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!((e.param().unwrap_or(""), e.code()), (param, code), "{body}");
        }
        // neutral values pass
        parse(json!({"input": "x", "store": false, "truncation": "disabled", "text": {"format": {"type": "text"}},
                     "metadata": {"a": "b"}, "parallel_tool_calls": true}))
        .unwrap();
    }

    #[test]
    fn function_tools_and_reasoning_map_to_chat() {
        let c = to_chat(
            json!({"input": "x", "reasoning": {"effort": "none"},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}})
            .as_object()
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            c["tools"][0]["function"],
            json!({"name": "f", "parameters": {"type": "object"}})
        );
        assert_eq!(c["tool_choice"]["function"]["name"], "f");
        assert_eq!(c["enable_thinking"], json!(false));
        assert_eq!(
            c["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}})
        );
    }
}
