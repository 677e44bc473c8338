//! Tool-call extraction from generated text: Hermes/Qwen3 `<tool_call>{json}</tool_call>` and
//! Gemma-4 `<|tool_call>call:NAME{k:v,…}<tool_call|>`. Streaming-safe: text outside calls is
//! released as soon as it cannot start a tag; each call is released whole when it closes.

use serde_json::{Map, Value as Json};

use crate::thinking::safe_len;

/// One parsed call, with `arguments` as a JSON string (OpenAI's wire form).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Text(String),
    Call(ToolCall),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Syntax {
    Hermes,
    Gemma,
}

impl Syntax {
    fn open(self) -> &'static str {
        match self {
            Syntax::Hermes => "<tool_call>",
            Syntax::Gemma => "<|tool_call>",
        }
    }
    fn close(self) -> &'static str {
        match self {
            Syntax::Hermes => "</tool_call>",
            Syntax::Gemma => "<tool_call|>",
        }
    }
}

const SYNTAXES: [Syntax; 2] = [Syntax::Hermes, Syntax::Gemma];

#[derive(Default)]
pub struct ToolParser {
    buf: String,
    open: Option<Syntax>,
}

impl ToolParser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.open {
                None => {
                    let first = SYNTAXES
                        .iter()
                        .filter_map(|s| self.buf.find(s.open()).map(|i| (i, *s)))
                        .min_by_key(|(i, _)| *i);
                    match first {
                        Some((i, s)) => {
                            push_text(&mut out, &self.buf[..i]);
                            self.buf.drain(..i + s.open().len());
                            self.open = Some(s);
                        }
                        None => {
                            let k =
                                safe_len(&self.buf, &[Syntax::Hermes.open(), Syntax::Gemma.open()]);
                            let now: String = self.buf.drain(..k).collect();
                            push_text(&mut out, &now);
                            return out;
                        }
                    }
                }
                Some(s) => match self.buf.find(s.close()) {
                    Some(i) => {
                        let inner: String = self.buf[..i].to_owned();
                        self.buf.drain(..i + s.close().len());
                        self.open = None;
                        // a malformed block is dropped, as in the reference server
                        if let Some(call) = parse_call(s, &inner) {
                            out.push(Piece::Call(call));
                        }
                    }
                    None => return out,
                },
            }
        }
    }

    /// Releases held text; an unclosed call block is returned as plain text.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut rest = String::new();
        if let Some(s) = self.open.take() {
            rest.push_str(s.open());
        }
        rest.push_str(&std::mem::take(&mut self.buf));
        push_text(&mut out, &rest);
        out
    }
}

fn push_text(out: &mut Vec<Piece>, t: &str) {
    if !t.is_empty() {
        out.push(Piece::Text(t.to_owned()));
    }
}

