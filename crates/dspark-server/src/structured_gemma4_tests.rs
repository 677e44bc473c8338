//! Gemma 4 call grammars against the real Gemma 4 tokenizer (the vocab GGUF and chat template
//! of scripts/fetch-artefacts.sh): every call the template writes in the transformers goldens
//! is accepted; calls sampled through the grammar from random logits parse back (`tools.rs`)
//! into the forced function with arguments valid for its schema; strings cannot hold the
//! delimiters; calls the syntax cannot write are refused.

use std::sync::{Arc, OnceLock};

use dspark_engine::chat_template::ChatTemplate;
use dspark_engine::constrain::{Compiler, Grammar};
use dspark_engine::tokenizer::{artefact_dir, Tokenizer};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value as Json};

use super::*;
use crate::structured::{call_syntax, constraint, tool_grammar, CallSyntax, Output, Structured};
use crate::tools::parse_all;

/// The Gemma 4 tokenizer with its chat template, and its grammar compiler (built once).
fn gemma4() -> &'static (Arc<Tokenizer>, Arc<Compiler>) {
    static G: OnceLock<(Arc<Tokenizer>, Arc<Compiler>)> = OnceLock::new();
    G.get_or_init(|| {
        let dir = artefact_dir().join("gemma4");
        let hint = "run `bash scripts/fetch-artefacts.sh` first";
        let mut tok = Tokenizer::from_gguf_file(&dir.join("ggml-vocab-gemma-4.gguf"))
            .unwrap_or_else(|e| panic!("{}: {e}: {hint}", dir.display()));
        let src = std::fs::read_to_string(dir.join("google-gemma-4-31B-it.jinja"))
            .unwrap_or_else(|e| panic!("{}: {e}: {hint}", dir.display()));
        let tmpl = ChatTemplate::new(&src, Some("<bos>".into()), Some("<eos>".into())).unwrap();
        tok.set_chat_template(Some(tmpl));
        let tok = Arc::new(tok);
        let compiler = crate::structured::compiler_for(&tok).unwrap();
        (tok, compiler)
    })
}

fn grammar(functions: &[Json]) -> Grammar {
    Grammar::Lark(call_grammar(functions).unwrap())
}

/// Whether `text`, tokenized as the model would read it, is a complete match of `g`.
fn accepts(g: &Grammar, text: &str) -> bool {
    let (tok, compiler) = gemma4();
    let mut c = compiler.compile(g).unwrap();
    for id in tok.encode(text, false).unwrap() {
        if !c.advance(id).unwrap() {
            return false;
        }
    }
    c.is_accepting()
}

/// Text generated under `g` by a uniform random choice (seeded) among the allowed tokens each
/// step, as the argmax of i.i.d. random logits would choose.
fn sample(g: &Grammar, seed: u64) -> String {
    let (tok, compiler) = gemma4();
    let mut c = compiler.compile(g).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut ids = Vec::new();
    let vocab = tok.vocab_size();
    for _ in 0..600 {
        let mut row = vec![0f32; vocab];
        c.mask(&mut row).unwrap();
        let allowed: Vec<u32> = (0..row.len() as u32)
            .filter(|&i| row[i as usize].is_finite())
            .collect();
        assert!(
            !allowed.is_empty(),
            "seed {seed}: no token allowed after {ids:?}"
        );
        let next = allowed[rng.random_range(0..allowed.len())];
        if c.is_eos(next) {
            return tok.decode(&ids, true).unwrap();
        }
        assert!(c.advance(next).unwrap());
        ids.push(next);
    }
    panic!(
        "seed {seed}: no end after 600 tokens: {:?}",
        tok.decode(&ids, true)
    );
}

