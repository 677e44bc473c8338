//! Greedy identity on Gemma targets: speculative tokens equal the baseline tokens for every
//! drafter kind (Gemma DSpark with its own embedding/head, Gemma DSpark bound to the target's,
//! DFlash, and a draft model that is the target itself), on three tiny committed Gemma targets
//! with short sliding windows: the Gemma 4 spec target of scripts/oracles/make_gemma_spec_tiny.py
//! with its window cut to 6, and the tiny Gemma 4 and Gemma 3 of make_gemma_tiny.py (window 4).
//! Random prompts, caps 1-8, budgets up to 48 and eos sets; accepted blocks longer than the
//! window cross it, and long runs drop old sliding positions (kv floor > 0).
//! Runs on the backend of `DSPARK_BACKEND`.

use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{load_dflash, load_dspark};
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::Gen;
use dspark_tests::{fixture, on_backend};

const CASES: usize = 6;

fn load<B: Backend>(b: &B, dir: &str, window: Option<usize>) -> (Transformer<B>, usize) {
    let mut ck = open_checkpoint(&fixture(dir)).unwrap();
    let g = ck.cfg.gemma.as_mut().expect("a Gemma target");
    if let Some(w) = window {
        g.sliding_window = w;
    }
    let w = g.sliding_window;
    (Transformer::load(b, ck.cfg, ck.source.as_ref()).unwrap(), w)
}

fn params(max_new: usize, eos: Vec<u32>) -> GenParams {
    GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos,
    }
}

#[test]
fn gemma_spec_greedy_equals_baseline() {
    on_backend!(gemma_spec_greedy_equals_baseline_on)
}

fn gemma_spec_greedy_equals_baseline_on<B: Backend>(b: B) {
    let (mut pairs, mut wrapped, mut dropped, mut accepted) = (0, 0, 0, 0);
    let targets = [
        ("spec/gemma/target", Some(6)),
        ("tiny/gemma4", None),
        ("tiny/gemma3", None),
    ];
    for (ti, (dir, window)) in targets.into_iter().enumerate() {
        let (t, window) = load(&b, dir, window);
        assert!(window <= 6, "{dir}: window {window}");
        let (twin, _) = load(&b, dir, Some(window));
        let mut drafters: Vec<(&str, Box<dyn Drafter<B>>)> = vec![
            (
                "dspark",
                Box::new(load_dspark(&b, &fixture("spec/gemma/dspark"), &t).unwrap()),
            ),
            (
                "dspark-bound",
                Box::new(load_dspark(&b, &fixture("spec/gemma/dspark-bound"), &t).unwrap()),
            ),
            (
                "dflash",
                Box::new(load_dflash(&b, &fixture("spec/gemma/dflash"), &t).unwrap()),
            ),
            (
                "draft-model",
                Box::new(DraftModel::new(twin, 512, 8).unwrap()),
            ),
        ];
        for (di, (name, d)) in drafters.iter_mut().enumerate() {
            let mut g = Gen::new((ti * 10 + di) as u64, "gemma-spec-greedy");
            for _ in 0..CASES {
                let mut u = |n: u32| ((g.normal().abs() * 1e4) as u32) % n;
                let prompt: Vec<u32> = (0..1 + u(24)).map(|_| u(512)).collect();
                let max_new = 8 + u(41) as usize;
                let cap = 1 + u(8) as usize;
                let eos = if u(4) == 0 { vec![u(512)] } else { vec![] };
                let base = baseline::generate(
                    &t,
                    &mut t.new_cache(),
                    &prompt,
                    &params(max_new, eos.clone()),
                    &mut Vec::new(),
                )
                .unwrap();
                d.truncate(0);
                let mut cache = t.new_cache();
                let sp = decode::generate(
                    &t,
                    &mut cache,
                    d.as_mut(),
                    &prompt,
                    &params(max_new, eos.clone()),
                    &SpecParams {
                        max_draft: cap,
                        confidence_threshold: 0.0,
                        lookup: false,
                    },
                    &mut Vec::new(),
                )
                .unwrap();
                assert_eq!(
                    sp.tokens, base.tokens,
                    "{dir} {name} cap {cap} max_new {max_new} eos {eos:?} prompt {prompt:?}"
                );
                let mut pos = prompt.len();
                for &a in &sp.stats.accept_lengths {
                    if a > 1 {
                        accepted += 1;
                        // a verified block that ends past the window's first fill crosses it
                        if pos + a > window {
                            wrapped += 1;
                        }
                    }
                    pos += a;
                }
                if cache.floor() > 0 {
                    dropped += 1;
                }
                pairs += 1;
            }
        }
    }
    eprintln!("{pairs} pairs, {accepted} blocks with accepted drafts, {wrapped} across the window, {dropped} runs dropped positions");
    assert_eq!(pairs, 72);
    assert!(
        wrapped > 30,
        "only {wrapped} accepted blocks crossed the window"
    );
    assert!(dropped > 5, "only {dropped} runs dropped old positions");
}
