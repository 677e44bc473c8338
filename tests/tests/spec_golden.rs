//! Reference cross-check: on committed tiny checkpoints, our DSpark and DFlash loops reproduce
//! mlx-dspark 0.20.3 and z-lab dflash 0.1.0 round by round: the tokens fed to each verify
//! forward (pending + drafts), the accept lengths and the output tokens. References may
//! overshoot `max_new_tokens` by a block; we never do, so we compare our rounds as a prefix.
//! Runs on the backend of `DSPARK_BACKEND` (candle, or MLX with the `mlx` feature).

use dspark_engine::backend::Backend;
use dspark_engine::drafters::{load_dflash, load_dspark};
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_tests::recorder::Recorder;
use dspark_tests::{as_u32s, fixture, golden, on_backend};
use serde_json::Value;

fn target<B: Backend>(b: &B) -> Transformer<B> {
    let ck = open_checkpoint(&fixture("spec/models/target")).unwrap();
    Transformer::load(b, ck.cfg, ck.source.as_ref()).unwrap()
}

fn run<B: Backend>(
    t: &Transformer<B>,
    d: &mut dyn Drafter<B>,
    prompt: &[u32],
    max_new: usize,
    thr: f32,
) -> (GenResult, Vec<Vec<u32>>) {
    let mut rec = Recorder::new(d);
    rec.truncate(0);
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
        &mut rec,
        prompt,
        &params,
        &spec,
        &mut Vec::new(),
    )
    .unwrap();
    let rounds = rec.rounds();
    (r, rounds)
}

/// Our run against one reference record.
fn check(name: &str, ours: &(GenResult, Vec<Vec<u32>>), reference: &Value, max_new: usize) {
    let (r, rounds) = ours;
    let want_tokens = as_u32s(&reference["token_ids"]);
    assert_eq!(
        r.tokens[..],
        want_tokens[..r.tokens.len()],
        "{name}: tokens"
    );
    assert_eq!(
        r.tokens.len(),
        max_new.min(want_tokens.len()),
        "{name}: token count"
    );
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
    // the last round may be cut by the budget on our side only
    assert_eq!(
        r.stats.accept_lengths[..n - 1],
        accepts[..n - 1],
        "{name}: accept lengths"
    );
}

#[test]
fn dspark_and_dflash_match_mlx_dspark_round_by_round() {
    on_backend!(match_mlx_dspark)
}

/// The greedy loops' device-argmax code (verification picks, DFlash's proposal ids, DSpark's
/// per-row argmax with the Markov bias added on the device) is what runs on a GPU; here the CPU
/// backend is made to take it, and it must reproduce the same goldens round by round.
#[test]
fn device_argmax_paths_match_mlx_dspark_on_the_cpu() {
    if matches!(
        dspark_tests::selected_backend(),
        dspark_tests::Which::Candle
    ) {
        let b = dspark_tests::candle_backend().with_device_argmax(true);
        assert!(b.device_argmax());
        match_mlx_dspark(b);
    }
}

/// The MLPs loaded as one interleaved gate/up weight (`Backend::swiglu_linear`, which the
/// CUDA GEMM's SwiGLU epilogue reads) in the target and both drafters, on the CPU's portable
/// path: the same goldens round by round.
#[test]
fn fused_swiglu_weights_match_mlx_dspark_on_the_cpu() {
    if matches!(
        dspark_tests::selected_backend(),
        dspark_tests::Which::Candle
    ) {
        match_mlx_dspark(dspark_tests::candle_backend().with_fused_swiglu(true));
    }
}

fn match_mlx_dspark<B: Backend>(b: B) {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("spec/golden_mlx.json")).unwrap())
            .unwrap();
    let max_new = g["max_new_tokens"].as_u64().unwrap() as usize;
    let t = target(&b);
    let mut dspark = load_dspark(&b, &fixture("spec/models/dspark"), &t).unwrap();
    let mut dflash = load_dflash(&b, &fixture("spec/models/dflash"), &t).unwrap();
    let mut dflash_acc = load_dflash(&b, &fixture("spec/models/dflash-accept"), &t).unwrap();
    let mut partial = 0;
    for case in g["cases"].as_array().unwrap() {
        let prompt = as_u32s(&case["prompt_ids"]);
        check(
            "dspark",
            &run(&t, &mut dspark, &prompt, max_new, 0.0),
            &case["dspark"],
            max_new,
        );
        check(
            "dspark conf 0.5",
            &run(&t, &mut dspark, &prompt, max_new, 0.5),
            &case["dspark_conf05"],
            max_new,
        );
        check(
            "dflash",
            &run(&t, &mut dflash, &prompt, max_new, 0.0),
            &case["dflash"],
            max_new,
        );
        let acc = run(&t, &mut dflash_acc, &prompt, max_new, 0.0);
        partial += acc
            .0
            .stats
            .accept_lengths
            .iter()
            .filter(|&&a| a > 1)
            .count();
        check("dflash-accept", &acc, &case["dflash_accept"], max_new);
    }
    assert!(
        partial > 10,
        "the accepting DFlash checkpoint must exercise accept/rollback: {partial}"
    );
}

#[test]
fn dflash_matches_zlab_torch() {
    on_backend!(match_zlab)
}

fn match_zlab<B: Backend>(b: B) {
    let g = golden_zlab();
    let t = target(&b);
    for case in g["cases"].as_array().unwrap() {
        let prompt = as_u32s(&case["prompt_ids"]);
        for (key, dir) in [("dflash", "dflash"), ("dflash_accept", "dflash-accept")] {
            // every case must carry both goldens: a missing key is a broken fixture, not a skip
            let reference = case
                .get(key)
                .unwrap_or_else(|| panic!("golden_zlab.json: a case has no {key:?} golden"));
            let max_new = g["max_new_tokens"].as_u64().unwrap() as usize;
            let mut d = load_dflash(&b, &fixture(&format!("spec/models/{dir}")), &t).unwrap();
            let (r, rounds) = run(&t, &mut d, &prompt, max_new, 0.0);
            let want = as_u32s(&reference["token_ids"]);
            assert_eq!(r.tokens[..], want[..r.tokens.len()], "z-lab {key}: tokens");
            // z-lab shrinks the block near the budget end; full blocks must agree exactly
            let drafted: Vec<Vec<u32>> = reference["drafted"]
                .as_array()
                .unwrap()
                .iter()
                .map(as_u32s)
                .collect();
            let full = d.block_len();
            let mut compared = 0;
            for (i, z) in drafted.iter().enumerate().take(rounds.len()) {
                if z.len() == full {
                    assert_eq!(&rounds[i][1..], &z[..], "z-lab {key}: drafts of round {i}");
                    compared += 1;
                }
            }
            assert!(
                compared * 4 >= rounds.len() * 3,
                "z-lab {key}: only {compared} of {} rounds compared",
                rounds.len()
            );
        }
    }
}

fn golden_zlab() -> Value {
    let _ = golden; // goldens of this test live under fixtures/spec
    serde_json::from_str(&std::fs::read_to_string(fixture("spec/golden_zlab.json")).unwrap())
        .unwrap()
}
