//! Draft vocabularies (`drafters/draft_vocab.rs`): a DFlash or DSpark head that scores only
//! some ids must keep greedy output identical to the baseline's, over random targets,
//! drafters, subset sizes, rankings (id order and random), prompts, caps and eos sets; every
//! draft must lie in the subset (the ranked ids and the prompt's); and a round whose grammar
//! allows only ids outside it ends its drafts instead of failing. Sampling exactness with a draft vocabulary is in spec_sampling.rs
//! (`dspark_sampling_is_exact_with_a_draft_vocabulary`).

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_vocab::{DraftVocabSize, VocabChoice};
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::{baseline, GenResult};
use dspark_engine::model::transformer::Transformer;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    random_dflash, random_dspark, random_target, DrafterSpec, Gen, RandomSpec,
};
use dspark_tests::recorder::Recorder;

const VOCAB: usize = 64;

use dspark_tests::GreedyCase as Case;

fn cases(seed: u64, n: usize) -> Vec<Case> {
    let mut g = Gen::new(seed, "draft-vocab cases");
    let mut u = |k: usize| ((g.normal().abs() * 1e4) as usize) % k;
    (0..n)
        .map(|_| Case {
            prompt: (0..1 + u(12)).map(|_| u(VOCAB) as u32).collect(),
            max_new: 1 + u(40),
            cap: 1 + u(8),
            eos: if u(3) == 0 {
                vec![u(VOCAB) as u32]
            } else {
                vec![]
            },
        })
        .collect()
}

fn run_spec<B: Backend>(
    t: &Transformer<B>,
    d: &mut dyn Drafter<B>,
    c: &Case,
) -> (GenResult, Vec<Vec<u32>>) {
    let s = SpecParams {
        max_draft: c.cap,
        confidence_threshold: 0.0,
        lookup: false,
    };
    d.truncate(0);
    let mut rec = Recorder::new(d);
    let r = decode::generate(
        t,
        &mut t.new_cache(),
        &mut rec,
        &c.prompt,
        &c.params(),
        &s,
        &mut Vec::new(),
    )
    .unwrap();
    (r, rec.rounds())
}

