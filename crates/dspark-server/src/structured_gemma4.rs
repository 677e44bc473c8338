//! Forced tool calls in Gemma 4's call syntax: the forced functions' JSON-schema `parameters`
//! become a Lark grammar (llguidance's dialect) whose every match is one
//! `<|tool_call>call:NAME{key:value,…}<tool_call|>` block, written the way the Gemma 4 chat
//! template writes a call (`format_argument` with bare keys, keys in sorted order, strings
//! between `<|"|>` marks, `true`/`false`, numbers, `null`/`None`, nested `{…}` and `[…]`) and
//! parsed back by `tools.rs` into arguments that follow the schema.
//!
//! Expressed: `type` (one or a list; `nullable`), `enum`, `const`, `anyOf`/`oneOf`, objects
//! (`properties` in sorted order, `required`, optional properties left out or not, other
//! bare keys anywhere unless `additionalProperties` is false, their values following its
//! schema), arrays (`items`, `minItems`, `maxItems`), strings (`minLength`, `maxLength`). Not
//! expressed: numeric ranges, `pattern`, `format`. A schema beyond that (`$ref`, `allOf`,
//! `not`, nesting deeper than [`MAX_DEPTH`]) allows any value. A string can
//! never hold `<|"|>` (it would end the string) nor `<tool_call|>` (it would end the call).

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

/// The string mark of the Gemma 4 call syntax.
const QUOTE: &str = "<|\"|>";
/// What ends a call block (`tools.rs` looks for it before parsing the call).
const CLOSE: &str = "<tool_call|>";
const OPEN: &str = "<|tool_call>";

/// Schemas nested deeper than this allow any value (keeps the grammar small).
pub const MAX_DEPTH: usize = 16;

/// A string bound above this is not spelled out as a repetition (the lexer's automaton would
/// grow with it); such strings are unbounded.
const MAX_SPELLED_LENGTH: u64 = 2048;
/// The same for `maxItems` (the grammar grows with it).
const MAX_SPELLED_ITEMS: u64 = 64;

/// A forced call that cannot be written in the Gemma 4 syntax (a 400 for the request).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CallSyntaxError {
    #[error(
        "function name {0:?} cannot be written in a Gemma 4 call (`call:NAME{{`): it must be \
         non-empty, without whitespace, `{{`, `<|\"|>` or `<tool_call|>`"
    )]
    Name(String),
    #[error(
        "{what} {text:?} cannot be written in a Gemma 4 call: it holds `<|\"|>` or `<tool_call|>`"
    )]
    Delimiter { what: &'static str, text: String },
    #[error("no function to call")]
    NoFunction,
}

/// The Lark grammar of one call of any of `functions` (OpenAI `function` objects: `name`,
/// `parameters`) in the Gemma 4 syntax.
pub fn call_grammar(functions: &[Json]) -> Result<String, CallSyntaxError> {
    let mut b = Builder::default();
    let mut calls = Vec::new();
    for f in functions {
        let name = f.get("name").and_then(Json::as_str).unwrap_or_default();
        let writable = !name.is_empty()
            && !name.contains(|c: char| c.is_whitespace() || c == '{')
            && !holds_delimiter(name);
        if !writable {
            return Err(CallSyntaxError::Name(name.to_owned()));
        }
        let members = match f.get("parameters") {
            Some(Json::Object(p)) if is_object_schema(p) => b.members(p, 1)?,
            _ => b.generic_members(),
        };
        let body = format!("{} {members} \"}}\"", lark_str(&format!("{name}{{")));
        calls.push(b.rule(body));
    }
    if calls.is_empty() {
        return Err(CallSyntaxError::NoFunction);
    }
    let mut out = format!(
        "start: {} ({}) {}\n",
        lark_str(&format!("{OPEN}call:")),
        calls.join(" | "),
        lark_str(CLOSE)
    );
    for r in &b.rules {
        out.push_str(r);
        out.push('\n');
    }
    for (name, def) in &b.terminals {
        out.push_str(&format!("{name}: {def}\n"));
    }
    Ok(out)
}

fn holds_delimiter(s: &str) -> bool {
    s.contains(QUOTE) || s.contains(CLOSE)
}

