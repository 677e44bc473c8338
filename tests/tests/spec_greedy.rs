//! Greedy identity: for every speculative mode, over many random targets, drafters, prompts,
//! draft caps, budgets and eos sets, the speculative tokens equal the baseline tokens exactly.
//! Drafters range from never accepted (independent random) through partially accepted
//! (perturbed copies, aligned heads) to always accepted (the target's own weights).
//! Runs on the backend of `DSPARK_BACKEND` (candle, or MLX with the `mlx` feature).

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::error::EngineError;
use dspark_engine::generate::{baseline, GenParams, GenResult};
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::draft_budget::DraftBudget;
use dspark_engine::spec::policy::{self, DraftLen};
use dspark_engine::spec::{decode, Drafter, Mode, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, Gen, RandomSpec,
};
use dspark_engine::weights::MemorySource;
use dspark_tests::on_backend;

fn model<B: Backend>(b: &B, spec: &RandomSpec, src: &MemorySource) -> Transformer<B> {
    Transformer::load(b, spec.config(), src).unwrap()
}

use dspark_tests::GreedyCase as Case;

fn cases(seed: u64, n: usize, vocab: u32) -> Vec<Case> {
    let mut g = Gen::new(seed, "cases");
    let mut u = |k: u32| ((g.normal().abs() * 1e4) as u32) % k;
    (0..n)
        .map(|_| {
            let len = 1 + u(16) as usize;
            let prompt = (0..len).map(|_| u(vocab)).collect();
            let eos = if u(3) == 0 { vec![u(vocab)] } else { vec![] };
            Case {
                prompt,
                max_new: 1 + u(40) as usize,
                cap: 1 + u(8) as usize,
                eos,
            }
        })
        .collect()
}

fn run_baseline<B: Backend>(t: &Transformer<B>, c: &Case) -> GenResult {
    let p = GenParams {
        max_new_tokens: c.max_new,
        sampling: SamplingParams::greedy(),
        eos: c.eos.clone(),
    };
    baseline::generate(t, &mut t.new_cache(), &c.prompt, &p, &mut Vec::new()).unwrap()
}

fn run_spec<B: Backend>(t: &Transformer<B>, d: &mut dyn Drafter<B>, c: &Case) -> GenResult {
    run_spec_with(t, d, c, SamplingParams::greedy())
}

fn run_spec_with<B: Backend>(
    t: &Transformer<B>,
    d: &mut dyn Drafter<B>,
    c: &Case,
    sampling: SamplingParams,
) -> GenResult {
    let p = GenParams {
        max_new_tokens: c.max_new,
        sampling,
        eos: c.eos.clone(),
    };
    let s = SpecParams {
        max_draft: c.cap,
        confidence_threshold: 0.0,
        lookup: false,
    };
    let mut cache = t.new_cache();
    d.truncate(0);
    let mut sink = Vec::new();
    let r = decode::generate(t, &mut cache, d, &c.prompt, &p, &s, &mut sink).unwrap();
    assert_eq!(sink, r.tokens, "sink sees exactly the emitted tokens");
    assert!(r.tokens.len() <= c.max_new, "max_tokens exceeded");
    r
}

#[test]
fn draft_model_greedy_equals_baseline() {
    on_backend!(draft_model_greedy)
}

fn draft_model_greedy<B: Backend>(b: B) {
    let mut combos = 0;
    let mut accepted_runs = [0usize; 3];
    let mut lens = vec![DraftLen::Fixed(8)];
    if dspark_tests::selected_backend() == dspark_tests::Which::Candle {
        lens.push(policy::draft_len(Mode::Draft, None));
    }
    for seed in 0..4u64 {
        let spec = RandomSpec::tiny(64);
        let (_, tsrc) = random_target(&spec, seed);
        let target = model(&b, &spec, &tsrc);
        // drafters: the target itself, a perturbed copy, an unrelated model
        let (_, other) = random_target(&spec, 1000 + seed);
        let drafters = [tsrc.clone(), perturbed(&tsrc, 0.3, seed), other];
        for (k, dsrc) in drafters.iter().enumerate() {
            // a fixed draft count and the adaptive one the launcher uses by default. Only the
            // CPU kernels are batch-invariant (a verify row gives a decode step's bits); MLX
            // and CUDA agree only up to rounding, so a block size other than the fixed one's
            // flipped a near-tie there (MLX, seed 2, perturbed drafter): their greedy identity
            // rests on logit margins, a known gap tracked for those backends
            for &len in &lens {
                let mut d = DraftModel::new(model(&b, &spec, dsrc), 64, len).unwrap();
                for c in cases(seed * 10 + k as u64, 6, 64) {
                    let base = run_baseline(&target, &c);
                    let sp = run_spec(&target, &mut d, &c);
                    assert_eq!(
                        sp.tokens, base.tokens,
                        "seed {seed} drafter {k} {len:?} prompt {:?}",
                        c.prompt
                    );
                    assert_eq!(sp.finish_reason, base.finish_reason);
                    if sp.stats.accept_lengths.iter().any(|&a| a > 1) {
                        accepted_runs[k] += 1;
                    }
                    combos += 1;
                }
            }
        }
    }
    assert_eq!(combos, 72 * lens.len());
    // the self-drafter must exercise long accepted runs, the perturbed one partial ones
    assert!(
        accepted_runs[0] > combos / 6 && accepted_runs[1] > combos / 12,
        "{accepted_runs:?}"
    );
}