/// Parses a whole text at once: (content without call blocks, calls).
pub fn parse_all(text: &str) -> (String, Vec<ToolCall>) {
    let mut p = ToolParser::new();
    let mut pieces = p.push(text);
    pieces.extend(p.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}

fn new_call(name: String, arguments: String) -> ToolCall {
    ToolCall {
        id: format!("call_{}", crate::openai::random_hex(12)),
        name,
        arguments,
    }
}

fn parse_call(s: Syntax, inner: &str) -> Option<ToolCall> {
    match s {
        Syntax::Hermes => parse_hermes(inner),
        Syntax::Gemma => parse_gemma(inner),
    }
}

fn parse_hermes(inner: &str) -> Option<ToolCall> {
    let v: Json = serde_json::from_str(inner.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let arguments = match v.get("arguments") {
        None | Some(Json::Null) => "{}".to_owned(),
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some(new_call(name, arguments))
}

const QUOTE: &str = "<|\"|>";

fn parse_gemma(inner: &str) -> Option<ToolCall> {
    let rest = inner.trim().strip_prefix("call:")?;
    let open = rest.find('{')?;
    let name = rest[..open].trim();
    let body = rest[open + 1..].trim_end().strip_suffix('}')?;
    if name.is_empty() {
        return None;
    }
    let mut args = Map::new();
    for item in split_outside_quotes(body) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (k, v) = item.split_once(':')?;
        args.insert(k.trim().to_owned(), gemma_value(v.trim()));
    }
    Some(new_call(name.to_owned(), Json::Object(args).to_string()))
}

/// Splits on commas that are not inside `<|"|>…<|"|>` strings.
fn split_outside_quotes(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut i, mut quoted) = (0, 0, false);
    while i < s.len() {
        if s[i..].starts_with(QUOTE) {
            quoted = !quoted;
            i += QUOTE.len();
        } else if !quoted && s.as_bytes()[i] == b',' {
            parts.push(&s[start..i]);
            i += 1;
            start = i;
        } else {
            i += s[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    parts.push(&s[start..]);
    parts
}

fn gemma_value(v: &str) -> Json {
    if let Some(s) = v.strip_prefix(QUOTE).and_then(|x| x.strip_suffix(QUOTE)) {
        return Json::String(s.to_owned());
    }
    match v {
        "true" | "True" => Json::Bool(true),
        "false" | "False" => Json::Bool(false),
        "null" | "None" => Json::Null,
        _ => {
            if let Ok(i) = v.parse::<i64>() {
                Json::from(i)
            } else if let Some(f) = v.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Json::Number(f)
            } else {
                Json::String(v.to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stream(chunks: &[&str]) -> Vec<Piece> {
        let mut p = ToolParser::new();
        let mut out: Vec<Piece> = chunks.iter().flat_map(|c| p.push(c)).collect();
        out.extend(p.finish());
        // merge adjacent text for comparison
        let mut merged: Vec<Piece> = Vec::new();
        for piece in out {
            match (merged.last_mut(), piece) {
                (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
                (_, p) => merged.push(p),
            }
        }
        merged
    }

    fn call(p: &Piece) -> (&str, Json) {
        match p {
            Piece::Call(c) => (c.name.as_str(), serde_json::from_str(&c.arguments).unwrap()),
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn hermes_call_split_across_rounds() {
        let full = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        for k in 1..full.len() {
            if !full.is_char_boundary(k) {
                continue;
            }
            let out = stream(&[&full[..k], &full[k..]]);
            assert_eq!(out[0], Piece::Text("Let me check.".into()), "split at {k}");
            assert_eq!(call(&out[1]), ("get_weather", json!({"city": "Paris"})));
            assert_eq!(out.len(), 2);
        }
    }

    #[test]
    fn text_streams_before_the_call_closes() {
        let mut p = ToolParser::new();
        assert_eq!(p.push("Hi <"), vec![Piece::Text("Hi ".into())]);
        assert_eq!(p.push("tool_call>{\"name\":"), vec![]);
        let out = p.push("\"f\"}</tool_call> after");
        assert_eq!(call(&out[0]), ("f", json!({})));
        assert_eq!(out[1], Piece::Text(" after".into()));
    }

    #[test]
    fn gemma_call_with_typed_values() {
        let out = stream(&["<|tool_call>call:book{city:<|\"|>Rome, IT<|\"|>,nights:3,price:9.5,ok:true,x:null}<tool_call|>"]);
        assert_eq!(
            call(&out[0]),
            (
                "book",
                json!({"city": "Rome, IT", "nights": 3, "price": 9.5, "ok": true, "x": null})
            )
        );
    }

    #[test]
    fn malformed_blocks_are_dropped_and_unclosed_ones_kept_as_text() {
        let (content, calls) = parse_all("a<tool_call>{not json}</tool_call>b");
        assert_eq!((content.as_str(), calls.len()), ("ab", 0));
        let (content, calls) = parse_all("a<tool_call>{\"name\": \"f\"");
        assert_eq!(
            (content.as_str(), calls.len()),
            ("a<tool_call>{\"name\": \"f\"", 0)
        );
    }

    #[test]
    fn string_arguments_kept_and_ids_unique() {
        let (_, calls) = parse_all(
            "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call><tool_call>{\"name\":\"g\"}</tool_call>",
        );
        assert_eq!(calls[0].arguments, "{\"a\":1}");
        assert_ne!(calls[0].id, calls[1].id);
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29);
    }
}
