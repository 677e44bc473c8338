//! Tool-call extraction from generated text: Hermes/Qwen3 `<tool_call>{json}</tool_call>` and
//! Gemma-4 `<|tool_call>call:NAME{k:v,…}<tool_call|>` (nested objects and lists, as the Gemma 4
//! chat template writes them; arguments come out as JSON). Streaming-safe: text outside calls is
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

/// `call:NAME{key:value,…}` as the Gemma 4 chat template writes a call (`format_argument`
/// with bare keys): strings between `<|"|>` marks, nested `{…}` objects and `[…]` lists,
/// numbers, `true`/`false`, `None`/`null`. Keys may also be `<|"|>`-quoted. Anything
/// else (trailing text, an unclosed brace) makes the block malformed.
fn parse_gemma(inner: &str) -> Option<ToolCall> {
    let rest = inner.trim().strip_prefix("call:")?;
    let open = rest.find('{')?;
    let name = rest[..open].trim();
    if name.is_empty() {
        return None;
    }
    let mut p = GemmaArgs {
        s: rest[open..].trim_end(),
        i: 0,
    };
    let args = p.value(0)?;
    p.skip_ws();
    if p.i != p.s.len() || !args.is_object() {
        return None;
    }
    Some(new_call(name.to_owned(), args.to_string()))
}

/// Nesting deeper than this is refused (a malformed block, not a stack overflow).
const MAX_DEPTH: usize = 64;

/// A cursor over the argument text of one Gemma call.
struct GemmaArgs<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> GemmaArgs<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }

    fn skip_ws(&mut self) {
        let r = self.rest();
        self.i += r.len() - r.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.rest().starts_with(c) {
            self.i += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// `<|"|>text<|"|>`: the text as written (the template escapes nothing).
    fn quoted(&mut self) -> Option<String> {
        let body = self.rest().strip_prefix(QUOTE)?;
        let end = body.find(QUOTE)?;
        let text = body[..end].to_owned();
        self.i += QUOTE.len() + end + QUOTE.len();
        Some(text)
    }

    fn value(&mut self, depth: usize) -> Option<Json> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_ws();
        let r = self.rest();
        if r.starts_with(QUOTE) {
            return self.quoted().map(Json::String);
        }
        if r.starts_with('{') {
            return self.object(depth);
        }
        if r.starts_with('[') {
            return self.list(depth);
        }
        let end = r.find([',', '}', ']']).unwrap_or(r.len());
        let word = r[..end].trim();
        self.i += end;
        if word.is_empty() {
            return None;
        }
        Some(scalar(word))
    }

    fn object(&mut self, depth: usize) -> Option<Json> {
        self.eat('{');
        let mut map = Map::new();
        if self.eat('}') {
            return Some(Json::Object(map));
        }
        loop {
            self.skip_ws();
            let key = if self.rest().starts_with(QUOTE) {
                self.quoted()?
            } else {
                let r = self.rest();
                let end = r.find(':')?;
                let key = r[..end].trim();
                if key.is_empty() || key.contains([',', '{', '}', '[', ']']) {
                    return None;
                }
                self.i += end;
                key.to_owned()
            };
            if !self.eat(':') {
                return None;
            }
            let v = self.value(depth + 1)?;
            map.insert(key, v);
            if self.eat('}') {
                return Some(Json::Object(map));
            }
            if !self.eat(',') {
                return None;
            }
        }
    }

    fn list(&mut self, depth: usize) -> Option<Json> {
        self.eat('[');
        let mut items = Vec::new();
        if self.eat(']') {
            return Some(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if self.eat(']') {
                return Some(Json::Array(items));
            }
            if !self.eat(',') {
                return None;
            }
        }
    }
}

/// A bare word: what Jinja prints for a number, a boolean or None; other words stay text.
fn scalar(v: &str) -> Json {
    match v {
        "true" | "True" => Json::Bool(true),
        "false" | "False" => Json::Bool(false),
        "null" | "None" => Json::Null,
        _ => {
            if let Ok(i) = v.parse::<i64>() {
                Json::from(i)
            } else if let Some(f) = v
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .and_then(serde_json::Number::from_f64)
            {
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
    fn gemma_nested_objects_lists_and_several_calls() {
        let q = |s: &str| format!("<|\"|>{s}<|\"|>");
        let text = format!(
            "Sure.<|tool_call>call:search{{dates:{{depart:{},return:None}},filters:[{{airline:{},max_stops:0}},{{airline:{}}}],ratios:[0.25,-3,1e-05,2.0],tags:[{},{}],empty:{{}},none:[],ok:true}}<tool_call|><|tool_call>call:get_time{{}}<tool_call|>",
            q("2026-05-01"),
            q("AF"),
            q("KL"),
            q("quiet, please: {x}"),
            q("say \"hi\"\nnewline")
        );
        for k in [1, 7, 40, text.len() / 2, text.len() - 3] {
            let k = (0..=k).rev().find(|&i| text.is_char_boundary(i)).unwrap();
            let out = stream(&[&text[..k], &text[k..]]);
            assert_eq!(out[0], Piece::Text("Sure.".into()), "split at {k}");
            assert_eq!(
                call(&out[1]),
                (
                    "search",
                    json!({"dates": {"depart": "2026-05-01", "return": null},
                           "filters": [{"airline": "AF", "max_stops": 0}, {"airline": "KL"}],
                           "ratios": [0.25, -3, 1e-05, 2.0],
                           "tags": ["quiet, please: {x}", "say \"hi\"\nnewline"],
                           "empty": {}, "none": [], "ok": true})
                )
            );
            assert_eq!(call(&out[2]), ("get_time", json!({})));
            assert_eq!(out.len(), 3);
        }
        // keys quoted the way format_argument writes them by default
        let (_, calls) =
            parse_all("<|tool_call>call:f{<|\"|>a b<|\"|>:{<|\"|>c<|\"|>:1}}<tool_call|>");
        assert_eq!(calls[0].arguments, r#"{"a b":{"c":1}}"#);
    }

    #[test]
    fn gemma_malformed_calls_are_dropped() {
        for bad in [
            "call:f{a:1",
            "call:f{a:1}}",
            "call:f{a:1} trailing",
            "call:f{a:[1,2}",
            "call:f{:1}",
            "call:f{a}",
            "call:f{a:<|\"|>unterminated}",
            "call:{a:1}",
            "f{a:1}",
        ] {
            let (content, calls) = parse_all(&format!("x<|tool_call>{bad}<tool_call|>y"));
            assert_eq!((content.as_str(), calls.len()), ("xy", 0), "{bad}");
        }
        let deep = format!("call:f{{a:{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert!(parse_all(&format!("<|tool_call>{deep}<tool_call|>"))
            .1
            .is_empty());
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