fn drafter_spec(spec: &RandomSpec, block: usize, taps: Vec<usize>) -> DrafterSpec {
    DrafterSpec {
        layers: 2,
        block,
        taps,
        layer_scale: 0.5,
        mask_token_id: spec.vocab as u32 - 1,
    }
}

#[test]
fn dspark_greedy_equals_baseline() {
    on_backend!(dspark_greedy)
}

fn dspark_greedy<B: Backend>(b: B) {
    let mut combos = 0;
    let mut long_runs = 0;
    for seed in 0..4u64 {
        // weak layers: the target is close to its bigram chain, which the aligned head follows
        let spec = RandomSpec {
            layer_scale: 0.15,
            ..RandomSpec::tiny(64)
        };
        let (_, tsrc) = random_target(&spec, 20 + seed);
        let target = model(&b, &spec, &tsrc);
        let ds = drafter_spec(&spec, 7, vec![0, 1, 2]);
        for (k, align) in [Some(4.0f32), None].into_iter().enumerate() {
            let (cfg, dsrc) = random_dspark(&spec, &tsrc, &ds, align, seed);
            let mut d = dspark_from_parts(&b, &cfg, &dsrc, &target).unwrap();
            for c in cases(seed * 10 + 100 + k as u64, 10, 64) {
                let base = run_baseline(&target, &c);
                let sp = run_spec(&target, &mut d, &c);
                assert_eq!(
                    sp.tokens, base.tokens,
                    "seed {seed} align {align:?} prompt {:?}",
                    c.prompt
                );
                assert_eq!(sp.finish_reason, base.finish_reason);
                if sp.stats.accept_lengths.iter().any(|&a| a >= 4) {
                    long_runs += 1;
                }
                combos += 1;
            }
        }
    }
    assert_eq!(combos, 80);
    assert!(
        long_runs >= 10,
        "aligned DSpark should accept long runs: {long_runs}"
    );
}

#[test]
fn dflash_greedy_equals_baseline() {
    on_backend!(dflash_greedy)
}

fn dflash_greedy<B: Backend>(b: B) {
    let mut combos = 0;
    for seed in 0..4u64 {
        let spec = RandomSpec::tiny(64);
        let (_, tsrc) = random_target(&spec, 40 + seed);
        let target = model(&b, &spec, &tsrc);
        let ds = DrafterSpec {
            layer_scale: 3.0,
            ..drafter_spec(&spec, 8, vec![0, 2])
        };
        let (cfg, dsrc) = random_dflash(&spec, &ds, seed);
        let mut d = dflash_from_parts(&b, &cfg, &dsrc, &target).unwrap();
        for c in cases(seed * 10 + 200, 12, 64) {
            let base = run_baseline(&target, &c);
            let sp = run_spec(&target, &mut d, &c);
            assert_eq!(sp.tokens, base.tokens, "seed {seed} prompt {:?}", c.prompt);
            assert_eq!(sp.finish_reason, base.finish_reason);
            combos += 1;
        }
    }
    assert_eq!(combos, 48);
}

/// DFlash and DSpark's default: each round's draft count is chosen from measured acceptance
/// and wall time (so it differs from run to run); greedy output must not change. One budget
/// per drafter carries over all its cases, as the pipeline carries it over requests.
#[test]
fn measured_draft_count_greedy_equals_baseline() {
    on_backend!(measured_count_greedy)
}