fn is_object_schema(s: &Map<String, Json>) -> bool {
    s.get("type").and_then(Json::as_str) == Some("object") || s.contains_key("properties")
}

/// A Lark string literal (JSON string syntax; DEL escaped, which Lark's lexer refuses raw).
fn lark_str(s: &str) -> String {
    serde_json::to_string(s)
        .expect("a string serializes")
        .replace('\u{7f}', "\\u007f")
}

/// A key as the template writes it: bare when the parser reads it back unchanged, else
/// between `<|"|>` marks (which the parser also reads).
fn key_text(key: &str) -> Result<String, CallSyntaxError> {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.$@/+".contains(c));
    if bare {
        Ok(key.to_owned())
    } else if holds_delimiter(key) {
        Err(CallSyntaxError::Delimiter {
            what: "property name",
            text: key.to_owned(),
        })
    } else {
        Ok(format!("{QUOTE}{key}{QUOTE}"))
    }
}

/// `v` written as the template's `format_argument` writes it (bare keys, sorted).
fn literal(v: &Json) -> Result<String, CallSyntaxError> {
    Ok(match v {
        Json::String(s) if holds_delimiter(s) => {
            return Err(CallSyntaxError::Delimiter {
                what: "enum or const value",
                text: s.clone(),
            })
        }
        Json::String(s) => format!("{QUOTE}{s}{QUOTE}"),
        Json::Null => "null".into(),
        Json::Bool(_) | Json::Number(_) => v.to_string(),
        Json::Array(items) => {
            let items: Result<Vec<String>, _> = items.iter().map(literal).collect();
            format!("[{}]", items?.join(","))
        }
        Json::Object(m) => {
            let sorted: BTreeMap<&String, &Json> = m.iter().collect();
            let mut parts = Vec::new();
            for (k, v) in sorted {
                parts.push(format!("{}:{}", key_text(k)?, literal(v)?));
            }
            format!("{{{}}}", parts.join(","))
        }
    })
}

/// Grammar rules and terminals as they are made; values become rules `v0`, `v1`, ….
#[derive(Default)]
struct Builder {
    rules: Vec<String>,
    terminals: BTreeMap<String, String>,
    generic: bool,
}

const INT: &str = r"/-?(0|[1-9][0-9]{0,17})/";
const NUM: &str = r"/-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][+-]?[0-9]{1,2})?/";
const NULL: &str = r#"("null" | "None")"#;
const BOOL: &str = r#"("true" | "false")"#;

impl Builder {
    fn rule(&mut self, body: String) -> String {
        let name = format!("v{}", self.rules.len());
        self.rules.push(format!("{name}: {body}"));
        name
    }

    fn terminal(&mut self, name: &str, def: String) -> String {
        self.terminals.entry(name.to_owned()).or_insert(def);
        name.to_owned()
    }

    /// A string of `min..=max` characters between `<|"|>` marks, holding neither delimiter.
    fn string(&mut self, min: u64, max: Option<u64>) -> String {
        let (min, max) = match max {
            Some(m) if m <= MAX_SPELLED_LENGTH => (min.min(m), Some(m)),
            _ => (min.min(MAX_SPELLED_LENGTH), None),
        };
        let (name, body) = match (min, max) {
            (0, None) => ("STR".to_owned(), "/(?s:.)*/".to_owned()),
            (a, None) => (format!("STR_{a}"), format!("/(?s:.){{{a},}}/")),
            (a, Some(b)) => (format!("STR_{a}_{b}"), format!("/(?s:.){{{a},{b}}}/")),
        };
        self.terminal("Q", lark_str(QUOTE));
        let def = format!(
            "Q {body} Q & ~(/(?s:.)+/ Q /(?s:.)+/) & ~(/(?s:.)*/ {} /(?s:.)*/)",
            lark_str(CLOSE)
        );
        self.terminal(&name, def)
    }

