//! Sliding-window layers under speculation: on tiny random Gemma-3-shaped targets with a window
//! of 8, draft-model speculative greedy output equals the baseline token for token while the
//! window wraps inside verified blocks (blocks of up to 9 tokens, prompts of up to 30 tokens,
//! up to 48 new tokens), and rolling back rejected drafts leaves the sliding layers exact.
//! The window is checked to matter: the same weights with full attention give other logits.
//! The sliding layers' bounded storage (kv.rs) is checked directly: positions are dropped,
//! rollbacks down to `floor()` and deep prefix copies (the prefix cache's reuse) continue
//! bit-identically to a fresh computation (within 1e-4 off candle's CPU kernels), and
//! truncating below the floor starts over.
//! Runs on the backend of `DSPARK_BACKEND` (a separate binary from the suites CI runs on MLX).

use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::generate::{baseline, GenParams, GenResult};
use dspark_engine::kv::{KvCache, ROLLBACK_SLACK};
use dspark_engine::model::config::TransformerConfig;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{perturbed, random_gemma_target, Gen, RandomSpec};
use dspark_engine::weights::MemorySource;
use dspark_tests::on_backend;

const WINDOW: usize = 8;

fn model<B: Backend>(b: &B, cfg: &TransformerConfig, src: &MemorySource) -> Transformer<B> {
    Transformer::load(b, cfg.clone(), src).unwrap()
}

fn spec() -> RandomSpec {
    RandomSpec {
        layers: 3,
        ..RandomSpec::tiny(64)
    }
}

fn params(max_new: usize) -> GenParams {
    GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    }
}

#[test]
fn the_window_changes_the_logits_past_it() {
    on_backend!(the_window_changes_the_logits_past_it_on)
}

fn the_window_changes_the_logits_past_it_on<B: Backend>(b: B) {
    let (cfg, src) = random_gemma_target(&spec(), WINDOW, 7);
    let mut full = cfg.clone();
    full.gemma.as_mut().unwrap().sliding_window = 1 << 20;
    let ids: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 64).collect();
    let logits = |c: &TransformerConfig| {
        let t = model(&b, c, &src);
        let out = t
            .forward(&ids, &mut t.new_cache(), &[], LogitsWanted::All)
            .unwrap();
        b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap()
    };
    let (w, f) = (logits(&cfg), logits(&full));
    let row = |v: &[f32], p: usize| v[p * 64..(p + 1) * 64].to_vec();
    for p in 0..WINDOW {
        assert_eq!(row(&w, p), row(&f, p), "position {p} is inside the window");
    }
    for p in WINDOW..20 {
        assert_ne!(
            row(&w, p),
            row(&f, p),
            "position {p} must lose its oldest keys"
        );
    }
}

#[test]
fn draft_model_greedy_equals_baseline_across_the_window() {
    on_backend!(draft_model_greedy_equals_baseline_across_the_window_on)
}

fn draft_model_greedy_equals_baseline_across_the_window_on<B: Backend>(b: B) {
    let s = spec();
    let (mut combos, mut wrapped_blocks, mut dropped) = (0, 0, 0);
    for seed in 0..3u64 {
        let (cfg, tsrc) = random_gemma_target(&s, WINDOW, seed);
        let target = model(&b, &cfg, &tsrc);
        let (_, other) = random_gemma_target(&s, WINDOW, 1000 + seed);
        let drafters = [tsrc.clone(), perturbed(&tsrc, 0.3, seed), other];
        for (k, dsrc) in drafters.iter().enumerate() {
            let mut d = DraftModel::new(model(&b, &cfg, dsrc), 64, 8).unwrap();
            let mut g = Gen::new(seed * 10 + k as u64, "gemma-cases");
            for _ in 0..6 {
                let mut u = |n: u32| ((g.normal().abs() * 1e4) as u32) % n;
                let prompt: Vec<u32> = (0..1 + u(30)).map(|_| u(64)).collect();
                let max_new = 8 + u(41) as usize;
                let cap = 1 + u(8) as usize;
                let base: GenResult = baseline::generate(
                    &target,
                    &mut target.new_cache(),
                    &prompt,
                    &params(max_new),
                    &mut Vec::new(),
                )
                .unwrap();
                d.truncate(0);
                let mut cache = target.new_cache();
                let sp = decode::generate(
                    &target,
                    &mut cache,
                    &mut d,
                    &prompt,
                    &params(max_new),
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
                    "seed {seed} drafter {k} cap {cap} prompt {prompt:?}"
                );
                // a verified block of accepted + 1 tokens past the window's first fill wraps it
                let mut pos = prompt.len();
                for &a in &sp.stats.accept_lengths {
                    if pos + a > WINDOW && a > 1 {
                        wrapped_blocks += 1;
                    }
                    pos += a;
                }
                if cache.floor() > 0 {
                    dropped += 1;
                }
                combos += 1;
            }
        }
    }
    assert_eq!(combos, 54);
    assert!(
        wrapped_blocks > 50,
        "{wrapped_blocks} accepted blocks past the window"
    );
    assert!(dropped > 10, "only {dropped} runs dropped old positions");
}

