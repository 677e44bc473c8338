//! Sampling exactness: with T > 0 every speculative mode must emit exact samples of the
//! (top-k then top-p truncated) target distribution. On a vocabulary of 8 we enumerate the exact
//! marginals of generated tokens 1-3 (token 1 comes from the prefill, tokens 2 and 3 are the
//! first two speculative ones) and run Pearson chi-squared tests on N trials with fixed seeds.
//! Each test requires p > 0.001. Power: N = 16000 trials give, against the least detectable
//! error (0.02 of probability mass moved between the two most likely tokens), a noncentrality
//! >= 12.8 / (p_a p_b / (p_a + p_b)) — the test computes and asserts power >= 0.9 per case.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::GenParams;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::{distribution, SamplingParams};
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, RandomSpec,
};
use dspark_tests::stats::{chi_squared, min_noncentrality, power};

const V: usize = 8;
fn trials() -> usize {
    std::env::var("DSPARK_CHI_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16_000)
}
const CONFIGS: [(f32, f32, usize); 4] =
    [(1.0, 1.0, 0), (1.0, 0.8, 0), (0.7, 1.0, 3), (1.3, 0.9, 5)];
const PROMPT: [u32; 4] = [1, 5, 2, 6];

fn spec() -> RandomSpec {
    // a flat-ish head keeps several tokens alive under top-p/top-k truncation
    RandomSpec {
        layer_scale: 0.3,
        head_scale: 1.2,
        ..RandomSpec::tiny(V)
    }
}

/// Exact truncated distribution of the next token after `ids`.
fn next_dist(t: &Transformer<CandleBackend>, ids: &[u32], s: &SamplingParams) -> Vec<f64> {
    let mut cache = t.new_cache();
    let out = t.forward(ids, &mut cache, &[], LogitsWanted::Last).unwrap();
    let row = t
        .backend()
        .to_f32_vec(out.logits.as_ref().unwrap())
        .unwrap();
    distribution(&row, s)
        .into_iter()
        .map(|p| p as f64)
        .collect()
}

/// Exact marginals of generated tokens 1, 2 and 3.
fn exact_marginals(t: &Transformer<CandleBackend>, s: &SamplingParams) -> [Vec<f64>; 3] {
    let mut m = [vec![0.0; V], vec![0.0; V], vec![0.0; V]];
    let p1 = next_dist(t, &PROMPT, s);
    for a in 0..V {
        if p1[a] == 0.0 {
            continue;
        }
        m[0][a] += p1[a];
        let mut ids = PROMPT.to_vec();
        ids.push(a as u32);
        let p2 = next_dist(t, &ids, s);
        for b in 0..V {
            if p2[b] == 0.0 {
                continue;
            }
            m[1][b] += p1[a] * p2[b];
            let mut ids3 = ids.clone();
            ids3.push(b as u32);
            for (c, p3) in next_dist(t, &ids3, s).iter().enumerate() {
                m[2][c] += p1[a] * p2[b] * p3;
            }
        }
    }
    m
}

fn check(name: &str, t: &Transformer<CandleBackend>, d: &mut dyn Drafter<CandleBackend>) {
    for (ci, &(temperature, top_p, top_k)) in CONFIGS.iter().enumerate() {
        let base = SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: None,
        };
        let exact = exact_marginals(t, &base);
        let mut counts = [[0usize; V]; 3];
        let mut accepted_2plus = 0;
        for trial in 0..trials() {
            let sampling = SamplingParams {
                seed: Some((ci * 1_000_003 + trial) as u64),
                ..base
            };
            let params = GenParams {
                max_new_tokens: 3,
                sampling,
                eos: vec![],
            };
            let spec = SpecParams {
                max_draft: 4,
                confidence_threshold: 0.0,
            };
            d.truncate(0);
            let r = decode::generate(
                t,
                &mut t.new_cache(),
                d,
                &PROMPT,
                &params,
                &spec,
                &mut Vec::new(),
            )
            .unwrap();
            assert_eq!(r.tokens.len(), 3);
            for (k, &tok) in r.tokens.iter().enumerate() {
                counts[k][tok as usize] += 1;
            }
            if r.stats.accept_lengths.first().is_some_and(|&a| a >= 2) {
                accepted_2plus += 1;
            }
        }
        for k in 0..3 {
            let (stat, df, p) = chi_squared(&counts[k], &exact[k]);
            let pow = power(df, min_noncentrality(trials(), &exact[k], 0.02), 0.001);
            eprintln!(
                "{name} T={temperature} top_p={top_p} top_k={top_k} token {}: chi2 {stat:.2} df {df} p {p:.4} power {pow:.3}",
                k + 1
            );
            assert!(
                p > 0.001,
                "{name} config {ci} token {}: chi2 {stat} df {df} p {p}",
                k + 1
            );
            assert!(
                pow >= 0.9,
                "{name} config {ci} token {}: power {pow}",
                k + 1
            );
        }
        // speculation must actually be exercised: some first rounds accept a draft
        assert!(
            accepted_2plus > trials() / 50,
            "{name} config {ci}: only {accepted_2plus} rounds accepted a draft"
        );
    }
}

#[test]
fn draft_model_sampling_is_exact() {
    let s = spec();
    let (_, tsrc) = random_target(&s, 7);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let dm =
        Transformer::load(&CandleBackend::cpu(), s.config(), &perturbed(&tsrc, 0.5, 3)).unwrap();
    let mut d = DraftModel::new(dm, V, 4).unwrap();
    check("draft-model", &t, &mut d);
}

#[test]
fn dspark_sampling_is_exact() {
    let s = spec();
    let (_, tsrc) = random_target(&s, 8);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let ds = DrafterSpec {
        layers: 1,
        block: 4,
        taps: vec![0, 2],
        layer_scale: 0.5,
        mask_token_id: 7,
    };
    let (cfg, dsrc) = random_dspark(&s, &tsrc, &ds, Some(2.0), 8);
    let mut d = dspark_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    check("dspark", &t, &mut d);
}

#[test]
fn dflash_sampling_is_exact() {
    let s = spec();
    let (_, tsrc) = random_target(&s, 9);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let ds = DrafterSpec {
        layers: 1,
        block: 5,
        taps: vec![1],
        layer_scale: 1.0,
        mask_token_id: 7,
    };
    let (cfg, dsrc) = random_dflash(&s, &ds, 9);
    let mut d = dflash_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    check("dflash", &t, &mut d);
}
