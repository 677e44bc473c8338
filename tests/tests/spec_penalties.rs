//! Penalties under speculation: with presence, frequency and repetition penalties and min-p,
//! every speculative mode emits exactly the baseline's greedy tokens (the verifier penalizes
//! each drafted position with the emitted tokens plus the drafts before it), over random
//! targets, prompts, caps and penalty settings; and the penalties do change the output, so the
//! comparison is not between two runs that ignore them.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::{baseline, GenParams, GenResult};
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, Gen, RandomSpec,
};

const V: usize = 64;

/// (presence, frequency, repetition, min_p)
const SETTINGS: [(f32, f32, f32, f32); 4] = [
    (0.8, 0.0, 1.0, 0.0),
    (0.0, 0.6, 1.0, 0.0),
    (0.0, 0.0, 1.8, 0.0),
    (0.4, 0.3, 1.3, 0.2),
];

fn sampling(s: (f32, f32, f32, f32)) -> SamplingParams {
    SamplingParams {
        presence_penalty: s.0,
        frequency_penalty: s.1,
        repetition_penalty: s.2,
        min_p: s.3,
        ..SamplingParams::greedy()
    }
}

fn prompts(seed: u64, n: usize) -> Vec<(Vec<u32>, usize)> {
    let mut g = Gen::new(seed, "penalty-cases");
    let mut u = |k: u32| ((g.normal().abs() * 1e4) as u32) % k;
    (0..n)
        .map(|_| {
            let len = 1 + u(12) as usize;
            ((0..len).map(|_| u(V as u32)).collect(), 8 + u(32) as usize)
        })
        .collect()
}

fn params(s: SamplingParams, max_new: usize) -> GenParams {
    GenParams {
        max_new_tokens: max_new,
        sampling: s,
        eos: vec![],
    }
}

fn base(t: &Transformer<CandleBackend>, prompt: &[u32], p: &GenParams) -> GenResult {
    baseline::generate(t, &mut t.new_cache(), prompt, p, &mut Vec::new()).unwrap()
}

fn spec(
    t: &Transformer<CandleBackend>,
    d: &mut dyn Drafter<CandleBackend>,
    prompt: &[u32],
    p: &GenParams,
    cap: usize,
) -> GenResult {
    d.truncate(0);
    let s = SpecParams {
        max_draft: cap,
        confidence_threshold: 0.0,
        lookup: false,
    };
    decode::generate(t, &mut t.new_cache(), d, prompt, p, &s, &mut Vec::new()).unwrap()
}

/// Runs every setting over `n` prompts; returns (runs, runs where penalties changed the
/// baseline, runs with an accepted draft).
fn check(
    name: &str,
    t: &Transformer<CandleBackend>,
    d: &mut dyn Drafter<CandleBackend>,
    seed: u64,
    n: usize,
) -> (usize, usize, usize) {
    let (mut runs, mut changed, mut accepted) = (0, 0, 0);
    for (si, &s) in SETTINGS.iter().enumerate() {
        for (pi, (prompt, max_new)) in prompts(seed * 31 + si as u64, n).into_iter().enumerate() {
            let p = params(sampling(s), max_new);
            let want = base(t, &prompt, &p);
            let plain = base(t, &prompt, &params(SamplingParams::greedy(), max_new));
            changed += usize::from(plain.tokens != want.tokens);
            let cap = 1 + (pi % 7);
            let got = spec(t, d, &prompt, &p, cap);
            assert_eq!(
                got.tokens, want.tokens,
                "{name}: setting {s:?} prompt {prompt:?} cap {cap}"
            );
            accepted += usize::from(got.stats.accept_lengths.iter().any(|&a| a > 1));
            runs += 1;
        }
    }
    (runs, changed, accepted)
}

fn target(
    spec: &RandomSpec,
    seed: u64,
) -> (
    Transformer<CandleBackend>,
    dspark_engine::weights::MemorySource,
) {
    let (_, src) = random_target(spec, seed);
    (
        Transformer::load(&CandleBackend::cpu(), spec.config(), &src).unwrap(),
        src,
    )
}

#[test]
fn draft_model_with_penalties_equals_baseline() {
    let s = RandomSpec::tiny(V);
    let (t, src) = target(&s, 71);
    let dm =
        Transformer::load(&CandleBackend::cpu(), s.config(), &perturbed(&src, 0.2, 71)).unwrap();
    let mut d = DraftModel::new(dm, V, 8).unwrap();
    let (runs, changed, accepted) = check("draft-model", &t, &mut d, 1, 8);
    assert_eq!(runs, 32);
    assert!(
        changed >= 16,
        "penalties changed only {changed} of {runs} outputs"
    );
    assert!(accepted >= 16, "only {accepted} runs accepted a draft");
}

#[test]
fn dspark_with_penalties_equals_baseline() {
    let s = RandomSpec {
        layer_scale: 0.15,
        ..RandomSpec::tiny(V)
    };
    let (t, src) = target(&s, 72);
    let ds = DrafterSpec {
        layers: 2,
        block: 7,
        taps: vec![0, 1, 2],
        layer_scale: 0.5,
        mask_token_id: V as u32 - 1,
    };
    let (cfg, dsrc) = random_dspark(&s, &src, &ds, Some(4.0), 72);
    let mut d = dspark_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    let (runs, changed, accepted) = check("dspark", &t, &mut d, 2, 8);
    assert!(
        changed >= 16,
        "penalties changed only {changed} of {runs} outputs"
    );
    assert!(accepted >= 8, "only {accepted} runs accepted a draft");
}

#[test]
fn dflash_with_penalties_equals_baseline() {
    let s = RandomSpec::tiny(V);
    let (t, src) = target(&s, 73);
    let _ = src;
    let ds = DrafterSpec {
        layers: 2,
        block: 8,
        taps: vec![0, 2],
        layer_scale: 3.0,
        mask_token_id: V as u32 - 1,
    };
    let (cfg, dsrc) = random_dflash(&s, &ds, 73);
    let mut d = dflash_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    let (runs, changed, _) = check("dflash", &t, &mut d, 3, 8);
    assert!(
        changed >= 16,
        "penalties changed only {changed} of {runs} outputs"
    );
}
