//! Sampling stays exact under a grammar mask: speculative decoding with a draft model and with
//! DSpark must emit whole outputs with the probabilities of the masked, renormalised target.
//!
//! Vocabulary of 8: tokens 0-5 are the bytes `a b c d e f`, token 6 is the two bytes `cd`,
//! token 7 is eos (special). The grammar is the regex `[ab][c-f]{1,2}`, so every output is a
//! short path of tokens ending in eos (42 possible token sequences, "a" "cd" and "a" "c" "d"
//! counted apart). The reference is written here from the definitions, without the grammar
//! engine: a token is allowed after text `s` when `s` + its bytes is a prefix of a word of the
//! language, eos when `s` is a word; the probability of a sequence is the product, along it,
//! of `softmax(logits / T)` restricted to the allowed tokens and renormalised, in f64, from
//! the target's own logits.
//!
//! One Pearson chi-squared test per drafter over the whole-output categories (expected count
//! < 5 pooled) requires p > [`ALPHA`] = 0.001. Power: against any alternative at total
//! variation [`TV`] = 0.03, the noncentrality is at least 4·N·TV² less what pooling hides
//! (`stats::worst_case_noncentrality`); with N = 30,000 that is λ ≥ 108 and the test asserts
//! power ≥ 0.9.

use std::collections::HashMap;

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::constrain::{Compiler, Grammar, Shared};
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::dspark_from_parts;
use dspark_engine::generate::{FinishReason, GenParams};
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{perturbed, random_dspark, random_target, DrafterSpec, RandomSpec};
use dspark_tests::stats::{chi_squared_pooled, power, worst_case_noncentrality};

const V: usize = 8;
const EOS: u32 = 7;
const TV: f64 = 0.03;
const ALPHA: f64 = 0.001;
const TEMPERATURE: f32 = 1.0;
const PROMPT: [u32; 3] = [1, 4, 2];