/// `v` follows `schema` for the keywords the grammar expresses.
fn conforms(schema: &Json, v: &Json) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    let bad = || Err(format!("{v} does not follow {schema}"));
    if v.is_null() && s.get("nullable") == Some(&json!(true)) {
        return Ok(());
    }
    if let Some(c) = s.get("const") {
        return if c == v { Ok(()) } else { bad() };
    }
    if let Some(e) = s.get("enum").and_then(Json::as_array) {
        return if e.contains(v) { Ok(()) } else { bad() };
    }
    if let Some(any) = s.get("anyOf").and_then(Json::as_array) {
        return if any.iter().any(|a| conforms(a, v).is_ok()) {
            Ok(())
        } else {
            bad()
        };
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Json::String(t)) => vec![t],
        Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).collect(),
        _ => return Ok(()),
    };
    let size = |k: &str, n: usize| {
        let at_least = s
            .get(&format!("min{k}"))
            .and_then(Json::as_u64)
            .unwrap_or(0);
        let at_most = s.get(&format!("max{k}")).and_then(Json::as_u64);
        n as u64 >= at_least && at_most.is_none_or(|m| n as u64 <= m)
    };
    let ok = types.iter().any(|t| match (*t, v) {
        ("string", Json::String(x)) => size("Length", x.chars().count()),
        ("integer", Json::Number(n)) => n.is_i64() || n.is_u64(),
        ("number", Json::Number(_)) | ("boolean", Json::Bool(_)) | ("null", Json::Null) => true,
        ("array", Json::Array(items)) => {
            size("Items", items.len())
                && items
                    .iter()
                    .all(|i| conforms(s.get("items").unwrap_or(&json!(true)), i).is_ok())
        }
        ("object", Json::Object(m)) => {
            let props = s.get("properties").and_then(Json::as_object);
            let required = s.get("required").and_then(Json::as_array);
            required
                .into_iter()
                .flatten()
                .all(|r| m.contains_key(r.as_str().unwrap()))
                && m.iter().all(|(k, x)| match props.and_then(|p| p.get(k)) {
                    Some(p) => conforms(p, x).is_ok(),
                    None => s.get("additionalProperties") != Some(&json!(false)),
                })
        }
        _ => false,
    });
    if ok {
        Ok(())
    } else {
        bad()
    }
}

/// The goldens' tool-call conversations: (tools' functions, the call blocks the template wrote).
fn golden_calls() -> Vec<(Vec<Json>, Vec<String>)> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/golden/chat_template_gemma4.json"
    );
    let g: Json = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let mut out = Vec::new();
    for case in g["cases"].as_array().unwrap() {
        let Some(tools) = case["tools"].as_array() else {
            continue;
        };
        let text = case["expected"].as_str().unwrap();
        let blocks: Vec<String> = text
            .split(OPEN)
            .skip(1)
            .map(|rest| format!("{OPEN}{}{CLOSE}", rest.split(CLOSE).next().unwrap()))
            .collect();
        if !blocks.is_empty() {
            out.push((
                tools.iter().map(|t| t["function"].clone()).collect(),
                blocks,
            ));
        }
    }
    out
}

#[test]
fn every_call_the_template_writes_is_accepted() {
    let mut checked = 0;
    for (functions, blocks) in golden_calls() {
        let g = grammar(&functions);
        for b in &blocks {
            assert!(accepts(&g, b), "{b}");
            // the same call of a function not offered is not
            assert!(!accepts(&g, &b.replacen("call:", "call:x", 1)), "{b}");
            checked += 1;
        }
    }
    // 16 calls in 14 conversations (nested objects, lists, None, floats, an extra key)
    assert_eq!(checked, 16);
}

/// Two functions whose arguments keep sampled output short: bounded strings and lists, no
/// extra keys.
fn bounded_functions() -> Vec<Json> {
    vec![
        json!({"name": "get_weather", "parameters": {"type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"}},
            "required": ["city"], "additionalProperties": false}}),
        json!({"name": "plan-trip.v2", "parameters": {"type": "object",
            "properties": {
                "trip": {"type": "object", "properties": {
                    "from": {"type": "string", "minLength": 2, "maxLength": 6},
                    "legs": {"type": "array", "items": {"type": "number"}, "maxItems": 3}},
                    "required": ["from", "legs"], "additionalProperties": false},
                "flags": {"type": "array", "items": {"type": "boolean"},
                          "minItems": 1, "maxItems": 2},
                "note": {"type": ["string", "null"], "maxLength": 5},
                "mode": {"const": "fast"},
                "pick": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]},
                "odd key": {"type": "boolean"}},
            "required": ["trip", "flags", "mode", "pick", "odd key"],
            "additionalProperties": false}}),
    ]
}

#[test]
fn sampled_calls_parse_back_to_valid_arguments() {
    let functions = bounded_functions();
    let named = std::slice::from_ref(&functions[1]);
    let mut names = Vec::new();
    for (forced, seeds) in [(functions.as_slice(), 0..16), (named, 100..108)] {
        let g = grammar(forced);
        for seed in seeds {
            let text = sample(&g, seed);
            let (content, calls) = parse_all(&text);
            assert_eq!((content.as_str(), calls.len()), ("", 1), "{text}");
            let f = forced
                .iter()
                .find(|f| f["name"] == calls[0].name)
                .unwrap_or_else(|| panic!("not a forced function: {text}"));
            let args: Json = serde_json::from_str(&calls[0].arguments).unwrap();
            conforms(&f["parameters"], &args).unwrap_or_else(|e| panic!("{e}: {text}"));
            names.push(calls[0].name.clone());
        }
    }
    // `required` reached both functions; the named choice only its own
    assert!(names[..16].iter().any(|n| n == "get_weather"), "{names:?}");
    assert!(names
        .iter()
        .all(|n| n == "get_weather" || n == "plan-trip.v2"));
    assert!(names[16..].iter().all(|n| n == "plan-trip.v2"), "{names:?}");
}