    /// A rule (or terminal) for a value of `schema` at nesting `depth`.
    fn value(&mut self, schema: &Json, depth: usize) -> Result<String, CallSyntaxError> {
        let s = match schema {
            Json::Object(s) if depth <= MAX_DEPTH => s,
            _ => return Ok(self.generic_value()),
        };
        let nullable = s.get("nullable") == Some(&Json::Bool(true));
        let listed = match (s.get("const"), s.get("enum")) {
            (Some(c), _) => Some(std::slice::from_ref(c)),
            (None, Some(Json::Array(options))) if !options.is_empty() => Some(options.as_slice()),
            _ => None,
        };
        if let Some(values) = listed {
            let mut alts = Vec::new();
            for v in values {
                alts.push(lark_str(&literal(v)?));
            }
            if nullable {
                alts.push(NULL.into());
            }
            return Ok(self.rule(alts.join(" | ")));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Json::Array(options)) = s.get(key) {
                let mut alts = Vec::new();
                for o in options {
                    alts.push(self.value(o, depth + 1)?);
                }
                if alts.is_empty() {
                    return Ok(self.generic_value());
                }
                return Ok(self.rule(alts.join(" | ")));
            }
        }
        if ["$ref", "allOf", "not"].iter().any(|k| s.contains_key(*k)) {
            return Ok(self.generic_value());
        }
        let mut types: Vec<&str> = match s.get("type") {
            Some(Json::String(t)) => vec![t.as_str()],
            Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).collect(),
            _ if s.contains_key("properties") => vec!["object"],
            _ if s.contains_key("items") => vec!["array"],
            _ => return Ok(self.generic_value()),
        };
        if nullable {
            types.push("null");
        }
        if types.contains(&"number") {
            // an integer is a number; two terminals matching the same text would be ambiguous
            types.retain(|t| *t != "integer");
        }
        let mut alts = Vec::new();
        for t in types {
            let alt = match t {
                "string" => {
                    let n = |k: &str| s.get(k).and_then(Json::as_u64);
                    self.string(n("minLength").unwrap_or(0), n("maxLength"))
                }
                "integer" => self.terminal("INT", INT.into()),
                "number" => self.terminal("NUM", NUM.into()),
                "boolean" => BOOL.into(),
                "null" => NULL.into(),
                "object" => {
                    let m = self.members(s, depth)?;
                    format!("\"{{\" {m} \"}}\"")
                }
                "array" => self.array(s, depth)?,
                _ => return Ok(self.generic_value()),
            };
            alts.push(alt);
        }
        if alts.is_empty() {
            return Ok(self.generic_value());
        }
        Ok(self.rule(alts.join(" | ")))
    }

    /// `[…]` of `items` values, `minItems..=maxItems` of them.
    fn array(&mut self, s: &Map<String, Json>, depth: usize) -> Result<String, CallSyntaxError> {
        let item = match s.get("items") {
            Some(i @ Json::Object(_)) => self.value(i, depth + 1)?,
            _ => self.generic_value(),
        };
        let count = |k: &str| s.get(k).and_then(Json::as_u64);
        let max = count("maxItems").filter(|&m| m <= MAX_SPELLED_ITEMS);
        let min = count("minItems")
            .unwrap_or(0)
            .min(max.unwrap_or(MAX_SPELLED_ITEMS));
        if max == Some(0) {
            return Ok("\"[\" \"]\"".into());
        }
        let rest = repeat(
            &format!("\",\" {item}"),
            min.saturating_sub(1),
            max.map(|m| m - 1),
        );
        Ok(if min == 0 {
            format!("\"[\" ({item} {rest})? \"]\"")
        } else {
            format!("\"[\" {item} {rest} \"]\"")
        })
    }

    /// The `key:value,…` of an object schema (between its braces): its properties in sorted
    /// order (the template's `dictsort`), required ones always, optional ones maybe; other
    /// keys (bare names not among the properties; any key when there are none) anywhere
    /// unless `additionalProperties` is false, with values of its schema.
    fn members(&mut self, s: &Map<String, Json>, depth: usize) -> Result<String, CallSyntaxError> {
        let required: Vec<&str> = s
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut props: BTreeMap<&str, &Json> = match s.get("properties") {
            Some(Json::Object(p)) => p.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            _ => BTreeMap::new(),
        };
        // a required name without a schema takes any value
        for r in &required {
            props.entry(*r).or_insert(&Json::Bool(true));
        }
        let mut items = Vec::new();
        for (k, v) in &props {
            let value = self.value(v, depth + 1)?;
            items.push((key_text(k)?, value, required.contains(k)));
        }
        let extra = match s.get("additionalProperties") {
            Some(Json::Bool(false)) => None,
            other => {
                let value = match other {
                    Some(v @ Json::Object(_)) => self.value(v, depth + 1)?,
                    _ => self.generic_value(),
                };
                let key = self.extra_key(props.keys().copied());
                Some(self.rule(format!("{key} \":\" {value}")))
            }
        };
        Ok(sequence(&items, extra.as_deref()))
    }

    /// A key that is none of `taken`: bare, or also quoted when nothing is taken.
    fn extra_key<'k>(&mut self, taken: impl Iterator<Item = &'k str>) -> String {
        let key = self.generic_key();
        let taken: Vec<String> = taken.map(lark_str).collect();
        if taken.is_empty() {
            let quoted = self.string(0, None);
            return format!("({key} | {quoted})");
        }
        let name = format!("KEY_{}", self.terminals.len());
        self.terminal(&name, format!("{key} & ~({})", taken.join(" | ")))
    }

    fn generic_key(&mut self) -> String {
        self.terminal("KEY", "/[A-Za-z_][A-Za-z0-9_]*/".into())
    }

    /// Any value the parser reads (defined once, on first use).
    fn generic_value(&mut self) -> String {
        if !self.generic {
            self.generic = true;
            let (s, n, k) = (
                self.string(0, None),
                self.terminal("NUM", NUM.into()),
                self.generic_key(),
            );
            self.rules.push(format!(
                "gvalue: {s} | {n} | {BOOL} | {NULL} | \"{{\" gmembers \"}}\" | \"[\" (gvalue (\",\" gvalue)*)? \"]\""
            ));
            self.rules.push(format!(
                "gmembers: (({k} | {s}) \":\" gvalue (\",\" ({k} | {s}) \":\" gvalue)*)?"
            ));
        }
        "gvalue".into()
    }

    fn generic_members(&mut self) -> String {
        self.generic_value();
        "gmembers".into()
    }
}

