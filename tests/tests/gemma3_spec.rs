//! Real weights, draft-model mode across a wrapping window: Gemma 3 270M (GGUF Q4_K_M) as the
//! target with its sliding window cut from 512 to 16 positions, drafted for by the same file
//! kept quantized with a window of 12 (so drafts are sometimes rejected). On 10 MT-Bench first
//! turns (bos + the question, up to 40 new tokens), greedy speculative output equals the
//! baseline token for token while the window wraps and the sliding layers drop old positions.
//! Candle only (a separate binary from the MLX-run suites).

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::tokenizer::Tokenizer;
use dspark_tests::artefact;

fn gemma(b: &CandleBackend, window: usize) -> Transformer<CandleBackend> {
    let ck = open_checkpoint(&artefact("gemma3-270m/gemma-3-270m-q4_k_m.gguf")).unwrap();
    let mut cfg = ck.cfg;
    cfg.gemma.as_mut().expect("a gemma3 config").sliding_window = window;
    Transformer::load(b, cfg, ck.source.as_ref()).unwrap()
}

#[test]
fn draft_model_equals_baseline_on_mtbench_with_a_wrapping_window() {
    let gguf = artefact("gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    let tok = Tokenizer::from_gguf_file(&gguf).unwrap();
    let questions = std::fs::read_to_string(artefact("mtbench/question.jsonl")).unwrap();
    let b = CandleBackend::cpu();
    let target = gemma(&b, 16);
    let vocab = target.cfg.vocab_size;
    let mut drafter =
        DraftModel::new(gemma(&b.clone().keep_quantized(true), 12), vocab, 4).unwrap();
    let params = GenParams {
        max_new_tokens: 40,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let spec = SpecParams {
        max_draft: 4,
        confidence_threshold: 0.0,
        lookup: false,
    };
    let (mut tokens, mut rounds, mut dropped) = (0usize, 0usize, 0);
    for line in questions.lines().take(10) {
        let q: serde_json::Value = serde_json::from_str(line).unwrap();
        let prompt = tok.encode(q["turns"][0].as_str().unwrap(), true).unwrap();
        let base = baseline::generate(
            &target,
            &mut target.new_cache(),
            &prompt,
            &params,
            &mut Vec::new(),
        )
        .unwrap();
        drafter.truncate(0);
        let mut cache = target.new_cache();
        let sp = decode::generate(
            &target,
            &mut cache,
            &mut drafter,
            &prompt,
            &params,
            &spec,
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(sp.tokens, base.tokens, "question {}", q["question_id"]);
        tokens += sp.stats.accept_lengths.iter().sum::<usize>();
        rounds += sp.stats.accept_lengths.len();
        if cache.floor() > 0 {
            dropped += 1;
        }
    }
    let tau = tokens as f64 / rounds as f64;
    eprintln!("Gemma 3 270M draft-model (window 16 / 12) on 10 MT-Bench prompts: {tau:.2} tokens/round, {dropped} runs dropped old positions");
    assert!(dropped >= 5, "{dropped}");
    assert!(
        tau > 1.2 && tau < 4.9,
        "some drafts accepted, some rejected: {tau}"
    );
}

/// Prefix-cache reuse with sliding layers: a conversation that extends the cached sequence
/// reuses it (its sliding layers already dropped positions), a request sharing only a prefix shorter than the
/// cache's floor starts over; every output equals the pipeline's uncached baseline.
#[test]
fn prefix_cache_reuse_is_exact_with_sliding_layers() {
    use dspark_engine::load::LoadedModel;
    use dspark_engine::pipeline::Pipeline;
    use dspark_engine::prefix_cache::PrefixCacheConfig;
    use dspark_engine::spec::Mode;

    let gguf = artefact("gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    let b = CandleBackend::cpu();
    // window 8: a sliding layer holds at most 55 positions, so the first request (58) drops some
    let target = gemma(&b, 8);
    let vocab = target.cfg.vocab_size;
    let tok = std::sync::Arc::new(Tokenizer::from_gguf_file(&gguf).unwrap());
    let lm = LoadedModel {
        model: target,
        tokenizer: tok.clone(),
        path: gguf.clone(),
        load_report: None,
    };
    let drafter = DraftModel::new(gemma(&b.clone().keep_quantized(true), 12), vocab, 4).unwrap();
    let mut pipe = Pipeline::new(
        lm,
        Mode::Draft,
        Some(Box::new(drafter)),
        SpecParams {
            max_draft: 4,
            confidence_threshold: 0.0,
            lookup: false,
        },
    )
    .unwrap();
    pipe.enable_prefix_cache(
        PrefixCacheConfig {
            max_slots: 4,
            max_ram_bytes: 0,
            dir: None,
            min_reuse: 1,
        },
        "gemma3-window12",
    );
    let params = GenParams {
        max_new_tokens: 32,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let first = tok
        .encode("The three primary colors are red, blue and", true)
        .unwrap();
    let long = GenParams {
        max_new_tokens: 48,
        ..params.clone()
    };
    let a = pipe.generate(&first, &long, &mut Vec::new()).unwrap();
    assert_eq!(first.len() + a.tokens.len(), 58);
    let mut second = first.clone();
    second.extend(&a.tokens);
    second.extend(tok.encode(" Name two more colors:", false).unwrap());
    let mut third = first[..4].to_vec();
    third.extend(tok.encode(" apples and pears grow on", false).unwrap());
    for (i, prompt) in [&second, &third].into_iter().enumerate() {
        let cached = pipe.generate(prompt, &params, &mut Vec::new()).unwrap();
        let fresh = pipe
            .generate_baseline(prompt, &params, &mut Vec::new())
            .unwrap();
        assert_eq!(cached.tokens, fresh.tokens, "request {i}");
        if i == 0 {
            assert!(
                cached.stats.cached_tokens > first.len() + 16,
                "the extension reuses the cache: {}",
                cached.stats.cached_tokens
            );
        } else {
            assert_eq!(
                cached.stats.cached_tokens, 0,
                "4 shared tokens lie below the floor"
            );
        }
    }
}