#[test]
fn strings_cannot_hold_the_delimiters_and_schemas_bind() {
    let g = grammar(&bounded_functions()[..1]);
    let call = |args: &str| format!("<|tool_call>call:get_weather{{{args}}}<tool_call|>");
    let q = |s: &str| format!("{QUOTE}{s}{QUOTE}");
    for good in [
        format!("city:{}", q("Paris")),
        format!("city:{},days:-12,unit:{}", q("Rome, IT"), q("celsius")),
        format!("city:{}", q("a \"b\"\n{x}")),
        format!("city:{}", q("")),
    ] {
        assert!(accepts(&g, &call(&good)), "{good}");
    }
    for bad in [
        format!("city:{}", q("Pa<|\"|>ris")),
        format!("city:{}", q("Pa<tool_call|>ris")),
        format!("city:{}", q("thirteen char")),
        format!("unit:{}", q("celsius")),
        format!("city:{},unit:{}", q("Paris"), q("kelvin")),
        format!("city:{},days:1.5", q("Paris")),
        format!("city:{},days:007", q("Paris")),
        format!("city:{},extra:1", q("Paris")),
        format!("days:3,city:{}", q("Paris")),
        format!("city: {}", q("Paris")),
        "city:Paris".to_owned(),
    ] {
        assert!(!accepts(&g, &call(&bad)), "{bad}");
    }
    assert!(!accepts(
        &g,
        &format!("{} ", call(&format!("city:{}", q("x"))))
    ));
}

#[test]
fn schemas_it_cannot_express_allow_any_value() {
    let f = json!({"name": "f", "parameters": {"type": "object",
        "properties": {"r": {"$ref": "#/$defs/x"}, "deep": {"type": "object"}},
        "required": ["r"]}});
    let g = grammar(&[f]);
    let q = |s: &str| format!("{QUOTE}{s}{QUOTE}");
    let text = format!(
        "<|tool_call>call:f{{deep:{{a:[1,{},{{b:None}}],{}:-2.5e3}},r:[true,null]}}<tool_call|>",
        q("x"),
        q("quoted key")
    );
    assert!(accepts(&g, &text), "{text}");
    let (_, calls) = parse_all(&text);
    let args: Json = serde_json::from_str(&calls[0].arguments).unwrap();
    assert_eq!(
        args,
        json!({"deep": {"a": [1, "x", {"b": null}], "quoted key": -2500.0}, "r": [true, null]})
    );
    assert!(!accepts(&g, "<|tool_call>call:f{deep:{}}<tool_call|>"));
}

#[test]
fn calls_the_syntax_cannot_write_are_refused() {
    let named = |n: &str| json!({"name": n});
    for n in ["", "get weather", "f{", "a<tool_call|>"] {
        assert_eq!(
            call_grammar(&[named(n)]),
            Err(CallSyntaxError::Name(n.into()))
        );
    }
    let with = |p: Json| json!({"name": "f", "parameters": p});
    let e = call_grammar(&[with(json!({"properties": {"k": {"enum": ["a<|\"|>b"]}}}))]);
    assert!(matches!(e, Err(CallSyntaxError::Delimiter { .. })), "{e:?}");
    let e = call_grammar(&[with(json!({"properties": {"x<tool_call|>": {}}}))]);
    assert!(matches!(e, Err(CallSyntaxError::Delimiter { .. })), "{e:?}");
    assert_eq!(call_grammar(&[]), Err(CallSyntaxError::NoFunction));
    // through the server's path: a 400 naming tool_choice
    let (tok, _) = gemma4();
    let s = Structured {
        param: "tool_choice",
        output: Output::ToolCall(vec![named("get weather")]),
    };
    let e = constraint(tok, &s).unwrap_err();
    assert_eq!(e.param(), Some("tool_choice"));
    assert!(e.to_string().contains("Gemma 4"), "{e}");
}

#[test]
fn the_template_picks_the_call_syntax() {
    let (tok, _) = gemma4();
    let f = bounded_functions();
    assert_eq!(call_syntax(tok), CallSyntax::Gemma4);
    assert_eq!(tool_grammar(tok, &f).unwrap(), grammar(&f));
    let s = Structured {
        param: "tool_choice",
        output: Output::ToolCall(f.clone()),
    };
    constraint(tok, &s).unwrap();
    // the same vocabulary without the template: Hermes calls
    let mut plain =
        Tokenizer::from_gguf_file(&artefact_dir().join("gemma4/ggml-vocab-gemma-4.gguf")).unwrap();
    plain.set_chat_template(None);
    assert_eq!(call_syntax(&plain), CallSyntax::Hermes);
    assert_eq!(
        tool_grammar(&plain, &f).unwrap(),
        crate::structured::tool_call_grammar(&f)
    );
}