/// `expr` repeated `lo..=hi` times (`hi` `None`: no bound).
fn repeat(expr: &str, lo: u64, hi: Option<u64>) -> String {
    match (lo, hi) {
        (_, Some(0)) => String::new(),
        (0, None) => format!("({expr})*"),
        (lo, None) => format!("({expr}){{{lo},}}"),
        (lo, Some(hi)) => format!("({expr}){{{lo},{hi}}}"),
    }
}

/// `k1:v1,k2:v2,…` in order, each `(key, value rule, required)`: required items always,
/// optional ones maybe, commas only between items present; `extra` members (a rule) before,
/// between and after them.
fn sequence(items: &[(String, String, bool)], extra: Option<&str>) -> String {
    let extras = extra.map(|x| format!("(\",\" {x})*")).unwrap_or_default();
    let after = |from: usize| -> String {
        let mut out = extras.clone();
        for (k, v, req) in &items[from..] {
            let item = format!("{} {v}", lark_str(&format!(",{k}:")));
            out.push(' ');
            out.push_str(&if *req { item } else { format!("({item})?") });
            out.push(' ');
            out.push_str(&extras);
        }
        out
    };
    // what comes first decides where the commas start: an extra member, or the first item
    // present (every item before it optional)
    let mut alts = Vec::new();
    if let Some(x) = extra {
        alts.push(format!("{x} {}", after(0)));
    }
    for (i, (k, v, req)) in items.iter().enumerate() {
        alts.push(format!(
            "{} {v} {}",
            lark_str(&format!("{k}:")),
            after(i + 1)
        ));
        if *req {
            return format!("({})", alts.join(" | "));
        }
    }
    if alts.is_empty() {
        String::new()
    } else {
        format!("({})?", alts.join(" | "))
    }
}

#[cfg(test)]
#[path = "structured_gemma4_tests.rs"]
mod tests;
