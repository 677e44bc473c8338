//! Tokenizers against Python goldens: the real Qwen3 tokenizer.json (HF `tokenizers`) and the
//! SmolLM2 tokenizer rebuilt from GGUF metadata (transformers' GGUF conversion).

use dspark_engine::chat_template::ChatOptions;
use dspark_engine::detok::StreamDecoder;
use dspark_engine::tokenizer::Tokenizer;
use dspark_tests::{artefact, as_u32s, golden};

fn smollm2() -> Tokenizer {
    Tokenizer::from_gguf_file(&artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap()
}

#[test]
fn qwen3_encode_decode_goldens() {
    let tok = Tokenizer::from_dir(&artefact("qwen3-tokenizer")).unwrap();
    let g = golden("qwen3_tokenizer.json");
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids = as_u32s(&case["ids"]);
        assert_eq!(tok.encode(text, false).unwrap(), ids, "encode {text:?}");
        assert_eq!(
            tok.decode(&ids, false).unwrap(),
            case["decoded"].as_str().unwrap(),
            "decode {text:?}"
        );
        let mut dec = StreamDecoder::new(&tok, false);
        let mut streamed = String::new();
        for id in &ids {
            let piece = dec.push(&[*id]).unwrap();
            assert!(
                !piece.contains('\u{FFFD}') || text.contains('\u{FFFD}'),
                "{text:?}: {piece:?}"
            );
            streamed.push_str(&piece);
        }
        streamed.push_str(&dec.flush().unwrap());
        assert_eq!(
            streamed,
            case["decoded"].as_str().unwrap(),
            "stream {text:?}"
        );
    }
}

#[test]
fn smollm2_gguf_tokenizer_goldens() {
    let tok = smollm2();
    let g = golden("smollm2_greedy.json");
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert!(tok.eos_ids().contains(&2), "{:?}", tok.eos_ids());
    for check in g["tokenizer_checks"].as_array().unwrap() {
        let text = check["text"].as_str().unwrap();
        let ids = as_u32s(&check["ids"]);
        assert_eq!(tok.encode(text, false).unwrap(), ids, "encode {text:?}");
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "decode {text:?}");
    }
    let tmpl = tok.chat_template().expect("GGUF chat template");
    let opts = ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    for run in g["runs"].as_array().unwrap() {
        let prompt = run["prompt"].as_str().unwrap();
        let messages = serde_json::json!([{"role": "user", "content": prompt}]);
        let rendered = tmpl.render(&messages, &opts).unwrap();
        assert_eq!(
            rendered,
            run["rendered"].as_str().unwrap(),
            "render {prompt:?}"
        );
        assert_eq!(
            tok.encode(&rendered, false).unwrap(),
            as_u32s(&run["prompt_ids"]),
            "ids {prompt:?}"
        );
        let new = as_u32s(&run["new_tokens"]);
        assert_eq!(
            tok.decode(&new, false).unwrap(),
            run["text"].as_str().unwrap(),
            "text {prompt:?}"
        );
    }
}

fn qwen3() -> Tokenizer {
    Tokenizer::from_dir(&artefact("qwen3-tokenizer")).unwrap()
}

#[test]
fn qwen3_specials_eos_and_template() {
    let mut tok = qwen3();
    let ids = tok
        .encode("<|im_start|>user\nHello<|im_end|>\n<think>", false)
        .unwrap();
    assert_eq!(ids, [151644, 872, 198, 9707, 151645, 198, 151667]);
    assert_eq!(tok.vocab_size(), 151669);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(151645));
    assert_eq!(tok.id_to_token(151667).as_deref(), Some("<think>"));
    assert_eq!(tok.eos_ids(), &[151643, 151645]);
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert_eq!(tok.bos_token(), None);
    assert!(tok.chat_template().is_some());
    let with_special = tok.encode("<|im_start|>hi<|im_end|><think>", true).unwrap();
    assert_eq!(tok.decode(&with_special, true).unwrap(), "hi<think>");
    tok.add_eos_id(7);
    tok.add_eos_id(151645);
    assert_eq!(tok.eos_ids(), &[7, 151643, 151645]);
    assert!(tok.is_eos(7) && !tok.is_eos(8));
}

/// The Qwen3 vocab/merges fed through the GGUF path (pre "qwen2", added tokens as
/// control/user-defined types) must tokenize like tokenizer.json itself.
#[test]
fn qwen3_through_gguf_metadata() {
    use dspark_engine::tokenizer::GgufTokenizerMeta;
    let path = artefact("qwen3-tokenizer/tokenizer.json");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let vocab = j["model"]["vocab"].as_object().unwrap();
    let added = j["added_tokens"].as_array().unwrap();
    let n = vocab.len() + added.len();
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1; n];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_owned();
        types[id] = if a["special"].as_bool().unwrap() {
            3
        } else {
            4
        };
    }
    let merges = j["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            pair => format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            ),
        })
        .collect();
    let meta = GgufTokenizerMeta {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens,
        merges,
        scores: vec![],
        token_types: types,
        bos_id: Some(151643),
        eos_id: Some(151645),
        unk_id: None,
        pad_id: Some(151643),
        add_bos: false,
        chat_template: None,
    };
    let gguf = Tokenizer::from_gguf(&meta).unwrap();
    let g = golden("qwen3_tokenizer.json");
    for case in g["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        // GGUF tokenizers have no NFC normalizer; skip text that NFC would change.
        if !text.is_ascii() && text.chars().any(|c| ('\u{300}'..='\u{36f}').contains(&c)) {
            continue;
        }
        assert_eq!(
            gguf.encode(text, false).unwrap(),
            as_u32s(&case["ids"]),
            "{text:?}"
        );
    }
    assert_eq!(gguf.eos_ids(), &[151643, 151645]);
}
