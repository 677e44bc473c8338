//! Real weights, draft-model mode: SmolLM2-135M kept quantized (Q4_1 re-packed to Q8_0) drafts
//! for the same model dequantized to f32. On 10 MT-Bench first turns, greedy speculative output
//! must equal the baseline token for token; the mean accept length is reported.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::generate::GenParams;
use dspark_engine::load::load_model;
use dspark_engine::pipeline::{load_drafter, Pipeline};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_tests::artefact;
use serde_json::json;

#[test]
fn draft_model_equals_baseline_on_mtbench() {
    let gguf = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let questions = std::fs::read_to_string(artefact("mtbench/question.jsonl")).unwrap();
    let b = CandleBackend::cpu();
    let lm = load_model(&b, &gguf, None).unwrap();
    let drafter = load_drafter(
        &b,
        &b.clone().keep_quantized(true),
        Mode::Draft,
        &gguf,
        &lm.model,
        4,
        dspark_engine::drafters::draft_vocab::DraftVocabSize::Drafter,
    )
    .unwrap();
    let eos = lm.eos_ids();
    let tok = lm.tokenizer.clone();
    let mut pipe = Pipeline::new(
        lm,
        Mode::Draft,
        Some(drafter),
        SpecParams {
            max_draft: 4,
            confidence_threshold: 0.0,
            lookup: false,
        },
    )
    .unwrap();
    let params = GenParams {
        max_new_tokens: 40,
        sampling: SamplingParams::greedy(),
        eos,
    };
    let (mut tokens, mut rounds, mut n) = (0usize, 0usize, 0);
    for line in questions.lines().take(10) {
        let q: serde_json::Value = serde_json::from_str(line).unwrap();
        let msgs = json!([{"role": "user", "content": q["turns"][0]}]);
        let opts = ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        };
        let prompt = tok
            .encode(
                &tok.chat_template().unwrap().render(&msgs, &opts).unwrap(),
                false,
            )
            .unwrap();
        let base = pipe
            .generate_baseline(&prompt, &params, &mut Vec::new())
            .unwrap();
        let spec = pipe.generate(&prompt, &params, &mut Vec::new()).unwrap();
        assert_eq!(spec.tokens, base.tokens, "question {}", q["question_id"]);
        assert_eq!(spec.finish_reason, base.finish_reason);
        tokens += spec.stats.accept_lengths.iter().sum::<usize>();
        rounds += spec.stats.accept_lengths.len();
        n += 1;
    }
    assert_eq!(n, 10);
    let tau = tokens as f64 / rounds as f64;
    eprintln!(
        "SmolLM2 draft-model on 10 MT-Bench prompts: mean accept length {tau:.2} tokens/round"
    );
    assert!(
        tau > 2.0,
        "a quantized copy of the target should be accepted often: {tau}"
    );
}