fn measured_count_greedy<B: Backend>(b: B) {
    if !b.rows_batch_invariant() {
        // the pipeline keeps the fixed count on such backends (see policy::count_may_vary)
        eprintln!("skipped: {} rows are not batch-invariant", b.name());
        return;
    }
    let mut combos = 0;
    let mut counts_seen = std::collections::BTreeSet::new();
    for seed in 0..4u64 {
        let spec = RandomSpec {
            layer_scale: 0.15,
            ..RandomSpec::tiny(64)
        };
        let (_, tsrc) = random_target(&spec, 60 + seed);
        let target = model(&b, &spec, &tsrc);
        let (cfg, dsrc) = random_dspark(
            &spec,
            &tsrc,
            &drafter_spec(&spec, 7, vec![0, 1, 2]),
            Some(4.0),
            seed,
        );
        let ds: Box<dyn Drafter<B>> =
            Box::new(dspark_from_parts(&b, &cfg, &dsrc, &target).unwrap());
        let fs = DrafterSpec {
            layer_scale: 3.0,
            ..drafter_spec(&spec, 8, vec![0, 2])
        };
        let (cfg, fsrc) = random_dflash(&spec, &fs, seed);
        let df: Box<dyn Drafter<B>> =
            Box::new(dflash_from_parts(&b, &cfg, &fsrc, &target).unwrap());
        // a draft model with the launcher's default (adaptive) length, whose count the
        // budget then overrides; synthetic costs where a plain step is the best per token, so
        // that rounds without drafts (the pending token joins the draft model's backlog)
        // alternate with the warm-up's and the explorations' drafting rounds
        let dm: Box<dyn Drafter<B>> = Box::new(
            DraftModel::new(
                model(&b, &spec, &perturbed(&tsrc, 0.3, seed)),
                64,
                policy::draft_len(Mode::Draft, None),
            )
            .unwrap(),
        );
        fn plain_step_pays(k: usize) -> f64 {
            if k == 0 {
                1.0
            } else {
                2.5 + 0.5 * k as f64
            }
        }
        for (k, mut d) in [ds, df, dm].into_iter().enumerate() {
            let mut budget = if k == 2 {
                DraftBudget::with_synthetic_cost(d.block_len(), plain_step_pays)
            } else {
                DraftBudget::new(d.block_len())
            };
            for c in cases(seed * 10 + 300 + k as u64, 12, 64) {
                let base = run_baseline(&target, &c);
                let p = GenParams {
                    max_new_tokens: c.max_new,
                    sampling: SamplingParams::greedy(),
                    eos: c.eos.clone(),
                };
                let mode = [Mode::Dspark, Mode::Dflash, Mode::Draft][k];
                let s = policy::spec_params(mode, None, 0.0, false);
                d.truncate(0);
                let sp = decode::generate_with(
                    &target,
                    &mut target.new_cache(),
                    d.as_mut(),
                    &c.prompt,
                    &p,
                    &s,
                    Some(&mut budget),
                    &mut Vec::new(),
                )
                .unwrap();
                assert_eq!(
                    sp.tokens, base.tokens,
                    "seed {seed} drafter {k} prompt {:?}",
                    c.prompt
                );
                assert_eq!(sp.finish_reason, base.finish_reason);
                combos += 1;
            }
            let used = budget.rounds_by_count();
            if k == 2 {
                // mostly plain steps, with drafting rounds between them
                let drafting: u64 = used[1..].iter().sum();
                assert!(used[0] > drafting && drafting >= 12, "{used:?}");
            } else {
                counts_seen.extend((1..used.len()).filter(|&j| used[j] > 0));
            }
        }
    }
    assert_eq!(combos, 144);
    assert!(counts_seen.len() >= 4, "draft counts used: {counts_seen:?}");
}

#[test]
fn drafters_that_do_not_fit_the_target_are_rejected_with_the_mismatch_named() {
    let spec = RandomSpec::tiny(64);
    let (_, tsrc) = random_target(&spec, 1);
    let target = Transformer::load(&CandleBackend::cpu(), spec.config(), &tsrc).unwrap();
    let b = CandleBackend::cpu();
    let err = |r: Result<(), EngineError>| r.unwrap_err().to_string();
    // taps a layer the target does not have
    let (cfg, src) = random_dflash(&spec, &drafter_spec(&spec, 8, vec![0, 7]), 1);
    let e = err(dflash_from_parts(&b, &cfg, &src, &target).map(|_| ()));
    assert!(
        e.contains("target layer 7") && e.contains("3 layers"),
        "{e}"
    );
    // other vocabulary
    let other = RandomSpec::tiny(80);
    let (cfg, src) = random_dspark(
        &other,
        &random_target(&other, 2).1,
        &drafter_spec(&other, 7, vec![0]),
        None,
        2,
    );
    let e = err(dspark_from_parts(&b, &cfg, &src, &target).map(|_| ()));
    assert!(e.contains("vocab_size 80") && e.contains("64"), "{e}");
    // other hidden size for a drafter that shares the target's embedding
    let wide = RandomSpec {
        hidden: 48,
        ..RandomSpec::tiny(64)
    };
    let (cfg, src) = random_dflash(&wide, &drafter_spec(&wide, 8, vec![0]), 3);
    let e = err(dflash_from_parts(&b, &cfg, &src, &target).map(|_| ()));
    assert!(e.contains("hidden_size 48"), "{e}");
    // a draft model with another vocabulary
    let (_, osrc) = random_target(&other, 4);
    let dm = Transformer::load(&b, other.config(), &osrc).unwrap();
    let e = err(DraftModel::new(dm, 64, 4).map(|_| ()));
    assert!(e.contains("vocabulary 80"), "{e}");
}

