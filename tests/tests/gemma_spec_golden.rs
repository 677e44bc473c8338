//! Gemma drafters against the reference, round by round: on the tiny Gemma 4 target of
//! scripts/oracles/make_gemma_spec_tiny.py, our Gemma DSpark drafter (own embedding and head;
//! with the confidence cut at 0.5; and a variant bound to the target's embedding and head) and
//! a DFlash drafter whose RoPE theta sits only in the nested `rope_parameters` reproduce
//! mlx-dspark 0.20.3 (tests/fixtures/spec/golden_mlx_gemma.json, made by
//! scripts/oracles/run_mlx_gemma.py): the tokens fed to every verify forward, the accept lengths
//! and the output. The reference may overshoot `max_new_tokens` by a block; we never do, so
//! our rounds are compared as a prefix. Runs on the backend of `DSPARK_BACKEND`.

use dspark_engine::backend::Backend;
use dspark_engine::drafters::{load_dflash, load_dspark};
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_tests::recorder::Recorder;
use dspark_tests::{as_u32s, fixture, on_backend};
use serde_json::Value;

fn run<B: Backend>(
    t: &Transformer<B>,
    d: &mut dyn Drafter<B>,
    prompt: &[u32],
    max_new: usize,
    thr: f32,
) -> (GenResult, Vec<Vec<u32>>) {
    let mut log = Recorder::new(d);
    log.truncate(0);
    let params = GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let spec = SpecParams {
        max_draft: 64,
        confidence_threshold: thr,
        lookup: false,
    };
    let r = decode::generate(
        t,
        &mut t.new_cache(),
        &mut log,
        prompt,
        &params,
        &spec,
        &mut Vec::new(),
    )
    .unwrap();
    (r, log.rounds())
}

/// Our run against one reference record; returns the rounds compared.
fn check(name: &str, ours: &(GenResult, Vec<Vec<u32>>), reference: &Value, max_new: usize) {
    let (r, rounds) = ours;
    let want = as_u32s(&reference["token_ids"]);
    assert_eq!(r.tokens[..], want[..r.tokens.len()], "{name}: tokens");
    assert_eq!(r.tokens.len(), max_new.min(want.len()), "{name}: count");
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
        rounds.len() <= verified.len() && rounds.len() + 1 >= verified.len(),
        "{name}: {} rounds vs {}",
        rounds.len(),
        verified.len()
    );
    for (i, fed) in rounds.iter().enumerate() {
        assert_eq!(fed, &verified[i], "{name}: verify input of round {i}");
    }
    let n = r.stats.accept_lengths.len();
    assert_eq!(
        r.stats.accept_lengths[..n - 1],
        accepts[..n - 1],
        "{name}: accept lengths"
    );
}

#[test]
fn gemma_dspark_and_dflash_match_mlx_dspark_round_by_round() {
    on_backend!(match_mlx_dspark)
}

fn match_mlx_dspark<B: Backend>(b: B) {
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("spec/golden_mlx_gemma.json")).unwrap(),
    )
    .unwrap();
    let max_new = g["max_new_tokens"].as_u64().unwrap() as usize;
    let ck = open_checkpoint(&fixture("spec/gemma/target")).unwrap();
    let t = Transformer::load(&b, ck.cfg, ck.source.as_ref()).unwrap();
    let mut dspark = load_dspark(&b, &fixture("spec/gemma/dspark"), &t).unwrap();
    let mut bound = load_dspark(&b, &fixture("spec/gemma/dspark-bound"), &t).unwrap();
    let mut dflash = load_dflash(&b, &fixture("spec/gemma/dflash"), &t).unwrap();
    let (mut rounds, mut partial) = (0, 0);
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        let prompt = as_u32s(&case["prompt_ids"]);
        for (mode, thr) in [
            ("dspark", 0.0),
            ("dspark_conf05", 0.5),
            ("dspark_bound", 0.0),
            ("dflash", 0.0),
        ] {
            let d: &mut dyn Drafter<B> = match mode {
                "dspark" | "dspark_conf05" => &mut dspark,
                "dspark_bound" => &mut bound,
                _ => &mut dflash,
            };
            let ours = run(&t, d, &prompt, max_new, thr);
            check(mode, &ours, &case[mode], max_new);
            rounds += ours.1.len();
            partial += ours
                .0
                .stats
                .accept_lengths
                .iter()
                .filter(|&&a| a > 1 && a < 8)
                .count();
        }
    }
    eprintln!("{rounds} rounds matched, {partial} partially accepted");
    assert!(
        partial > 10,
        "the goldens should exercise partial acceptance"
    );
}
