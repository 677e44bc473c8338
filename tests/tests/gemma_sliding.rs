//! Sliding-window layers under speculation: on tiny random Gemma-3-shaped targets with a window
//! of 8, draft-model speculative greedy output equals the baseline token for token while the
//! window wraps inside verified blocks (blocks of up to 9 tokens, prompts of up to 30 tokens,
//! up to 48 new tokens), and rolling back rejected drafts leaves the sliding layers exact.
//! The window is checked to matter: the same weights with full attention give other logits.
//! Candle only (a separate binary from the MLX-run suites).

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::generate::{baseline, GenParams, GenResult};
use dspark_engine::model::config::TransformerConfig;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{perturbed, random_gemma_target, Gen, RandomSpec};
use dspark_engine::weights::MemorySource;

const WINDOW: usize = 8;

fn model(
    b: &CandleBackend,
    cfg: &TransformerConfig,
    src: &MemorySource,
) -> Transformer<CandleBackend> {
    Transformer::load(b, cfg.clone(), src).unwrap()
}

fn spec() -> RandomSpec {
    RandomSpec {
        layers: 3,
        ..RandomSpec::tiny(64)
    }
}

fn params(max_new: usize) -> GenParams {
    GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    }
}

#[test]
fn the_window_changes_the_logits_past_it() {
    let b = CandleBackend::cpu();
    let (cfg, src) = random_gemma_target(&spec(), WINDOW, 7);
    let mut full = cfg.clone();
    full.gemma.as_mut().unwrap().sliding_window = 1 << 20;
    let ids: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 64).collect();
    let logits = |c: &TransformerConfig| {
        let t = model(&b, c, &src);
        let out = t
            .forward(&ids, &mut t.new_cache(), &[], LogitsWanted::All)
            .unwrap();
        b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap()
    };
    let (w, f) = (logits(&cfg), logits(&full));
    let row = |v: &[f32], p: usize| v[p * 64..(p + 1) * 64].to_vec();
    for p in 0..WINDOW {
        assert_eq!(row(&w, p), row(&f, p), "position {p} is inside the window");
    }
    for p in WINDOW..20 {
        assert_ne!(
            row(&w, p),
            row(&f, p),
            "position {p} must lose its oldest keys"
        );
    }
}

#[test]
fn draft_model_greedy_equals_baseline_across_the_window() {
    let b = CandleBackend::cpu();
    let s = spec();
    let (mut combos, mut wrapped_blocks) = (0, 0);
    for seed in 0..3u64 {
        let (cfg, tsrc) = random_gemma_target(&s, WINDOW, seed);
        let target = model(&b, &cfg, &tsrc);
        let (_, other) = random_gemma_target(&s, WINDOW, 1000 + seed);
        let drafters = [tsrc.clone(), perturbed(&tsrc, 0.3, seed), other];
        for (k, dsrc) in drafters.iter().enumerate() {
            let mut d = DraftModel::new(model(&b, &cfg, dsrc), 64, 8).unwrap();
            let mut g = Gen::new(seed * 10 + k as u64, "gemma-cases");
            for _ in 0..6 {
                let mut u = |n: u32| ((g.normal().abs() * 1e4) as u32) % n;
                let prompt: Vec<u32> = (0..1 + u(30)).map(|_| u(64)).collect();
                let max_new = 8 + u(41) as usize;
                let cap = 1 + u(8) as usize;
                let base: GenResult = baseline::generate(
                    &target,
                    &mut target.new_cache(),
                    &prompt,
                    &params(max_new),
                    &mut Vec::new(),
                )
                .unwrap();
                d.truncate(0);
                let sp = decode::generate(
                    &target,
                    &mut target.new_cache(),
                    &mut d,
                    &prompt,
                    &params(max_new),
                    &SpecParams {
                        max_draft: cap,
                        confidence_threshold: 0.0,
                    },
                    &mut Vec::new(),
                )
                .unwrap();
                assert_eq!(
                    sp.tokens, base.tokens,
                    "seed {seed} drafter {k} cap {cap} prompt {prompt:?}"
                );
                // a verified block of accepted + 1 tokens past the window's first fill wraps it
                let mut pos = prompt.len();
                for &a in &sp.stats.accept_lengths {
                    if pos + a > WINDOW && a > 1 {
                        wrapped_blocks += 1;
                    }
                    pos += a;
                }
                combos += 1;
            }
        }
    }
    assert_eq!(combos, 54);
    assert!(
        wrapped_blocks > 50,
        "{wrapped_blocks} accepted blocks past the window"
    );
}