fn trials() -> usize {
    std::env::var("DSPARK_CHI_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30_000)
}

fn words() -> Vec<Vec<u8>> {
    let mut w: Vec<Vec<u8>> = (b'a'..=b'f').map(|c| vec![c]).collect();
    w.push(b"cd".to_vec());
    w.push(b"\xFF<eos>".to_vec());
    w
}

/// Whether `s` is a prefix of a word of `[ab][c-f]{1,2}`.
fn is_prefix(s: &[u8]) -> bool {
    s.len() <= 3
        && s.first().is_none_or(|c| b"ab".contains(c))
        && s.iter().skip(1).all(|c| (b'c'..=b'f').contains(c))
}

fn is_word(s: &[u8]) -> bool {
    is_prefix(s) && (2..=3).contains(&s.len())
}

/// The masked, renormalised distribution after `text`, from the row's logits, in f64.
fn reference(row: &[f32], text: &[u8]) -> Vec<f64> {
    let w = words();
    let allowed: Vec<bool> = (0..V)
        .map(|t| {
            if t as u32 == EOS {
                is_word(text)
            } else {
                is_prefix(&[text, &w[t][..]].concat())
            }
        })
        .collect();
    let m = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
    let ex: Vec<f64> = row
        .iter()
        .zip(&allowed)
        .map(|(&x, &a)| {
            if a {
                ((x as f64 - m) / TEMPERATURE as f64).exp()
            } else {
                0.0
            }
        })
        .collect();
    let s: f64 = ex.iter().sum();
    ex.into_iter().map(|e| e / s).collect()
}

/// Every complete output (tokens before eos) with its probability.
fn enumerate(
    t: &Transformer<CandleBackend>,
    ids: &mut Vec<u32>,
    text: &mut Vec<u8>,
    prob: f64,
    out: &mut HashMap<Vec<u32>, f64>,
) {
    let out_row = t
        .forward(ids, &mut t.new_cache(), &[], LogitsWanted::Last)
        .unwrap();
    let row = t
        .backend()
        .to_f32_vec(out_row.logits.as_ref().unwrap())
        .unwrap();
    let w = words();
    for (tok, p) in reference(&row, text).into_iter().enumerate() {
        if p == 0.0 {
            continue;
        }
        if tok as u32 == EOS {
            *out.entry(ids[PROMPT.len()..].to_vec()).or_default() += prob * p;
            continue;
        }
        ids.push(tok as u32);
        let n = text.len();
        text.extend_from_slice(&w[tok]);
        enumerate(t, ids, text, prob * p, out);
        text.truncate(n);
        ids.pop();
    }
}

fn check(name: &str, t: &Transformer<CandleBackend>, d: &mut dyn Drafter<CandleBackend>) {
    let mut exact = HashMap::new();
    enumerate(t, &mut PROMPT.to_vec(), &mut Vec::new(), 1.0, &mut exact);
    let total: f64 = exact.values().sum();
    assert!((total - 1.0).abs() < 1e-9, "mass {total}");
    let mut keys: Vec<Vec<u32>> = exact.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys.len(), 42, "{keys:?}");
    let compiler = Compiler::from_token_bytes(words(), vec![EOS]).unwrap();
    let grammar = Grammar::Lark("start: /[ab][c-f]{1,2}/".into());
    let shared = Shared::from(compiler.compile(&grammar).unwrap());
    let mut counts = vec![0usize; keys.len()];
    let (mut rounds, mut accepted) = (0usize, 0usize);
    for trial in 0..trials() {
        let params = GenParams {
            max_new_tokens: 4,
            sampling: SamplingParams {
                temperature: TEMPERATURE,
                seed: Some(trial as u64),
                constraint: Some(shared.clone()),
                ..Default::default()
            },
            eos: vec![EOS],
        };
        let spec = SpecParams {
            max_draft: 3,
            confidence_threshold: 0.0,
            lookup: false,
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
        assert_eq!(r.finish_reason, FinishReason::Stop, "{:?}", r.tokens);
        let i = keys
            .binary_search(&r.tokens)
            .unwrap_or_else(|_| panic!("{name}: {:?} is not a word", r.tokens));
        counts[i] += 1;
        rounds += r.stats.accept_lengths.len();
        accepted += r.stats.accept_lengths.iter().map(|a| a - 1).sum::<usize>();
    }
    let probs: Vec<f64> = keys.iter().map(|k| exact[k]).collect();
    let n: usize = counts.iter().sum();
    let (stat, df, p, pooled) = chi_squared_pooled(&counts, &probs);
    let pow = power(
        df,
        worst_case_noncentrality(n, (TV - pooled).max(0.0)),
        ALPHA,
    );
    let mean = accepted as f64 / rounds.max(1) as f64;
    eprintln!(
        "{name}: chi2 {stat:.2} df {df} p {p:.4} pooled {pooled:.4} power {pow:.3}, \
         {mean:.2} drafts accepted per round"
    );
    assert!(p > ALPHA, "{name}: chi2 {stat} df {df} p {p}");
    assert!(pow >= 0.9, "{name}: power {pow}");
    assert!(
        mean > 0.3,
        "{name}: drafts must be accepted under the mask ({mean})"
    );
}

fn spec() -> RandomSpec {
    RandomSpec {
        layer_scale: 0.3,
        head_scale: 1.2,
        ..RandomSpec::tiny(V)
    }
}

#[test]
fn draft_model_sampling_is_exact_under_a_mask() {
    let s = spec();
    let (_, tsrc) = random_target(&s, 11);
    let b = CandleBackend::cpu();
    let t = Transformer::load(&b, s.config(), &tsrc).unwrap();
    let dm = Transformer::load(&b, s.config(), &perturbed(&tsrc, 0.3, 5)).unwrap();
    let mut d = DraftModel::new(dm, V, 3).unwrap();
    check("draft-model", &t, &mut d);
}

#[test]
fn dspark_sampling_is_exact_under_a_mask() {
    let s = spec();
    let (_, tsrc) = random_target(&s, 12);
    let b = CandleBackend::cpu();
    let t = Transformer::load(&b, s.config(), &tsrc).unwrap();
    let ds = DrafterSpec {
        layers: 1,
        block: 4,
        taps: vec![0, 2],
        layer_scale: 0.2,
        mask_token_id: 7,
    };
    let (cfg, dsrc) = random_dspark(&s, &tsrc, &ds, Some(1.0), 12);
    let mut d = dspark_from_parts(&b, &cfg, &dsrc, &t).unwrap();
    check("dspark", &t, &mut d);
}
