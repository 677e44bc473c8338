//! Real weights: SmolLM2-135M-Instruct (GGUF Q4_1, llama arch) dequantized to f32 must give
//! the same greedy tokens as HF transformers' GGUF loader (which also dequantizes to f32), and
//! our GGUF-built tokenizer and chat template must reproduce its prompt ids byte for byte.
//! Runs on the backend of `DSPARK_BACKEND` (candle, or MLX with the `mlx` feature).

use dspark_engine::backend::Backend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::load::{load_model, LoadedModel};
use dspark_engine::model::transformer::LogitsWanted;
use dspark_engine::sampling::SamplingParams;
use dspark_tests::{artefact, as_u32s, golden, on_backend};
use serde_json::json;

fn smollm2<B: Backend>(b: &B) -> LoadedModel<B> {
    let path = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    load_model(b, &path, None).unwrap()
}

#[test]
fn smollm2_matches_transformers_gguf_reference() {
    on_backend!(matches_reference)
}

fn matches_reference<B: Backend>(b: B) {
    let g = golden("smollm2_greedy.json");
    let lm = smollm2(&b);
    assert!(
        lm.eos_ids().contains(&2),
        "eos set {:?} lacks <|im_end|>",
        lm.eos_ids()
    );
    for check in g["tokenizer_checks"].as_array().unwrap() {
        let text = check["text"].as_str().unwrap();
        let ids = lm.tokenizer.encode(text, false).unwrap();
        assert_eq!(ids, as_u32s(&check["ids"]), "tokenizer ids for {text:?}");
    }
    let tmpl = lm
        .tokenizer
        .chat_template()
        .expect("GGUF carries a chat template");
    for run in g["runs"].as_array().unwrap() {
        let prompt = run["prompt"].as_str().unwrap();
        let msgs = json!([{"role": "user", "content": prompt}]);
        let opts = ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        };
        let rendered = tmpl.render(&msgs, &opts).unwrap();
        assert_eq!(rendered, run["rendered"].as_str().unwrap());
        let ids = lm.tokenizer.encode(&rendered, false).unwrap();
        assert_eq!(
            ids,
            as_u32s(&run["prompt_ids"]),
            "prompt ids for {prompt:?}"
        );

        // first-position logits close to the reference
        let mut cache = lm.model.new_cache();
        let out = lm
            .model
            .forward(&ids, &mut cache, &[], LogitsWanted::Last)
            .unwrap();
        let row = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        for pair in run["first_top5"].as_array().unwrap() {
            let (id, lg) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            );
            assert!(
                (row[id] - lg).abs() < 2e-3,
                "{prompt:?}: logit of {id} {} vs {lg}",
                row[id]
            );
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
        let text = lm.tokenizer.decode(&r.tokens, false).unwrap();
        assert_eq!(text, run["text"].as_str().unwrap());
    }
}
