//! `logprobs` and `logit_bias` under speculation. For draft-model, DSpark and DFlash drafters
//! over random targets, prompts and draft caps:
//!
//! - greedy with a `logit_bias` that forbids the unbiased run's favourite tokens (-100) and
//!   lifts a few others: every mode emits the biased baseline's tokens, and the bias did
//!   change the output; a +100 bias forces its token everywhere;
//! - the reported log-probabilities (chosen token and top 5) equal the baseline's within
//!   1e-5, with bias and penalties on, greedy and sampled-free;
//! - sampled runs (T = 0.9, seeded): each reported log-probability equals a teacher-forced
//!   reference (one target forward over prompt + emitted tokens, rows adjusted the same way,
//!   `log_softmax` in f64) within 1e-5.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::{baseline, GenParams, GenResult};
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::logprobs::{log_softmax, TokenLogprob};
use dspark_engine::sampling::{adjust, SamplingParams};
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, Gen, RandomSpec,
};

const V: usize = 64;
const TOL: f32 = 1e-5;

type B = CandleBackend;

fn prompts(seed: u64, n: usize) -> Vec<(Vec<u32>, usize)> {
    let mut g = Gen::new(seed, "logprob-cases");
    let mut u = |k: u32| ((g.normal().abs() * 1e4) as u32) % k;
    (0..n)
        .map(|_| {
            let len = 1 + u(12) as usize;
            ((0..len).map(|_| u(V as u32)).collect(), 8 + u(24) as usize)
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

fn base(t: &Transformer<B>, prompt: &[u32], p: &GenParams) -> GenResult {
    baseline::generate(t, &mut t.new_cache(), prompt, p, &mut Vec::new()).unwrap()
}

fn spec(
    t: &Transformer<B>,
    d: &mut dyn Drafter<B>,
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

/// Largest difference between two runs' log-probabilities (chosen and alternatives); the
/// token ids must agree.
fn max_diff(a: &[TokenLogprob], b: &[TokenLogprob], what: &str) -> f32 {
    assert_eq!(a.len(), b.len(), "{what}: entry counts");
    let mut worst = 0f32;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.id, y.id, "{what}");
        worst = worst.max((x.logprob - y.logprob).abs());
        assert_eq!(x.top.len(), y.top.len(), "{what}");
        for (p, q) in x.top.iter().zip(&y.top) {
            assert_eq!(p.0, q.0, "{what}: top ids");
            worst = worst.max((p.1 - q.1).abs());
        }
    }
    worst
}

/// Teacher-forced reference: log-probabilities of `r.tokens` from one forward over the prompt
/// and the emitted tokens.
fn reference(t: &Transformer<B>, prompt: &[u32], r: &GenResult, s: &SamplingParams) -> Vec<f32> {
    let mut seq = prompt.to_vec();
    seq.extend_from_slice(&r.tokens);
    let out = t
        .forward(
            &seq[..seq.len() - 1],
            &mut t.new_cache(),
            &[],
            LogitsWanted::All,
        )
        .unwrap();
    let logits = t
        .backend()
        .to_f32_vec(out.logits.as_ref().unwrap())
        .unwrap();
    let rows: Vec<&[f32]> = logits.chunks_exact(V).collect();
    r.tokens
        .iter()
        .enumerate()
        .map(|(i, &tok)| {
            let mut row = rows[prompt.len() - 1 + i].to_vec();
            adjust(&mut row, s, prompt, &r.tokens[..i]);
            log_softmax(&row)[tok as usize]
        })
        .collect()
}

/// Per run: a greedy bias setting, its logprobs vs the baseline, and a sampled run vs the
/// teacher-forced reference. Returns (runs, runs the bias changed, worst logprob difference).
fn check(name: &str, t: &Transformer<B>, d: &mut dyn Drafter<B>, seed: u64) -> (usize, usize, f32) {
    let (mut runs, mut changed, mut worst) = (0, 0, 0f32);
    for (pi, (prompt, max_new)) in prompts(seed, 10).into_iter().enumerate() {
        let cap = 1 + (pi % 7);
        let plain = base(t, &prompt, &params(SamplingParams::greedy(), max_new));
        // forbid the unbiased run's first three distinct tokens, lift two others
        let mut bias: Vec<(u32, f32)> = Vec::new();
        for &tok in &plain.tokens {
            if bias.len() < 3 && !bias.iter().any(|b| b.0 == tok) {
                bias.push((tok, -100.0));
            }
        }
        for (id, up) in [((pi * 7 + 3) % V, 2.5), ((pi * 11 + 5) % V, 1.5)] {
            if !bias.iter().any(|b| b.0 == id as u32) {
                bias.push((id as u32, up));
            }
        }
        let s = SamplingParams {
            logit_bias: bias.clone(),
            logprobs: Some(5),
            presence_penalty: if pi % 2 == 0 { 0.4 } else { 0.0 },
            ..SamplingParams::greedy()
        };
        let p = params(s.clone(), max_new);
        let want = base(t, &prompt, &p);
        for f in bias.iter().filter(|b| b.1 < 0.0) {
            assert!(
                !want.tokens.contains(&f.0),
                "{name}: forbidden {} emitted",
                f.0
            );
        }
        changed += usize::from(want.tokens != plain.tokens);
        let got = spec(t, d, &prompt, &p, cap);
        assert_eq!(
            got.tokens, want.tokens,
            "{name}: bias {bias:?} prompt {prompt:?} cap {cap}"
        );
        assert_eq!(want.logprobs.len(), want.tokens.len());
        worst = worst.max(max_diff(&got.logprobs, &want.logprobs, name));

        // +100 forces a token at every position
        let forced = (pi as u32 * 13 + 1) % V as u32;
        let f = params(
            SamplingParams {
                logit_bias: vec![(forced, 100.0)],
                ..SamplingParams::greedy()
            },
            max_new,
        );
        let fr = spec(t, d, &prompt, &f, cap);
        assert!(
            fr.tokens.iter().all(|&x| x == forced),
            "{name}: forced {forced}: {:?}",
            fr.tokens
        );

        // sampled: reported values equal the teacher-forced reference
        let ss = SamplingParams {
            temperature: 0.9,
            top_k: 20,
            seed: Some(seed * 100 + pi as u64),
            ..s
        };
        let sr = spec(t, d, &prompt, &params(ss.clone(), max_new), cap);
        let refs = reference(t, &prompt, &sr, &ss);
        for (e, r) in sr.logprobs.iter().zip(&refs) {
            worst = worst.max((e.logprob - r).abs());
        }
        let br = base(t, &prompt, &params(ss.clone(), max_new));
        for (e, r) in br.logprobs.iter().zip(reference(t, &prompt, &br, &ss)) {
            worst = worst.max((e.logprob - r).abs());
        }
        runs += 1;
    }
    assert!(worst <= TOL, "{name}: logprobs differ by {worst}");
    eprintln!("{name}: {runs} prompts, bias changed {changed}, worst logprob diff {worst:e}");
    (runs, changed, worst)
}

fn target(s: &RandomSpec, seed: u64) -> (Transformer<B>, dspark_engine::weights::MemorySource) {
    let (_, src) = random_target(s, seed);
    (Transformer::load(&B::cpu(), s.config(), &src).unwrap(), src)
}

#[test]
fn draft_model_logprobs_and_bias_equal_baseline() {
    let s = RandomSpec::tiny(V);
    let (t, src) = target(&s, 81);
    let dm = Transformer::load(&B::cpu(), s.config(), &perturbed(&src, 0.2, 81)).unwrap();
    let mut d = DraftModel::new(dm, V, 8).unwrap();
    let (runs, changed, _) = check("draft-model", &t, &mut d, 1);
    assert!(changed * 2 >= runs, "bias changed only {changed} of {runs}");
}

#[test]
fn dspark_logprobs_and_bias_equal_baseline() {
    let s = RandomSpec {
        layer_scale: 0.15,
        ..RandomSpec::tiny(V)
    };
    let (t, src) = target(&s, 82);
    let ds = DrafterSpec {
        layers: 2,
        block: 7,
        taps: vec![0, 1, 2],
        layer_scale: 0.5,
        mask_token_id: V as u32 - 1,
    };
    let (cfg, dsrc) = random_dspark(&s, &src, &ds, Some(4.0), 82);
    let mut d = dspark_from_parts(&B::cpu(), &cfg, &dsrc, &t).unwrap();
    let (runs, changed, _) = check("dspark", &t, &mut d, 2);
    assert!(changed * 2 >= runs, "bias changed only {changed} of {runs}");
}

#[test]
fn dflash_logprobs_and_bias_equal_baseline() {
    let s = RandomSpec::tiny(V);
    let (t, _src) = target(&s, 83);
    let ds = DrafterSpec {
        layers: 2,
        block: 8,
        taps: vec![0, 2],
        layer_scale: 3.0,
        mask_token_id: V as u32 - 1,
    };
    let (cfg, dsrc) = random_dflash(&s, &ds, 83);
    let mut d = dflash_from_parts(&B::cpu(), &cfg, &dsrc, &t).unwrap();
    let (runs, changed, _) = check("dflash", &t, &mut d, 3);
    assert!(changed * 2 >= runs, "bias changed only {changed} of {runs}");
}
