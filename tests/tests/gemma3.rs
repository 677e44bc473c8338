//! Real weights: Gemma 3 270M (base, GGUF Q4_K_M: Q4_K/Q5_0/Q6_K/Q8_0 tensors) against HF
//! transformers' GGUF loader, which dequantizes to f32 (tests/fixtures/golden/gemma3_270m.json,
//! made by scripts/fixtures/make_gemma3_golden.py). Checks logits on four prompts (one longer
//! than the 512-token sliding window) and 24 greedy tokens each, and the tokenizer the engine
//! builds from the GGUF's SentencePiece vocabulary against the published `tokenizer.json`.
//! Runs on the backend of `DSPARK_BACKEND`.

use dspark_engine::backend::Backend;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::load::load_model;
use dspark_engine::model::transformer::LogitsWanted;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::tokenizer::Tokenizer;
use dspark_tests::{artefact, as_u32s, golden, on_backend};

const GGUF: &str = "gemma3-270m/gemma-3-270m-q4_k_m.gguf";

/// Largest |engine - transformers| logit allowed, on logits of magnitude ~20-40. Both sides
/// compute in f32 from the same dequantized weights (the candle CPU backend dequantizes this
/// file's Q5_0 tensors; its packed Q4_K/Q6_K/Q8_0 kernels reproduce the dequantized products);
/// measured worst 1.0e-4 over 4 prompts x (32 top + 64 strided + rows) logits.
const LOGIT_TOL: f32 = 1e-3;

#[test]
fn gguf_tokenizer_matches_the_published_tokenizer_json() {
    let g = golden("gemma3_270m.json");
    let gguf = Tokenizer::from_gguf_file(&artefact(GGUF)).unwrap();
    for check in g["tokenizer_checks"].as_array().unwrap() {
        let text = check["text"].as_str().unwrap();
        let ids = gguf.encode(text, false).unwrap();
        assert_eq!(ids, as_u32s(&check["ids"]), "ids for {text:?}");
        assert_eq!(gguf.decode(&ids, false).unwrap(), text, "round trip");
    }
    // and on the 80 MT-Bench questions (both turns), against tokenizer.json in Rust
    let reference = Tokenizer::from_dir(&artefact("gemma3-tokenizer")).unwrap();
    let questions = std::fs::read_to_string(artefact("mtbench/question.jsonl")).unwrap();
    let mut n = 0;
    for line in questions.lines() {
        let q: serde_json::Value = serde_json::from_str(line).unwrap();
        for turn in q["turns"].as_array().unwrap() {
            let text = turn.as_str().unwrap();
            assert_eq!(
                gguf.encode(text, false).unwrap(),
                reference.encode(text, false).unwrap(),
                "MT-Bench {}: {text:?}",
                q["question_id"]
            );
            n += 1;
        }
    }
    assert_eq!(n, 160);
    assert_eq!(gguf.encode("Hi", true).unwrap()[0], 2, "<bos> first");
}

#[test]
fn gemma3_270m_matches_transformers_gguf_reference() {
    on_backend!(matches_reference)
}

fn matches_reference<B: Backend>(b: B) {
    let g = golden("gemma3_270m.json");
    let lm = load_model(&b, &artefact(GGUF), None).unwrap();
    // <eos> and <end_of_turn>
    assert!(
        lm.eos_ids().contains(&1) && lm.eos_ids().contains(&106),
        "eos set {:?}",
        lm.eos_ids()
    );
    let step = g["strided_ids"]["step"].as_u64().unwrap() as usize;
    let mut worst = 0f32;
    for run in g["runs"].as_array().unwrap() {
        let prompt = run["prompt"].as_str().unwrap();
        let ids = as_u32s(&run["prompt_ids"]);
        assert_eq!(
            lm.tokenizer.encode(prompt, true).unwrap(),
            ids,
            "{prompt:?}"
        );
        let mut cache = lm.model.new_cache();
        let out = lm
            .model
            .forward(&ids, &mut cache, &[], LogitsWanted::All)
            .unwrap();
        let all = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        let v = lm.model.cfg.vocab_size;
        let row = |p: usize| &all[p * v..(p + 1) * v];
        let mut check = |p: usize, id: usize, want: f64, what: &str| {
            let d = (row(p)[id] - want as f32).abs();
            worst = worst.max(d);
            assert!(
                d <= LOGIT_TOL,
                "{prompt:?} {what}: position {p} id {id}: {} vs {want}",
                row(p)[id]
            );
        };
        let last = ids.len() - 1;
        for pair in run["last_top32"].as_array().unwrap() {
            check(
                last,
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap(),
                "top32",
            );
        }
        for (j, x) in run["last_strided"].as_array().unwrap().iter().enumerate() {
            check(last, j * step, x.as_f64().unwrap(), "strided");
        }
        for r in run["rows_top5"].as_array().unwrap() {
            let p = r["pos"].as_u64().unwrap() as usize;
            for pair in r["top5"].as_array().unwrap() {
                check(
                    p,
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap(),
                    "row top5",
                );
            }
        }
        let want = as_u32s(&run["new_tokens"]);
        let params = GenParams {
            max_new_tokens: want.len(),
            sampling: SamplingParams::greedy(),
            eos: vec![],
        };
        let mut cache = lm.model.new_cache();
        let r = baseline::generate(&lm.model, &mut cache, &ids, &params, &mut Vec::new()).unwrap();
        assert_eq!(r.tokens, want, "greedy tokens for {prompt:?}");
        assert_eq!(
            lm.tokenizer.decode(&r.tokens, false).unwrap(),
            run["text"].as_str().unwrap()
        );
    }
    eprintln!("gemma3 270m: worst logit diff {worst:.4} (tolerance {LOGIT_TOL})");
}

#[test]
fn parameter_count_of_the_real_config() {
    // Gemma 3 270M: 268.1 M parameters (a 167.8 M tied embedding + 18 layers of 5.57 M)
    let ck = dspark_engine::model::open_checkpoint(&artefact(GGUF)).unwrap();
    let n = ck.cfg.num_params() as f64 / 1e6;
    assert!((268.0..268.2).contains(&n), "{n}");
}
