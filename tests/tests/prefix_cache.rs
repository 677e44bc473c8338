//! Prefix cache: output with the cache equals output without it (greedy, every mode,
//! multi-turn conversations with divergent branches); LCP and min-reuse edges; LRU eviction;
//! spill to disk and reload, also across a restart; corrupt spill files ignored; a cancelled
//! request keeps the state it computed.

use std::path::PathBuf;

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::generate::{Flow, GenParams, GenResult, TokenSink};
use dspark_engine::load::load_model;
use dspark_engine::pipeline::{load_drafter, Pipeline};
use dspark_engine::prefix_cache::PrefixCacheConfig;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_tests::fixture;

const MODES: [Mode; 4] = [Mode::Baseline, Mode::Draft, Mode::Dspark, Mode::Dflash];

fn pipeline(mode: Mode, cache: Option<PrefixCacheConfig>) -> Pipeline<CandleBackend> {
    let b = CandleBackend::cpu();
    let lm = load_model(&b, &fixture("spec/models/target"), None).unwrap();
    let dir = match mode {
        Mode::Baseline => None,
        Mode::Draft => Some("target"),
        Mode::Dspark => Some("dspark"),
        Mode::Dflash => Some("dflash-accept"),
    };
    let drafter = dir.map(|d| {
        load_drafter(
            &b,
            &b,
            mode,
            &fixture(&format!("spec/models/{d}")),
            &lm.model,
            4,
            dspark_engine::drafters::draft_vocab::DraftVocabSize::Drafter,
        )
        .unwrap()
    });
    let mut p = Pipeline::new(
        lm,
        mode,
        drafter,
        SpecParams {
            max_draft: 6,
            confidence_threshold: 0.0,
            lookup: false,
        },
    )
    .unwrap();
    if let Some(c) = cache {
        p.enable_prefix_cache(c, dir.unwrap_or("none"));
    }
    p
}

fn cfg(min_reuse: usize) -> PrefixCacheConfig {
    PrefixCacheConfig {
        max_slots: 4,
        max_ram_bytes: 0,
        dir: None,
        min_reuse,
    }
}

fn params(n: usize) -> GenParams {
    GenParams {
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        eos: vec![],
    }
}