/// Rows agree bit for bit on candle's CPU kernels (batch-invariant, so a verify block equals
/// one-token steps); within 1e-4 on other backends (MLX: ~1e-6 apart).
fn same(got: &[f32], want: &[f32], what: &str) {
    if dspark_tests::selected_backend() == dspark_tests::Which::Candle {
        assert_eq!(got, want, "{what}");
    } else {
        let d = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d <= 1e-4, "{what}: max diff {d}");
    }
}

/// Last-position logits of `ids` fed one token at a time into `cache` from its length on.
fn feed<B: Backend>(t: &Transformer<B>, cache: &mut KvCache<B>, ids: &[u32]) -> Vec<Vec<f32>> {
    let b = t.backend();
    ids[cache.len()..]
        .iter()
        .map(|&id| {
            let out = t.forward(&[id], cache, &[], LogitsWanted::Last).unwrap();
            b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap()
        })
        .collect()
}

#[test]
fn rollback_and_prefix_copies_are_exact_down_to_the_floor() {
    on_backend!(rollback_and_prefix_copies_are_exact_down_to_the_floor_on)
}

fn rollback_and_prefix_copies_are_exact_down_to_the_floor_on<B: Backend>(b: B) {
    let (cfg, src) = random_gemma_target(&spec(), WINDOW, 3);
    let t = model(&b, &cfg, &src);
    let ids: Vec<u32> = (0..200).map(|i| (i * 13 + i * i % 7) % 64).collect();
    let mut fresh = t.new_cache();
    let want = feed(&t, &mut fresh, &ids);
    assert!(fresh.floor() > 0, "200 positions must drop some");
    let held = fresh.nbytes(&b, 4);
    let mut full = KvCache::new(cfg.num_layers, cfg.max_position_embeddings);
    feed(&t, &mut full, &ids);
    assert!(
        held < full.nbytes(&b, 4) / 2,
        "sliding layers hold {held} bytes"
    );

    // verify-sized blocks, each partly rejected (rolled back) and recomputed
    let mut cache = t.new_cache();
    let mut pos = 0;
    let mut g = Gen::new(5, "rollback");
    while pos < ids.len() {
        let n = (1 + (g.normal().abs() * 6.0) as usize).min(ids.len() - pos);
        let block: Vec<u32> = ids[pos..pos + n].to_vec();
        let out = t
            .forward(&block, &mut cache, &[], LogitsWanted::All)
            .unwrap();
        let rows = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        for (j, row) in rows.chunks(64).enumerate() {
            same(row, &want[pos + j], &format!("block row at {}", pos + j));
        }
        let keep = (pos + n / 2).max(pos + 1);
        assert!(
            keep >= cache.floor(),
            "a verify rollback stays above the floor"
        );
        cache.truncate(keep);
        assert_eq!(cache.len(), keep);
        pos = keep;
    }

    // deep prefix copies at and above the floor continue exactly; below it they are empty
    let floor = fresh.floor();
    for len in [floor, floor + 1, floor + ROLLBACK_SLACK / 2] {
        let mut copy = fresh.deep_prefix(&b, len).unwrap();
        assert_eq!(copy.len(), len);
        for (j, row) in feed(&t, &mut copy, &ids).iter().enumerate() {
            same(
                row,
                &want[len + j],
                &format!("copy at {len}, row {}", len + j),
            );
        }
    }
    assert_eq!(fresh.deep_prefix(&b, floor - 1).unwrap().len(), 0);
    // truncating below the floor starts over, and a re-prefill is exact again
    let mut c = fresh.deep_prefix(&b, ids.len()).unwrap();
    c.truncate(floor - 1);
    assert_eq!(c.len(), 0);
    for (j, row) in feed(&t, &mut c, &ids).iter().enumerate() {
        same(row, &want[j], &format!("re-prefill row {j}"));
    }
}