/// A random ranking of the vocabulary (or none: id order), seeded.
fn ranking(seed: u64, random: bool) -> Option<Vec<u32>> {
    random.then(|| {
        let mut g = Gen::new(seed, "ranking");
        let mut keyed: Vec<(f32, u32)> = (0..VOCAB as u32).map(|i| (g.normal(), i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        keyed.into_iter().map(|(_, i)| i).collect()
    })
}

fn drafter_spec(block: usize, taps: Vec<usize>, layer_scale: f32) -> DrafterSpec {
    DrafterSpec {
        layers: 2,
        block,
        taps,
        layer_scale,
        mask_token_id: VOCAB as u32 - 1,
    }
}

/// On the host path (the CPU's) and on the device-argmax paths a GPU takes (DFlash's argmax
/// over the subset, DSpark's Markov chain looked up by subset rows, the pending token in the
/// extended `w1`), here both on the CPU: greedy identity, and the same drafts every round
/// (both sum the logits and the Markov bias in f32).
#[test]
fn greedy_with_a_draft_vocabulary_equals_baseline() {
    let host = greedy_identity(CandleBackend::cpu());
    let device = greedy_identity(CandleBackend::cpu().with_device_argmax(true));
    assert_eq!(host.len(), device.len());
    for (i, (h, d)) in host.iter().zip(&device).enumerate() {
        assert_eq!(h, d, "run {i}: the device path drafted otherwise");
    }
}

/// The ranked subset with a prompt's ids added, ascending.
fn with_prompt(subset: &[u32], prompt: &[u32]) -> Vec<u32> {
    let mut ids: Vec<u32> = subset.iter().chain(prompt).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The same on the GPU, f32: DFlash's argmax over the subset and DSpark's Markov chain over the
/// extended `w1` on the device, with each case's prompt rows joined to the ranked ones.
#[cfg(feature = "cuda")]
#[test]
fn cuda_greedy_with_a_draft_vocabulary_equals_baseline() {
    greedy_identity(dspark_tests::cuda_backend());
}

/// With CUDA graphs (heads of 64, which the captured steps take), a prompt whose ids join the
/// draft vocabulary replays the block steps an earlier prompt captured: the steps read only the
/// ranked rows, and the prompt's rows join after them. Prompts A and B (the same length, each
/// with ids outside the ranked subset) run A, B, A, B over one cache; the second A and B
/// capture nothing (they captured a step for every draft count before this change, when the
/// key named the prompt rows' build), and all four equal the baseline.
#[cfg(feature = "cuda")]
#[test]
fn cuda_a_new_prompt_replays_the_drafters_captured_steps() {
    use dspark_engine::backend::DType;
    const V: usize = 256;
    let spec = dspark_tests::graph_capturable_spec(V);
    let b = CandleBackend::cuda(0)
        .unwrap_or_else(|e| panic!("cuda:0: {e}"))
        .with_dtype(DType::BF16)
        .with_step_graphs(true);
    let (_, tsrc) = random_target(&spec, 71);
    let target = Transformer::load(&b, spec.config(), &tsrc).unwrap();
    let mask = |d: DrafterSpec| DrafterSpec {
        mask_token_id: V as u32 - 1,
        ..d
    };
    let (fcfg, fsrc) = random_dflash(&spec, &mask(drafter_spec(16, vec![0, 2], 3.0)), 5);
    let (dcfg, dsrc) = random_dspark(
        &spec,
        &tsrc,
        &mask(drafter_spec(7, vec![0, 1, 2], 0.5)),
        Some(4.0),
        5,
    );
    let choice = || VocabChoice::ranked(None, None).with_prompt_ids(true);
    let mut drafters: [Box<dyn Drafter<CandleBackend>>; 2] = [
        Box::new(
            dflash_from_parts(&b, &fcfg, &fsrc, &target)
                .unwrap()
                .with_vocab_choice(choice()),
        ),
        Box::new(
            dspark_from_parts(&b, &dcfg, &dsrc, &target)
                .unwrap()
                .with_vocab_choice(choice()),
        ),
    ];
    let prompts: [Vec<u32>; 2] = [vec![200, 201, 5, 6, 7, 210], vec![220, 230, 5, 6, 7, 240]];
    for d in drafters.iter_mut() {
        assert_eq!(
            d.set_draft_vocab(&target, DraftVocabSize::Top(128))
                .unwrap(),
            Some(128)
        );
        let cases: Vec<Case> = prompts
            .iter()
            .map(|p| Case {
                prompt: p.clone(),
                max_new: 48,
                cap: 6,
                eos: vec![],
            })
            .collect();
        let base: Vec<_> = cases
            .iter()
            .map(|c| {
                let mut cache = target.new_cache();
                baseline::generate(&target, &mut cache, &c.prompt, &c.params(), &mut Vec::new())
                    .unwrap()
            })
            .collect();
        let s = SpecParams {
            max_draft: 6,
            confidence_threshold: 0.0,
            lookup: false,
        };
        let mut cache = target.new_cache();
        let mut captured = Vec::new();
        for (i, c) in cases.iter().chain(&cases).enumerate() {
            cache.clear();
            d.truncate(0);
            let before = b.step_captures();
            let r = decode::generate(
                &target,
                &mut cache,
                d.as_mut(),
                &c.prompt,
                &c.params(),
                &s,
                &mut Vec::new(),
            )
            .unwrap();
            captured.push(b.step_captures() - before);
            assert_eq!(r.tokens, base[i % 2].tokens, "{} run {i}", d.name());
        }
        eprintln!("{}: steps captured per run {captured:?}", d.name());
        assert!(captured[0] > 0, "{}: {captured:?}", d.name());
        assert_eq!(&captured[2..], [0, 0], "{}: {captured:?}", d.name());
    }
    let st = b.step_graph_stats();
    assert_eq!(st.failed, 0, "{st:?}");
}

/// Greedy identity over every case; returns each run's rounds (`[pending, drafts..]`). Each
/// case's prompt ids join the ranked ones, so the rows are rebuilt from case to case, and
/// some drafts must be prompt ids outside the ranked subset.
fn greedy_identity(b: CandleBackend) -> Vec<Vec<Vec<u32>>> {
    let (mut combos, mut accepted, mut from_prompt) = (0, 0, 0);
    let mut runs = Vec::new();
    for seed in 0..4u64 {
        let spec = RandomSpec {
            layer_scale: 0.15,
            ..RandomSpec::tiny(VOCAB)
        };
        let (_, tsrc) = random_target(&spec, 500 + seed);
        let target = Transformer::load(&b, spec.config(), &tsrc).unwrap();
        let (dcfg, dsrc) = random_dspark(
            &spec,
            &tsrc,
            &drafter_spec(7, vec![0, 1, 2], 0.5),
            Some(4.0),
            seed,
        );
        let (fcfg, fsrc) = random_dflash(&spec, &drafter_spec(8, vec![0, 2], 3.0), seed);
        for (k, random) in [(8usize, true), (32, false), (32, true), (60, true)] {
            let rank = ranking(seed * 7 + k as u64, random);
            let mut subset: Vec<u32> = match &rank {
                Some(r) => r[..k].to_vec(),
                None => (0..k as u32).collect(),
            };
            subset.sort_unstable();
            let ds = dspark_from_parts(&b, &dcfg, &dsrc, &target).unwrap();
            let df = dflash_from_parts(&b, &fcfg, &fsrc, &target).unwrap();
            let choice = || VocabChoice::ranked(rank.clone(), None);
            let mut drafters: [Box<dyn Drafter<CandleBackend>>; 2] = [
                Box::new(ds.with_vocab_choice(choice())),
                Box::new(df.with_vocab_choice(choice())),
            ];
            for (j, d) in drafters.iter_mut().enumerate() {
                assert_eq!(
                    d.set_draft_vocab(&target, DraftVocabSize::Top(k)).unwrap(),
                    Some(k)
                );
                assert_eq!(d.draft_vocab_len(), Some(k));
                for c in cases(seed * 100 + k as u64 * 3 + j as u64, 6) {
                    let base = baseline::generate(
                        &target,
                        &mut target.new_cache(),
                        &c.prompt,
                        &c.params(),
                        &mut Vec::new(),
                    )
                    .unwrap();
                    let (sp, rounds) = run_spec(&target, d.as_mut(), &c);
                    let what = format!(
                        "seed {seed} drafter {j} subset {k} (random ranking {random}) prompt {:?}",
                        c.prompt
                    );
                    assert_eq!(sp.tokens, base.tokens, "{what}");
                    assert_eq!(sp.finish_reason, base.finish_reason, "{what}");
                    let allowed = with_prompt(&subset, &c.prompt);
                    for r in &rounds {
                        let outside: Vec<_> = r[1..]
                            .iter()
                            .filter(|t| allowed.binary_search(t).is_err())
                            .collect();
                        assert!(
                            outside.is_empty(),
                            "{what}: drafts {outside:?} outside the subset"
                        );
                        from_prompt += r[1..]
                            .iter()
                            .filter(|t| subset.binary_search(t).is_err())
                            .count();
                    }
                    accepted += sp.stats.accept_lengths.iter().filter(|&&a| a > 1).count();
                    runs.push(rounds);
                    combos += 1;
                }
            }
            // the whole vocabulary again
            for d in drafters.iter_mut() {
                assert_eq!(
                    d.set_draft_vocab(&target, DraftVocabSize::Full).unwrap(),
                    None
                );
                assert_eq!(d.draft_vocab_len(), None);
            }
        }
    }
    assert_eq!(combos, 4 * 4 * 2 * 6);
    assert!(
        accepted >= 40,
        "drafts from a subset should still be accepted: {accepted} rounds"
    );
    assert!(
        from_prompt >= 20,
        "prompt ids outside the ranked subset should be drafted: {from_prompt}"
    );
    runs
}

/// A drafter config's `draft_vocab_size` is its default; `--draft-vocab 0` turns it off.
#[test]
fn the_config_sets_the_default_size() {
    let b = CandleBackend::cpu();
    let spec = RandomSpec::tiny(VOCAB);
    let (_, tsrc) = random_target(&spec, 3);
    let target = Transformer::load(&b, spec.config(), &tsrc).unwrap();
    let (mut cfg, src) = random_dflash(&spec, &drafter_spec(8, vec![0, 2], 1.0), 3);
    cfg["draft_vocab_size"] = 24.into();
    let mut d = dflash_from_parts(&b, &cfg, &src, &target).unwrap();
    assert_eq!(d.draft_vocab_len(), Some(24));
    assert_eq!(
        d.set_draft_vocab(&target, DraftVocabSize::Full).unwrap(),
        None
    );
    assert_eq!(
        d.set_draft_vocab(&target, DraftVocabSize::Drafter).unwrap(),
        Some(24)
    );
    // a size that covers the vocabulary is the whole vocabulary
    cfg["draft_vocab_size"] = (VOCAB as u64).into();
    let d = dflash_from_parts(&b, &cfg, &src, &target).unwrap();
    assert_eq!(d.draft_vocab_len(), None);
    cfg["draft_vocab_size"] = "many".into();
    let e = dflash_from_parts(&b, &cfg, &src, &target)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("draft_vocab_size") && e.contains("many"), "{e}");
}

/// Real weights: the demo target and its trained drafters with their shipped rankings
/// (`draft_vocab.json`) at 16,384 ids, their default: greedy output equals the baseline's on
/// held-out MT-Bench prompts, and every draft lies in the ranking's first 16,384 ids or the
/// prompt's.
#[test]
fn the_demo_drafters_stay_exact_over_their_shipped_rankings() {
    use dspark_engine::drafters::draft_vocab::{choose_ids, read_ranking};
    use dspark_engine::load::load_model;
    use dspark_engine::pipeline::load_drafter;
    use dspark_engine::spec::Mode;
    const K: usize = 16384;
    let b = CandleBackend::cpu().with_exact_drafts(false);
    let lm = load_model(
        &b,
        &dspark_tests::artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        None,
    )
    .unwrap();
    let t = &lm.model;
    let vocab = t.cfg.vocab_size;
    let prompts = dspark_tests::mtbench_chat_prompts(&lm.tokenizer, 6);
    let case = |p: &Vec<u32>| Case {
        prompt: p.clone(),
        max_new: 40,
        cap: 16,
        eos: lm.eos_ids(),
    };
    let assets = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/drafters");
    for (name, mode) in [
        ("smollm2-135m-dspark-b7", Mode::Dspark),
        ("smollm2-135m-dflash-b16", Mode::Dflash),
    ] {
        let dir = assets.join(name);
        let ranking = read_ranking(&dir, vocab)
            .unwrap()
            .expect("a shipped ranking");
        let subset = choose_ids(Some(&ranking), K, vocab);
        let mut d = load_drafter(&b, &b, mode, &dir, t, 16, DraftVocabSize::Drafter).unwrap();
        // the shipped ranking's size is the drafter's default
        assert_eq!(
            d.draft_vocab_len(),
            Some(K),
            "{name}: the default draft vocabulary"
        );
        assert_eq!(d.set_draft_vocab(t, DraftVocabSize::Full).unwrap(), None);
        assert_eq!(
            d.set_draft_vocab(t, DraftVocabSize::Top(K)).unwrap(),
            Some(K)
        );
        let mut drafted = 0;
        for (i, p) in prompts.iter().enumerate() {
            let c = case(p);
            let base = baseline::generate(
                t,
                &mut t.new_cache(),
                &c.prompt,
                &c.params(),
                &mut Vec::new(),
            )
            .unwrap();
            let (sp, rounds) = run_spec(t, d.as_mut(), &c);
            assert_eq!(sp.tokens, base.tokens, "{name} prompt {i}");
            let allowed = with_prompt(&subset, &c.prompt);
            for r in &rounds {
                drafted += r.len() - 1;
                assert!(
                    r[1..].iter().all(|x| allowed.binary_search(x).is_ok()),
                    "{name} prompt {i}: {r:?}"
                );
            }
        }
        assert!(drafted > 100, "{name}: {drafted} drafts");
    }
}

/// The launcher's size (`--draft-vocab`, settings) reaches the demo's drafters at load: its
/// own count, the whole vocabulary for 0, the shipped ranking's 16,384 when unset.
#[test]
fn the_launch_size_reaches_the_demo_drafters() {
    use dspark_engine::launch::{finish_pipeline, load_target, LaunchSpec};
    use dspark_engine::spec::Mode;
    let b = CandleBackend::cpu();
    let gguf = dspark_tests::artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let assets = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/drafters");
    for (mode, dir) in [
        (Mode::Dspark, "smollm2-135m-dspark-b7"),
        (Mode::Dflash, "smollm2-135m-dflash-b8"),
    ] {
        for (size, want) in [
            (DraftVocabSize::Drafter, Some(16384)),
            (DraftVocabSize::Top(8192), Some(8192)),
            (DraftVocabSize::Full, None),
        ] {
            let mut spec = LaunchSpec::new(&gguf, mode, Some(assets.join(dir)));
            spec.draft_vocab = size;
            spec.prefix_cache = None;
            let lm = load_target(&spec, &b).unwrap();
            let pipe = finish_pipeline(&spec, &b, lm).unwrap();
            assert_eq!(pipe.draft_vocab_len(), want, "{dir} {size:?}");
        }
    }
}
