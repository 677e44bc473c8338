//! Structured output: `response_format` (`json_object`, `json_schema`) and `tool_choice`
//! (`required` or a named function) become a grammar ([`Grammar`]) that the engine enforces
//! by constrained decoding (`dspark_engine::constrain`). A forced call is written in the call
//! syntax of the model's chat template: Hermes/Qwen3 `<tool_call>` JSON here, Gemma 4
//! `<|tool_call>call:NAME{…}` in `structured_gemma4.rs`. Grammars compile against the
//! model's tokenizer; the compiler (the token trie over the whole vocabulary) is built once
//! per tokenizer and kept.

use std::sync::{Arc, Mutex, Weak};

use dspark_engine::constrain::{Compiler, Grammar};
use dspark_engine::tokenizer::Tokenizer;
use serde_json::{json, Map, Value as Json};

use crate::validate::{Kind, ValidationError};

/// A request's output constraint and the parameter that asked for it (named by any error).
#[derive(Clone, Debug, PartialEq)]
pub struct Structured {
    pub param: &'static str,
    pub output: Output,
}

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Text matching a grammar (`response_format`).
    Grammar(Grammar),
    /// One call of one of these functions (`tool_choice`), in the call syntax of the model's
    /// chat template (known only once the model's tokenizer is at hand, [`tool_grammar`]).
    ToolCall(Vec<Json>),
}

/// The grammar of a request: a forced tool call (chat) wins over `response_format`.
pub fn request_grammar(
    o: &Map<String, Json>,
    kind: Kind,
) -> Result<Option<Structured>, ValidationError> {
    let format = response_format(o)?;
    if kind == Kind::Chat {
        if let Some(functions) = forced_tools(o).filter(|f| !f.is_empty()) {
            return Ok(Some(Structured {
                param: "tool_choice",
                output: Output::ToolCall(functions),
            }));
        }
    }
    Ok(format.map(|grammar| Structured {
        param: "response_format",
        output: Output::Grammar(grammar),
    }))
}

/// Compiles `s` for the model of `tok` into the state the engine's loops share; a grammar
/// the engine refuses, or a forced call that the model's call syntax cannot write, is a 400
/// naming `s.param`. Blocking (the first call builds the token trie).
pub fn constraint(
    tok: &Arc<Tokenizer>,
    s: &Structured,
) -> Result<dspark_engine::constrain::Shared, ValidationError> {
    let refused = |msg: String| ValidationError::Refused {
        param: s.param.into(),
        msg,
    };
    let grammar = match &s.output {
        Output::Grammar(g) => g.clone(),
        Output::ToolCall(functions) => tool_grammar(tok, functions).map_err(|e| {
            refused(format!(
                "forced tool calls are written in Gemma 4 call syntax for this model: {e}"
            ))
        })?,
    };
    let compiler = compiler_for(tok).map_err(refused)?;
    let c = compiler
        .compile(&grammar)
        .map_err(|e| refused(format!("not supported by the grammar engine: {e}")))?;
    Ok(c.into())
}

/// The grammar of one call of one of `functions` in the call syntax `tok`'s chat template
/// writes ([`call_syntax`]).
pub fn tool_grammar(
    tok: &Tokenizer,
    functions: &[Json],
) -> Result<Grammar, crate::structured_gemma4::CallSyntaxError> {
    Ok(match call_syntax(tok) {
        CallSyntax::Hermes => tool_call_grammar(functions),
        CallSyntax::Gemma4 => Grammar::Lark(crate::structured_gemma4::call_grammar(functions)?),
    })
}

fn ty(param: &str, expected: &'static str) -> ValidationError {
    ValidationError::Type {
        param: param.into(),
        expected,
    }
}

