//! Seeded sampling with DFlash's and DSpark's default draft count: the count may not follow the
//! clock there (the same seed must draw the same tokens on every run), so each request gets a
//! budget of its own on the backend's prior round costs (`DraftBudget::with_prior_cost`). The
//! same request and seed then give the same tokens and the same rounds whatever ran before it,
//! and rounds verify few drafts where few are accepted (where they once verified the full block
//! every round). Exactness of sampling under this count: tests/tests/spec_sampling.rs.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::generate::{GenParams, GenResult};
use dspark_engine::load::load_model;
use dspark_engine::pipeline::{load_drafter, Pipeline};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{policy, Mode};
use dspark_tests::fixture;

fn pipeline(mode: Mode, drafter: &str) -> Pipeline<CandleBackend> {
    let b = CandleBackend::cpu();
    let lm = load_model(&b, &fixture("spec/models/target"), None).unwrap();
    let d = load_drafter(
        &b,
        &b,
        mode,
        &fixture(&format!("spec/models/{drafter}")),
        &lm.model,
        4,
        dspark_engine::drafters::draft_vocab::DraftVocabSize::Drafter,
    )
    .unwrap();
    // no configured count: the default, chosen round by round
    let spec = policy::spec_params(mode, None, 0.0, false);
    assert!(policy::chooses_draft_count(mode, spec.max_draft));
    Pipeline::new(lm, mode, Some(d), spec).unwrap()
}

fn run(p: &mut Pipeline<CandleBackend>, prompt: &[u32], seed: Option<u64>) -> GenResult {
    let sampling = match seed {
        Some(s) => SamplingParams {
            temperature: 0.8,
            seed: Some(s),
            ..SamplingParams::default()
        },
        None => SamplingParams::greedy(),
    };
    let params = GenParams {
        max_new_tokens: 48,
        sampling,
        eos: vec![],
    };
    p.generate(prompt, &params, &mut Vec::new()).unwrap()
}

#[test]
fn seeded_requests_repeat_their_rounds_whatever_ran_before() {
    for (mode, drafter) in [(Mode::Dflash, "dflash-accept"), (Mode::Dspark, "dspark")] {
        let mut p = pipeline(mode, drafter);
        let prompt = [3u32, 17, 5, 9, 30, 2];
        let first = run(&mut p, &prompt, Some(7));
        // other requests in between: greedy ones move the measured budget, sampled ones
        // consume random numbers of their own
        run(&mut p, &[8, 1, 44, 2], None);
        run(&mut p, &[12, 13, 14], Some(11));
        run(&mut p, &[6, 6, 6, 6, 6], None);
        let again = run(&mut p, &prompt, Some(7));
        assert_eq!(again.tokens, first.tokens, "{drafter}");
        assert_eq!(
            again.stats.accept_lengths, first.stats.accept_lengths,
            "{drafter}"
        );
        // and on a fresh pipeline
        let fresh = run(&mut pipeline(mode, drafter), &prompt, Some(7));
        assert_eq!(fresh.tokens, first.tokens, "{drafter}");
        assert_eq!(fresh.stats.accept_lengths, first.stats.accept_lengths);
        assert_eq!(first.tokens.len(), 48);
    }
}

/// Where drafts are seldom accepted past the first (these small fixture drafters at T = 0.8),
/// the CPU's prior (each row of a round about a third of a decode step) makes many rounds
/// plain steps and the rest short, with a draft every few rounds to keep learning; before,
/// every seeded round verified the full block (7 drafts here).
#[test]
fn seeded_rounds_verify_few_drafts_where_few_are_accepted() {
    for (mode, drafter) in [(Mode::Dflash, "dflash-accept"), (Mode::Dspark, "dspark")] {
        let mut p = pipeline(mode, drafter);
        let (mut plain, mut all, mut drafts, mut tokens) = (0, 0, 0, 0);
        for seed in 0..6 {
            let r = run(&mut p, &[3, 17, 5, 9 + seed as u32], Some(seed));
            let k = &r.stats.drafts_per_round;
            assert_eq!(k.len(), r.stats.accept_lengths.len());
            plain += k.iter().filter(|&&n| n == 0).count();
            all += k.len();
            drafts += k.iter().sum::<usize>();
            tokens += r.tokens.len();
        }
        let mean = drafts as f64 / all as f64;
        eprintln!(
            "{drafter}: {plain}/{all} plain rounds, {mean:.2} drafts per round, {tokens} tokens"
        );
        assert!(
            plain * 10 >= all * 4,
            "{drafter}: {plain} of {all} rounds plain"
        );
        assert!(
            mean < 1.5 && drafts > 0,
            "{drafter}: {mean:.2} drafts per round"
        );
    }
}
