//! Chat-specific validation: messages (roles, string or text-part content, tool calls), template
//! kwargs and thinking flags, and `tools`/`tool_choice` → the tool list for the template.

use dspark_engine::chat_template::ChatOptions;
use dspark_engine::worker::Prompt;
use serde_json::{Map, Value as Json};

use super::{field, opt_bool, ty, Limits, ToolMode, VResult, ValidationError};

pub(super) fn chat_prompt(o: &Map<String, Json>, limits: &Limits) -> VResult<(Prompt, ToolMode)> {
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
    check_size(msgs, limits)?;
    for (i, m) in msgs.iter().enumerate() {
        check_message(i, m)?;
    }
    let mut options = ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    if !limits.thinking {
        options
            .kwargs
            .insert("enable_thinking".into(), Json::Bool(false));
    }
    match field(o, "chat_template_kwargs") {
        None => {}
        Some(Json::Object(kw)) => {
            for (k, v) in kw {
                if ["messages", "tools", "documents", "add_generation_prompt"].contains(&k.as_str())
                {
                    return Err(ValidationError::Unsupported {
                        param: format!("chat_template_kwargs.{k}"),
                        msg: "this template variable is set by the server",
                    });
                }
                options.kwargs.insert(k.clone(), v.clone());
            }
        }
        Some(_) => return Err(ty("chat_template_kwargs", "an object")),
    }
    if let Some(b) = opt_bool(o, "enable_thinking")? {
        options
            .kwargs
            .insert("enable_thinking".into(), Json::Bool(b));
    }
    let tools = parse_tools(o)?;
    let mode = if tools.is_some() {
        ToolMode::On
    } else {
        ToolMode::Off
    };
    options.tools = tools;
    Ok((
        Prompt::Chat {
            messages: Json::Array(msgs.clone()),
            options,
        },
        mode,
    ))
}

/// The message count and the total text size against the server's limits (checked before
/// anything else looks at the messages, so an oversized request costs one pass).
fn check_size(msgs: &[Json], limits: &Limits) -> VResult<()> {
    if msgs.len() > limits.max_messages {
        return Err(ValidationError::OverLimit {
            param: "messages".into(),
            unit: "messages",
            got: msgs.len(),
            max: limits.max_messages,
            code: "array_above_max_length",
        });
    }
    let text = |v: &Json| match v {
        Json::String(s) => s.len(),
        Json::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Json::as_str))
            .map(str::len)
            .sum(),
        _ => 0,
    };
    let total: usize = msgs.iter().filter_map(|m| m.get("content")).map(text).sum();
    if total > limits.max_content_bytes {
        return Err(ValidationError::OverLimit {
            param: "messages".into(),
            unit: "bytes of content",
            got: total,
            max: limits.max_content_bytes,
            code: "string_above_max_length",
        });
    }
    Ok(())
}

fn check_message(i: usize, m: &Json) -> VResult<()> {
    let p = |s: &str| format!("messages[{i}]{s}");
    let m = m.as_object().ok_or_else(|| ValidationError::Type {
        param: p(""),
        expected: "an object",
    })?;
    match m.get("role") {
        Some(Json::String(r))
            if ["system", "developer", "user", "assistant", "tool"].contains(&r.as_str()) => {}
        Some(Json::String(_)) => {
            return Err(ValidationError::Range {
                param: p(".role"),
                rule: "one of system, developer, user, assistant, tool",
            })
        }
        None => return Err(ValidationError::Missing { param: p(".role") }),
        Some(_) => {
            return Err(ValidationError::Type {
                param: p(".role"),
                expected: "a string",
            })
        }
    }
    match m.get("content") {
        None | Some(Json::Null) | Some(Json::String(_)) => {}
        Some(Json::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                let text = part.get("text").and_then(Json::as_str);
                let typ = part.get("type").and_then(Json::as_str);
                if text.is_none() || !matches!(typ, None | Some("text")) {
                    return Err(ValidationError::Unsupported {
                        param: p(&format!(".content[{j}]")),
                        msg: "only text content parts are supported",
                    });
                }
            }
        }
        Some(_) => {
            return Err(ValidationError::Type {
                param: p(".content"),
                expected: "a string or a list of text parts",
            })
        }
    }
    if let Some(tc) = field(m, "tool_calls") {
        let calls = tc.as_array().ok_or_else(|| ValidationError::Type {
            param: p(".tool_calls"),
            expected: "a list",
        })?;
        for (j, c) in calls.iter().enumerate() {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Json::as_str);
            if name.is_none() {
                return Err(ValidationError::Missing {
                    param: p(&format!(".tool_calls[{j}].function.name")),
                });
            }
        }
    }
    Ok(())
}

/// `tools` and `tool_choice` → the tool list for the template (`None`: tools off).
fn parse_tools(o: &Map<String, Json>) -> VResult<Option<Json>> {
    let tools = match field(o, "tools") {
        None => return check_choice_without_tools(o),
        Some(Json::Array(a)) => a,
        Some(_) => return Err(ty("tools", "a list of tool objects")),
    };
    for (i, t) in tools.iter().enumerate() {
        let name = t.get("function").and_then(|f| f.get("name"));
        if !matches!(name, Some(Json::String(_))) {
            return Err(ValidationError::Missing {
                param: format!("tools[{i}].function.name"),
            });
        }
    }
    let chosen: Vec<Json> = match field(o, "tool_choice") {
        None => tools.clone(),
        Some(Json::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" | "required" => tools.clone(),
            _ => {
                return Err(ValidationError::Range {
                    param: "tool_choice".into(),
                    rule: "none, auto, required or a named function",
                })
            }
        },
        Some(Json::Object(c)) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Json::as_str)
                .ok_or_else(|| ValidationError::Missing {
                    param: "tool_choice.function.name".into(),
                })?;
            let named: Vec<Json> = tools
                .iter()
                .filter(|t| t["function"]["name"].as_str() == Some(name))
                .cloned()
                .collect();
            if named.is_empty() {
                return Err(ValidationError::Range {
                    param: "tool_choice.function.name".into(),
                    rule: "the name of one of `tools`",
                });
            }
            named
        }
        Some(_) => return Err(ty("tool_choice", "a string or an object")),
    };
    Ok(if chosen.is_empty() {
        None
    } else {
        Some(Json::Array(chosen))
    })
}

fn check_choice_without_tools(o: &Map<String, Json>) -> VResult<Option<Json>> {
    match field(o, "tool_choice") {
        None | Some(Json::String(_)) => Ok(None),
        Some(Json::Object(_)) => Err(ValidationError::Missing {
            param: "tools".into(),
        }),
        Some(_) => Err(ty("tool_choice", "a string or an object")),
    }
}