/// A seeded sampled request draws the same tokens whatever ran before it on the same drafter:
/// the adaptive draft count restarts with every sequence (it once carried over, so a request
/// repeated after another one consumed its random numbers differently; the openai-SDK e2e test
/// of seeded `n` caught it).
#[test]
fn adaptive_draft_count_restarts_with_every_sequence() {
    on_backend!(adaptive_restart)
}

fn adaptive_restart<B: Backend>(b: B) {
    let spec = RandomSpec::tiny(64);
    let (_, tsrc) = random_target(&spec, 3);
    let target = model(&b, &spec, &tsrc);
    let len = policy::draft_len(Mode::Draft, None);
    let mut d = DraftModel::new(model(&b, &spec, &perturbed(&tsrc, 0.3, 3)), 64, len).unwrap();
    let mut sampled = |prompt: &[u32], seed: u64| {
        let c = Case {
            prompt: prompt.to_vec(),
            max_new: 40,
            cap: 8,
            eos: vec![],
        };
        let sampling = SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        run_spec_with(&target, &mut d, &c, sampling).tokens
    };
    let first = sampled(&[1, 2, 3], 7);
    // another sequence in between moves the draft count
    sampled(&[5, 4, 3, 2, 1, 0, 7], 11);
    assert_eq!(sampled(&[1, 2, 3], 7), first);
}

/// The fixed-shape step path (`Backend::run_step`: CUDA graphs on a GPU, where the CUDA run of
/// this binary covers it) taken on the CPU too, target steps and DFlash block forwards alike:
/// greedy output still equals the baseline.
#[test]
fn step_path_greedy_equals_baseline_on_the_cpu() {
    let b = || CandleBackend::cpu().with_step_graphs(true);
    dflash_greedy(b());
    dspark_greedy(b());
    draft_model_greedy(b());
}

/// On a GPU the fixed-shape steps are CUDA graphs: with heads of 64 (which the one-launch
/// attention inputs take; the tiny specs' heads of 8 run op by op), the target's decode steps
/// and verify blocks and the DFlash (block 16) and DSpark (block 7) block forwards replay
/// captured graphs, and greedy output still equals the baseline, in f32 and bf16.
#[cfg(feature = "cuda")]
#[test]
fn cuda_step_graphs_greedy_equals_baseline() {
    use dspark_engine::backend::DType;
    let spec = dspark_tests::graph_capturable_spec(256);
    for dtype in [DType::F32, DType::BF16] {
        let b = CandleBackend::cuda(0)
            .unwrap_or_else(|e| panic!("cuda:0: {e}"))
            .with_dtype(dtype)
            .with_step_graphs(true);
        let mut combos = 0;
        for seed in 0..2u64 {
            let (_, tsrc) = random_target(&spec, 60 + seed);
            let target = model(&b, &spec, &tsrc);
            let fs = DrafterSpec {
                layer_scale: 3.0,
                ..drafter_spec(&spec, 16, vec![0, 2])
            };
            let (cfg, dsrc) = random_dflash(&spec, &fs, seed);
            let mut dflash = dflash_from_parts(&b, &cfg, &dsrc, &target).unwrap();
            let ps = drafter_spec(&spec, 7, vec![0, 1, 2]);
            let (cfg, dsrc) = random_dspark(&spec, &tsrc, &ps, Some(4.0), seed);
            let mut dspark = dspark_from_parts(&b, &cfg, &dsrc, &target).unwrap();
            for c in cases(seed * 10 + 300, 10, 256) {
                let base = run_baseline(&target, &c);
                for d in [&mut dflash as &mut dyn Drafter<_>, &mut dspark] {
                    let sp = run_spec(&target, d, &c);
                    let who = d.name();
                    assert_eq!(sp.tokens, base.tokens, "{dtype:?} {who} seed {seed}");
                    assert_eq!(sp.finish_reason, base.finish_reason);
                    combos += 1;
                }
            }
        }
        assert_eq!(combos, 40);
        let st = b.step_graph_stats();
        eprintln!("{dtype:?}: graphs {st:?}");
        assert_eq!(st.failed, 0, "{dtype:?}: {st:?}");
        assert!(st.replayed >= 200, "{dtype:?}: {st:?}");
    }
}