fn gen(p: &mut Pipeline<CandleBackend>, prompt: &[u32], n: usize) -> GenResult {
    p.generate(prompt, &params(n), &mut Vec::new()).unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dspark-pc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Turn 1, turn 2 extending it, a branch from turn 1 with a different follow-up, turn 2 again.
fn conversation() -> Vec<Vec<u32>> {
    let t1: Vec<u32> = vec![
        129, 367, 211, 426, 510, 144, 240, 109, 353, 326, 431, 411, 499,
    ];
    let mut t2 = t1.clone();
    t2.extend([12, 300, 301, 302, 77, 78]);
    let mut branch = t1[..9].to_vec();
    branch.extend([5, 6, 7, 8, 9, 10]);
    vec![t1, t2.clone(), branch, t2]
}

#[test]
fn cached_output_equals_uncached_in_every_mode() {
    for mode in MODES {
        let mut plain = pipeline(mode, None);
        let mut cached = pipeline(mode, Some(cfg(4)));
        let mut history: Vec<u32> = Vec::new();
        for (turn, user) in conversation().into_iter().enumerate() {
            // real multi-turn: each prompt is the previous prompt + its answer + new text
            let prompt: Vec<u32> = if turn == 1 {
                [history.clone(), user[13..].to_vec()].concat()
            } else {
                user
            };
            let a = gen(&mut plain, &prompt, 12);
            let b = gen(&mut cached, &prompt, 12);
            assert_eq!(a.tokens, b.tokens, "{mode:?} turn {turn}");
            if turn == 1 {
                assert!(
                    b.stats.cached_tokens >= history.len() - 1,
                    "{mode:?}: turn 2 reused {}",
                    b.stats.cached_tokens
                );
            }
            history = [prompt, a.tokens].concat();
        }
        let info = cached.prefix_cache_info();
        assert!(info.hits >= 2, "{mode:?}: {info:?}");
    }
}

#[test]
fn identical_prompt_reuses_all_but_one_and_short_matches_are_not_reused() {
    let mut p = pipeline(Mode::Dspark, Some(cfg(8)));
    let prompt = conversation()[0].clone();
    let first = gen(&mut p, &prompt, 6);
    assert_eq!(first.stats.cached_tokens, 0);
    let again = gen(&mut p, &prompt, 6);
    assert_eq!(again.stats.cached_tokens, prompt.len() - 1);
    assert_eq!(again.tokens, first.tokens);
    // shares only 5 tokens (< min_reuse 8): prefilled from scratch
    let mut short = prompt[..5].to_vec();
    short.extend([1, 2, 3, 4, 5, 6]);
    assert_eq!(gen(&mut p, &short, 4).stats.cached_tokens, 0);
}

#[test]
fn lru_slot_is_evicted_first() {
    let mut p = pipeline(
        Mode::Baseline,
        Some(PrefixCacheConfig {
            max_slots: 2,
            ..cfg(4)
        }),
    );
    let seqs: Vec<Vec<u32>> = (0..3u32)
        .map(|k| (0..10).map(|i| 20 + k * 50 + i).collect())
        .collect();
    gen(&mut p, &seqs[0], 2);
    gen(&mut p, &seqs[1], 2);
    gen(&mut p, &seqs[0], 2); // touch 0: slot 1 is now least recently used
    gen(&mut p, &seqs[2], 2); // evicts slot 1
    assert_eq!(p.prefix_cache_info().slots_ram, 2);
    assert!(
        gen(&mut p, &seqs[0], 2).stats.cached_tokens > 0,
        "slot 0 kept"
    );
    assert_eq!(
        gen(&mut p, &seqs[1], 2).stats.cached_tokens,
        0,
        "slot 1 evicted"
    );
}

#[test]
fn spilled_slots_reload_across_restart_and_corrupt_files_are_ignored() {
    let dir = tmpdir("spill");
    let spill = PrefixCacheConfig {
        max_slots: 8,
        max_ram_bytes: 1,
        dir: Some(dir.clone()),
        min_reuse: 4,
    };
    let prompt = conversation()[0].clone();
    let reference = gen(&mut pipeline(Mode::Dflash, None), &prompt, 10);
    {
        let mut p = pipeline(Mode::Dflash, Some(spill.clone()));
        gen(&mut p, &prompt, 10);
        let info = p.prefix_cache_info();
        assert!(
            info.spills >= 1 && info.slots_disk == 1 && info.bytes_disk > 0,
            "{info:?}"
        );
    }
    // a new process (pipeline) with the same directory finds the slot and reloads it
    let mut p = pipeline(Mode::Dflash, Some(spill.clone()));
    assert_eq!(p.prefix_cache_info().slots_disk, 1);
    let r = gen(&mut p, &prompt, 10);
    assert_eq!(r.stats.cached_tokens, prompt.len() - 1);
    assert_eq!(r.tokens, reference.tokens);
    assert!(p.prefix_cache_info().reloads >= 1);
    drop(p);
    // corrupt the spilled file: it must be detected, deleted and never loaded
    let file = walk(&dir)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let mut p = pipeline(Mode::Dflash, Some(spill.clone()));
    let r = gen(&mut p, &prompt, 10);
    assert_eq!(r.stats.cached_tokens, 0);
    assert_eq!(r.tokens, reference.tokens);
    assert_eq!(p.prefix_cache_info().corrupt_files, 1);
    // the corrupt file was deleted; what is there now is this run's fresh spill
    assert_ne!(std::fs::read(&file).unwrap_or_default(), bytes);
    // a truncated file too
    drop(p);
    let file = walk(&dir)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let mut p = pipeline(Mode::Dflash, Some(spill));
    assert_eq!(gen(&mut p, &prompt, 10).tokens, reference.tokens);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash in the middle of a spill leaves a partial `slot-*.tmp` (spills are written aside and
/// renamed when flushed): the next start removes it and still reloads the whole files.
#[test]
fn interrupted_spill_leftovers_are_removed_at_start() {
    let dir = tmpdir("interrupted");
    let spill = PrefixCacheConfig {
        max_slots: 8,
        max_ram_bytes: 1,
        dir: Some(dir.clone()),
        min_reuse: 4,
    };
    let prompt = conversation()[0].clone();
    let reference = gen(&mut pipeline(Mode::Draft, None), &prompt, 10);
    gen(&mut pipeline(Mode::Draft, Some(spill.clone())), &prompt, 10);
    let whole = walk(&dir)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let bytes = std::fs::read(&whole).unwrap();
    let partial = whole.with_file_name("slot-0123456789abcdef.tmp");
    std::fs::write(&partial, &bytes[..bytes.len() / 3]).unwrap();
    let mut p = pipeline(Mode::Draft, Some(spill));
    assert!(!partial.exists(), "the interrupted spill was not removed");
    assert_eq!(p.prefix_cache_info().stale_files_removed, 1);
    let r = gen(&mut p, &prompt, 10);
    assert_eq!(r.stats.cached_tokens, prompt.len() - 1);
    assert_eq!(r.tokens, reference.tokens);
    assert_eq!(p.prefix_cache_info().corrupt_files, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spill that cannot be written (here the spill directory is a file, so nothing can be
/// created under it; tests/e2e covers a full disk) drops the slot, is counted, and the
/// requests still succeed with the same output.
#[test]
fn failed_spills_are_counted_and_requests_still_succeed() {
    let not_a_dir = tmpdir("not-a-dir");
    std::fs::write(&not_a_dir, b"a file where the spill directory should be").unwrap();
    let spill = PrefixCacheConfig {
        max_slots: 8,
        max_ram_bytes: 1,
        dir: Some(not_a_dir.clone()),
        min_reuse: 4,
    };
    let conv = conversation();
    let mut plain = pipeline(Mode::Draft, None);
    let mut p = pipeline(Mode::Draft, Some(spill));
    for prompt in &conv {
        assert_eq!(
            gen(&mut p, prompt, 8).tokens,
            gen(&mut plain, prompt, 8).tokens
        );
    }
    let info = p.prefix_cache_info();
    assert!(info.spill_errors >= 1, "{info:?}");
    assert_eq!((info.spills, info.slots_disk), (0, 0), "{info:?}");
    let _ = std::fs::remove_file(&not_a_dir);
}

fn walk(d: &std::path::Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p))
        } else {
            out.push(p)
        }
    }
    out
}

/// Cancels after the first pushed block, like a client that went away.
struct CancelAfterFirst(Vec<u32>);

impl TokenSink for CancelAfterFirst {
    fn push(&mut self, ids: &[u32]) -> Flow {
        self.0.extend_from_slice(ids);
        Flow::Cancel
    }
}

#[test]
fn cancelled_request_keeps_its_computed_state() {
    for mode in [Mode::Baseline, Mode::Dspark] {
        let mut p = pipeline(mode, Some(cfg(4)));
        let prompt = conversation()[0].clone();
        let mut sink = CancelAfterFirst(vec![]);
        let r = p.generate(&prompt, &params(20), &mut sink).unwrap();
        assert_eq!(r.finish_reason.as_str(), "cancelled");
        assert!(
            p.prefix_cache_info().slots_ram == 1,
            "{mode:?}: slot kept after cancel"
        );
        let next = [prompt.clone(), r.tokens.clone(), vec![3, 4]].concat();
        let again = gen(&mut p, &next, 4);
        assert!(
            again.stats.cached_tokens >= prompt.len(),
            "{mode:?}: reused {}",
            again.stats.cached_tokens
        );
        assert_eq!(
            again.tokens,
            gen(&mut pipeline(mode, None), &next, 4).tokens
        );
    }
}
