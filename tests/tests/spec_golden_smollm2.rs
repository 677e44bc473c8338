//! Reference cross-check on real weights: the trained SmolLM2-135M drafters of
//! assets/drafters/ (DFlash b16, b8, DSpark b7) with the demo target (the Q4_1 GGUF dequantized
//! to f32) reproduce mlx-dspark 0.20.3 round by round on MT-Bench first turns: the ids fed to
//! every verify forward (pending + drafts), the accept lengths and the greedy tokens
//! (tests/fixtures/spec/golden_mlx_smollm2.json, from scripts/oracles/smollm2_mlx.sh, which
//! loads the same checkpoints in mlx-dspark with the target dequantized by transformers).
//! The prompts are rendered by dspark's chat template and must equal the golden's ids.
//! mlx-dspark commits whole rounds and may overshoot `max_new_tokens` by a block; we never do,
//! so our rounds are compared as a prefix of its rounds.
//! Runs on the backend of `DSPARK_BACKEND` (candle, or MLX with the `mlx` feature).

use std::path::PathBuf;

use dspark_engine::backend::Backend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::drafters::draft_vocab::DraftVocabSize;
use dspark_engine::drafters::{load_dflash, load_dspark};
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::load::load_model;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_tests::recorder::Recorder;
use dspark_tests::{artefact, as_u32s, fixture, on_backend};
use serde_json::{json, Value};

/// New tokens compared per run (the golden holds 64: about 40 rounds per prompt).
const MAX_NEW: usize = 32;

/// (golden key, drafter folder, DSpark rather than DFlash)
const RUNS: [(&str, &str, bool); 3] = [
    ("dflash_b16", "smollm2-135m-dflash-b16", false),
    ("dflash_b8", "smollm2-135m-dflash-b8", false),
    ("dspark_b7", "smollm2-135m-dspark-b7", true),
];

/// Under `DSPARK_DRAFTERS_DIR` when set (as for the hub's registry), else the source tree's.
fn drafter_dir(name: &str) -> PathBuf {
    std::env::var_os("DSPARK_DRAFTERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/drafters"))
        .join(name)
}

fn stale() -> &'static str {
    "if assets/drafters/ changed, regenerate the golden: bash scripts/oracles/smollm2_mlx.sh"
}

#[test]
fn trained_drafters_match_mlx_dspark_round_by_round() {
    on_backend!(match_mlx_dspark)
}

fn match_mlx_dspark<B: Backend>(b: B) {
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("spec/golden_mlx_smollm2.json")).unwrap(),
    )
    .unwrap();
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 5, "{} prompts in the golden", cases.len());
    let golden_new = g["max_new_tokens"].as_u64().unwrap() as usize;
    // CI compares the first MAX_NEW tokens of each run: drafting never looks at the budget, so
    // a shorter run's rounds are a prefix of the golden's (the whole golden: MAX_NEW = 64)
    let max_new = MAX_NEW.min(golden_new);
    let lm = load_model(
        &b,
        &artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        None,
    )
    .unwrap();
    let eos = lm.eos_ids();
    // (the reference's stop set is its own, [1, 2]; a run it ended on a token outside ours
    // fails the token count below)
    let t = &lm.model;
    let params = GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos: eos.clone(),
    };
    let spec = SpecParams {
        max_draft: 64,
        confidence_threshold: 0.0,
        lookup: false,
    };

    // prompts as dspark renders them, checked against the reference's ids
    let questions = std::fs::read_to_string(artefact("mtbench/question.jsonl")).unwrap();
    let opts = ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    for (i, (case, line)) in cases.iter().zip(questions.lines()).enumerate() {
        let q: Value = serde_json::from_str(line).unwrap();
        let msgs = json!([{"role": "user", "content": q["turns"][0]}]);
        let text = lm
            .tokenizer
            .chat_template()
            .unwrap()
            .render(&msgs, &opts)
            .unwrap();
        let ids = lm.tokenizer.encode(&text, false).unwrap();
        assert_eq!(ids, as_u32s(&case["prompt_ids"]), "prompt {i} ids");
        let base = baseline::generate(t, &mut t.new_cache(), &ids, &params, &mut Vec::new())
            .unwrap()
            .tokens;
        let want = as_u32s(&case["baseline"]["token_ids"]);
        assert_eq!(base[..], want[..base.len()], "prompt {i}: baseline tokens");
    }

    for (key, dir, is_dspark) in RUNS {
        let mut d: Box<dyn Drafter<B>> = if is_dspark {
            Box::new(load_dspark(&b, &drafter_dir(dir), t).unwrap())
        } else {
            Box::new(load_dflash(&b, &drafter_dir(dir), t).unwrap())
        };
        // mlx-dspark drafts over the whole vocabulary (the shipped rankings' default size is
        // dspark's own)
        d.set_draft_vocab(t, DraftVocabSize::Full).unwrap();
        let (mut tokens, mut rounds_n, mut multi) = (0, 0, 0);
        for (i, case) in cases.iter().enumerate() {
            let prompt = as_u32s(&case["prompt_ids"]);
            let reference = &case[key];
            let mut rec = Recorder::new(d.as_mut());
            rec.truncate(0);
            let r = decode::generate(
                t,
                &mut t.new_cache(),
                &mut rec,
                &prompt,
                &params,
                &spec,
                &mut Vec::new(),
            )
            .unwrap();
            let rounds = rec.rounds();
            let name = format!("{key} prompt {i}");
            let want = as_u32s(&reference["token_ids"]);
            assert_eq!(r.tokens[..], want[..r.tokens.len()], "{name}: tokens");
            // the reference stops at max_new (plus overshoot) or at a stop token; we at either
            let want_len = want
                .iter()
                .position(|x| eos.contains(x))
                .map_or(want.len(), |p| p + 1)
                .min(max_new);
            assert_eq!(r.tokens.len(), want_len, "{name}: token count");
            let verified: Vec<Vec<u32>> = reference["verified"]
                .as_array()
                .unwrap()
                .iter()
                .map(as_u32s)
                .collect();
            let accepts: Vec<usize> = reference["accept_lengths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            assert!(
                rounds.len() <= verified.len()
                    && (max_new < golden_new || rounds.len() + 1 >= verified.len()),
                "{name}: {} rounds vs the reference's {}; {}",
                rounds.len(),
                verified.len(),
                stale()
            );
            for (k, fed) in rounds.iter().enumerate() {
                assert_eq!(
                    fed,
                    &verified[k],
                    "{name}: verify input of round {k}; {}",
                    stale()
                );
            }
            let got = &r.stats.accept_lengths;
            let n = got.len();
            // the last round may be cut by the budget (or a stop token) on our side only
            assert_eq!(got[..n - 1], accepts[..n - 1], "{name}: accept lengths");
            assert!(got[n - 1] <= accepts[n - 1], "{name}: last round");
            tokens += got.iter().sum::<usize>();
            rounds_n += n;
            multi += got.iter().filter(|&&a| a > 1).count();
        }
        eprintln!(
            "{key}: {} prompts, {rounds_n} rounds equal to mlx-dspark's, {multi} with drafts accepted, mean accept length {:.3}",
            cases.len(),
            tokens as f64 / rounds_n as f64
        );
        // a cross-check where nothing is ever accepted would not exercise acceptance
        assert!(
            multi * 5 >= rounds_n,
            "{key}: only {multi} of {rounds_n} rounds accepted a draft"
        );
    }
}