/// `response_format` → a grammar (`None` for absent or `{type: "text"}`).
pub fn response_format(o: &Map<String, Json>) -> Result<Option<Grammar>, ValidationError> {
    let f = match o.get("response_format") {
        None | Some(Json::Null) => return Ok(None),
        Some(Json::Object(f)) => f,
        Some(_) => return Err(ty("response_format", "an object")),
    };
    match f.get("type").and_then(Json::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => {
            let js = match f.get("json_schema") {
                Some(Json::Object(js)) => js,
                None | Some(Json::Null) => {
                    return Err(ValidationError::Missing {
                        param: "response_format.json_schema".into(),
                    })
                }
                Some(_) => return Err(ty("response_format.json_schema", "an object")),
            };
            match js.get("name") {
                Some(Json::String(_)) => {}
                None | Some(Json::Null) => {
                    return Err(ValidationError::Missing {
                        param: "response_format.json_schema.name".into(),
                    })
                }
                Some(_) => return Err(ty("response_format.json_schema.name", "a string")),
            }
            if !matches!(
                js.get("strict"),
                None | Some(Json::Null) | Some(Json::Bool(_))
            ) {
                return Err(ty("response_format.json_schema.strict", "a boolean"));
            }
            match js.get("schema") {
                // OpenAI's default when no schema is given: any JSON object
                None | Some(Json::Null) => Ok(Some(Grammar::JsonObject)),
                Some(s @ Json::Object(_)) => Ok(Some(Grammar::JsonSchema(s.clone()))),
                Some(_) => Err(ty("response_format.json_schema.schema", "an object")),
            }
        }
        _ => Err(ty(
            "response_format.type",
            "\"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}

/// The functions `tool_choice` forces (`required`: any of `tools`; `{type: function,
/// function: {name}}`: that one), or `None` when the model may answer in text.
pub fn forced_tools(o: &Map<String, Json>) -> Option<Vec<Json>> {
    let tools = o.get("tools")?.as_array()?;
    let functions = tools.iter().filter_map(|t| t.get("function"));
    match o.get("tool_choice")? {
        Json::String(s) if s == "required" => Some(functions.cloned().collect()),
        Json::Object(c) => {
            let name = c.get("function")?.get("name")?.as_str()?;
            Some(
                functions
                    .filter(|f| f["name"].as_str() == Some(name))
                    .cloned()
                    .collect(),
            )
        }
        _ => None,
    }
}

/// The output grammar for forced `functions` in the Hermes/Qwen3 format the chat templates
/// describe: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, arguments valid
/// for the function's `parameters` schema (any object when it has none).
pub fn tool_call_grammar(functions: &[Json]) -> Grammar {
    let calls: Vec<Json> = functions
        .iter()
        .map(|f| {
            let params = match f.get("parameters") {
                Some(p @ Json::Object(_)) => p.clone(),
                _ => json!({"type": "object"}),
            };
            json!({
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let schema = json!({
        "anyOf": calls,
        "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "},
    });
    Grammar::Lark(format!(
        "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {schema}\n"
    ))
}

/// The call syntaxes `tools.rs` parses, as a forced call is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallSyntax {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` (Qwen3, Hermes).
    Hermes,
    /// `<|tool_call>call:NAME{key:value,…}<tool_call|>`.
    Gemma4,
}

/// The syntax forced calls take for this model: Gemma 4 where its chat template writes calls
/// that way (`<|tool_call>`), else Hermes (every model's output is parsed for Hermes calls).
pub fn call_syntax(tok: &Tokenizer) -> CallSyntax {
    if tok
        .chat_template()
        .is_some_and(|t| t.source().contains("<|tool_call>"))
    {
        CallSyntax::Gemma4
    } else {
        CallSyntax::Hermes
    }
}

/// The tokenizer a compiler was built for, held weakly: the weak reference keeps its
/// allocation, so a tokenizer loaded later (another model) can never reuse the address and
/// be mistaken for it, while the tokenizer itself is still freed with its model.
type Slot = Option<(Weak<Tokenizer>, Arc<Compiler>)>;
static COMPILER: Mutex<Slot> = Mutex::new(None);

/// The compiler of `tok` (built on first use, then kept for this tokenizer). Blocking.
pub fn compiler_for(tok: &Arc<Tokenizer>) -> Result<Arc<Compiler>, String> {
    let mut slot = COMPILER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((w, c)) = slot.as_ref() {
        if std::ptr::eq(w.as_ptr(), Arc::as_ptr(tok)) {
            return Ok(c.clone());
        }
    }
    let c = Arc::new(Compiler::new(tok, tok.vocab_size()).map_err(|e| e.to_string())?);
    *slot = Some((Arc::downgrade(tok), c.clone()));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Json) -> Map<String, Json> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn response_formats() {
        assert_eq!(response_format(&obj(json!({}))).unwrap(), None);
        assert_eq!(
            response_format(&obj(json!({"response_format": {"type": "json_object"}}))).unwrap(),
            Some(Grammar::JsonObject)
        );
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let r = response_format(&obj(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": s, "strict": true}}})));
        assert_eq!(r.unwrap(), Some(Grammar::JsonSchema(s)));
        let e = response_format(&obj(json!({"response_format": {"type": "json_schema",
            "json_schema": {"schema": {}}}})))
        .unwrap_err();
        assert_eq!(e.param(), Some("response_format.json_schema.name"));
        let e = response_format(&obj(json!({"response_format": {"type": "xml"}}))).unwrap_err();
        assert_eq!(e.param(), Some("response_format.type"));
    }

    #[test]
    fn forced_tool_choices() {
        let tools = json!([{"type": "function", "function": {"name": "f"}},
                           {"type": "function", "function": {"name": "g"}}]);
        let req = |c: Json| obj(json!({"tools": tools, "tool_choice": c}));
        assert_eq!(forced_tools(&req(json!("required"))).unwrap().len(), 2);
        let named = forced_tools(&req(json!({"type": "function", "function": {"name": "g"}})));
        assert_eq!(named.unwrap()[0]["name"], "g");
        assert!(forced_tools(&req(json!("auto"))).is_none());
    }
}
