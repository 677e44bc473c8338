//! `--matmul bf16` on the real demo model (SmolLM2-135M-Instruct Q4_1, its blocks rebuilt into
//! bf16 tiles for each call, multiplied on AMX-BF16 or by AVX-512 BF16 dot products; on a CPU
//! with neither the backend runs f32 and these checks hold there too):
//! - on 20 held-out MT-Bench first turns, greedy speculative output equals the bf16 baseline
//!   token for token with each trained drafter (DFlash b16 and b8, DSpark b7) at its full block
//!   and with the draft model (the same GGUF kept quantized, 8 drafts);
//! - the bf16 baseline stays close to the f32 reference: the first tokens of most prompts are
//!   the same, and the logits of a prompt differ by little.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::cpu::bf16_tiles;
use dspark_engine::backend::Backend;
use dspark_engine::generate::GenParams;
use dspark_engine::load::load_model;
use dspark_engine::model::transformer::LogitsWanted;
use dspark_engine::pipeline::{load_drafter, Pipeline};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_tests::{artefact, mtbench_chat_prompts};

const PROMPTS: usize = 20;
const MAX_TOKENS: usize = 40;

fn prompts(b: &CandleBackend) -> Vec<Vec<u32>> {
    let gguf = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    mtbench_chat_prompts(&load_model(b, &gguf, None).unwrap().tokenizer, PROMPTS)
}

fn greedy(b: &CandleBackend, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let gguf = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let lm = load_model(b, &gguf, None).unwrap();
    let params = GenParams {
        max_new_tokens: MAX_TOKENS,
        sampling: SamplingParams::greedy(),
        eos: lm.eos_ids(),
    };
    let one = SpecParams {
        max_draft: 1,
        confidence_threshold: 0.0,
        lookup: false,
    };
    let mut base = Pipeline::new(lm, Mode::Baseline, None, one).unwrap();
    prompts
        .iter()
        .map(|p| {
            base.generate_baseline(p, &params, &mut Vec::new())
                .unwrap()
                .tokens
        })
        .collect()
}

#[test]
fn speculation_on_bf16_tiles_equals_the_bf16_baseline() {
    let b = CandleBackend::cpu().with_bf16_matmul(true);
    eprintln!(
        "bf16 tiles here: {} (AMX: {})",
        bf16_tiles::available(),
        bf16_tiles::amx()
    );
    let gguf = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let assets = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/drafters");
    let prompts = prompts(&b);
    let baselines = greedy(&b, &prompts);
    let cases = [
        (Mode::Dflash, assets.join("smollm2-135m-dflash-b16"), 16),
        (Mode::Dflash, assets.join("smollm2-135m-dflash-b8"), 16),
        (Mode::Dspark, assets.join("smollm2-135m-dspark-b7"), 16),
        (Mode::Draft, gguf.clone(), 8),
    ];
    for (mode, drafter, max_draft) in cases {
        let lm = load_model(&b, &gguf, None).unwrap();
        let eos = lm.eos_ids();
        let db = match mode {
            Mode::Draft => b.clone().keep_quantized(true),
            _ => b.clone(),
        };
        let d = load_drafter(
            &b,
            &db,
            mode,
            &drafter,
            &lm.model,
            max_draft,
            dspark_engine::drafters::draft_vocab::DraftVocabSize::Drafter,
        )
        .unwrap();
        let spec = SpecParams {
            max_draft,
            confidence_threshold: 0.0,
            lookup: false,
        };
        let mut pipe = Pipeline::new(lm, mode, Some(d), spec).unwrap();
        let params = GenParams {
            max_new_tokens: MAX_TOKENS,
            sampling: SamplingParams::greedy(),
            eos,
        };
        let (mut tokens, mut rounds) = (0usize, 0usize);
        for (i, p) in prompts.iter().enumerate() {
            let r = pipe.generate(p, &params, &mut Vec::new()).unwrap();
            assert_eq!(
                r.tokens,
                baselines[i],
                "{mode:?} {} prompt {i}",
                drafter.display()
            );
            tokens += r.stats.accept_lengths.iter().sum::<usize>();
            rounds += r.stats.accept_lengths.len();
        }
        let tau = tokens as f64 / rounds as f64;
        eprintln!("{mode:?} {}: tau {tau:.3}", drafter.display());
        // a drafter that accepts: not a spec path that quietly stopped drafting
        assert!(tau > 1.3, "{mode:?} {}: tau {tau:.3}", drafter.display());
    }
}

/// bf16 rounds each matmul's activations and weights to 8 significant bits, so tokens may part
/// from the f32 reference's at near-ties: most prompts' first tokens agree, and the logits
/// after a prompt stay within a small distance of the f32 ones.
#[test]
fn bf16_tiles_stay_close_to_the_f32_reference() {
    let f32b = CandleBackend::cpu();
    let bf16 = CandleBackend::cpu().with_bf16_matmul(true);
    let prompts = prompts(&f32b);
    let (a, b) = (greedy(&f32b, &prompts[..10]), greedy(&bf16, &prompts[..10]));
    let same = a.iter().zip(&b).filter(|(x, y)| x[..8] == y[..8]).count();
    eprintln!("first 8 tokens equal on {same}/10 prompts");
    assert!(same >= 7, "first 8 tokens equal on only {same}/10 prompts");
    let gguf = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let logits = |be: &CandleBackend| {
        let lm = load_model(be, &gguf, None).unwrap();
        let mut cache = lm.model.new_cache();
        let out = lm
            .model
            .forward(&prompts[0], &mut cache, &[], LogitsWanted::Last)
            .unwrap();
        be.to_f32_vec(out.logits.as_ref().unwrap()).unwrap()
    };
    let (la, lb) = (logits(&f32b), logits(&bf16));
    let worst = la
        .iter()
        .zip(&lb)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let scale = la.iter().fold(0f32, |m, x| m.max(x.abs()));
    eprintln!("worst logit difference {worst:.4} (largest |logit| {scale:.2})");
    assert!(
        worst < 0.05 * scale,
        "worst logit difference {worst} of {scale}"
    );
}
