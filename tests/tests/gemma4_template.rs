//! The Gemma 4 chat template (PyPI llama-cpp-python 0.3.36's vendored llama.cpp
//! `models/templates/google-gemma-4-31B-it.jinja`, fetched by scripts/fetch-artefacts.sh)
//! rendered by our minijinja renderer against transformers' `apply_chat_template(...,
//! tokenize=False)` goldens (scripts/fixtures/make_gemma4_template_golden.py), byte for byte;
//! and the Gemma 4 tokenizer of the same package's vocab GGUF.

use dspark_engine::chat_template::{ChatOptions, ChatTemplate};
use dspark_engine::tokenizer::Tokenizer;
use dspark_tests::{artefact, golden};
use serde_json::Value as Json;

fn template() -> ChatTemplate {
    let path = artefact("gemma4/google-gemma-4-31B-it.jinja");
    let src = std::fs::read_to_string(path).unwrap();
    ChatTemplate::new(&src, Some("<bos>".into()), Some("<eos>".into())).unwrap()
}

fn options(case: &Json) -> ChatOptions {
    ChatOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        tools: Some(case["tools"].clone()).filter(|t| !t.is_null()),
        kwargs: case["kwargs"].as_object().cloned().unwrap_or_default(),
    }
}

#[test]
fn gemma4_template_matches_transformers() {
    let tmpl = template();
    let g = golden("chat_template_gemma4.json");
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    let mut failures = Vec::new();
    let mut string_args = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let expected = case["expected"].as_str().unwrap();
        match tmpl.render(&case["messages"], &options(case)) {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{name}:\n--- got\n{got:?}\n--- want\n{expected:?}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
        // JSON-string arguments render as the parsed mapping (what `transformers serve` hands
        // the template), never copied verbatim between the call's braces
        if let Some(as_given) = case.get("expected_as_given").and_then(Json::as_str) {
            assert_ne!(as_given, expected, "{name}");
            string_args += 1;
        }
    }
    dspark_tests::assert_none_failed(&failures, cases.len(), "cases");
    assert_eq!(string_args, 2);
}

/// Conversations the template itself fails on in transformers fail here too.
#[test]
fn gemma4_template_refusals_match() {
    let tmpl = template();
    let g = golden("chat_template_gemma4.json");
    let refused = g["refused"].as_array().unwrap();
    assert!(!refused.is_empty());
    for case in refused {
        let name = case["name"].as_str().unwrap();
        let r = tmpl.render(&case["messages"], &options(case));
        assert!(r.is_err(), "{name}: rendered {r:?}");
    }
}

fn gemma4_vocab() -> Tokenizer {
    Tokenizer::from_gguf_file(&artefact("gemma4/ggml-vocab-gemma-4.gguf")).unwrap()
}

/// The Gemma 4 tokenizer rebuilt from the vocab-only GGUF that the same sdist ships
/// (`vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf`) against llama.cpp's own test vectors
/// for it (`.inp` strings, `.out` ids).
#[test]
fn gemma4_vocab_matches_llama_cpp_vectors() {
    let tok = gemma4_vocab();
    let read = |name: &str| std::fs::read_to_string(artefact(&format!("gemma4/{name}"))).unwrap();
    let inputs = read("ggml-vocab-gemma-4.gguf.inp");
    let outputs = read("ggml-vocab-gemma-4.gguf.out");
    let inputs: Vec<&str> = inputs.split("\n__ggml_vocab_test__\n").collect();
    let outputs: Vec<&str> = outputs.lines().collect();
    assert!(inputs.len() >= 40 && outputs.len() >= inputs.len());
    let mut failures = Vec::new();
    for (text, ids) in inputs.iter().zip(&outputs) {
        let want: Vec<u32> = ids.split_whitespace().map(|i| i.parse().unwrap()).collect();
        let got = tok.encode(text, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
    }
    dspark_tests::assert_none_failed(&failures, inputs.len(), "inputs");
}

/// The template's markers are single tokens of the real vocabulary; the two that end a model
/// turn (`<turn|>`, and `<|tool_response>` after a call) are in the eos set (as in llama.cpp's
/// end-of-generation list for gemma4); the call and thought-channel markers survive decoding
/// with special tokens skipped, so the server's tool parser and thinking splitter see them.
#[test]
fn gemma4_markers_eos_and_decoding() {
    let tok = gemma4_vocab();
    let id = |t: &str| {
        let ids = tok.encode(t, false).unwrap();
        assert_eq!(ids.len(), 1, "{t}: {ids:?}");
        ids[0]
    };
    let eos = tok.eos_ids();
    for t in ["<eos>", "<turn|>", "<|tool_response>"] {
        assert!(eos.contains(&id(t)), "{t} not in {eos:?}");
    }
    for t in [
        "<|turn>",
        "<|tool_call>",
        "<tool_call|>",
        "<|\"|>",
        "<|channel>",
        "<|think|>",
    ] {
        assert!(!eos.contains(&id(t)), "{t} in {eos:?}");
    }
    let g = golden("chat_template_gemma4.json");
    let all: String = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["expected"].as_str().unwrap())
        .collect();
    assert!(all.contains("<turn|>") && all.contains("<|tool_response>"));
    let prompt = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tool_call_nested_arguments")
        .unwrap()["expected"]
        .as_str()
        .unwrap();
    let ids = tok.encode(prompt, false).unwrap();
    assert_eq!(ids[0], id("<bos>"));
    assert_eq!(tok.decode(&ids, false).unwrap(), prompt);
    // the thought channel too (the server splits it into reasoning_content, thinking.rs)
    for text in [
        "<|tool_call>call:f{a:<|\"|>x y<|\"|>,n:3}<tool_call|>",
        "<|channel>thought\nHmm.\n<channel|>Yes.",
    ] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, true).unwrap(), text);
    }
}
