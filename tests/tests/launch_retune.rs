//! The launcher's engine takes live draft settings: `EngineHandle::retune` (what a settings
//! reload or the app's Settings pane calls) changes drafts per round from the next request.
//! The tiny target drafts for itself in draft-model mode, so every greedy draft is accepted
//! and each round commits exactly max_draft + 1 tokens (the last round may be cut short).

use std::sync::mpsc;

use dspark_engine::launch::{spawn, BackendKind, LaunchSpec};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::Mode;
use dspark_engine::worker::{EngineHandle, Event, JobParams, Prompt, Tuning};
use dspark_tests::fixture;

/// Accept lengths of one greedy generation of `n` tokens.
fn rounds(h: &EngineHandle, n: usize) -> Vec<usize> {
    let ids = h
        .prepare(&Prompt::Text("the quick brown fox".into()), n)
        .unwrap()
        .ids;
    let (tx, rx) = mpsc::channel();
    let params = JobParams {
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        stop: vec![],
    };
    h.submit(
        ids,
        params,
        Box::new(move |e| {
            if let Event::Done(s) = e {
                let _ = tx.send(s.stats.accept_lengths);
            }
            true
        }),
    )
    .unwrap();
    rx.recv().unwrap()
}

#[test]
fn retune_changes_drafts_per_round_from_the_next_request() {
    let target = fixture("spec/models/target");
    let mut spec = LaunchSpec::new(&target, Mode::Draft, Some(target.clone()));
    spec.backend = BackendKind::Candle;
    spec.max_draft = Some(4);
    let h = spawn(&spec).unwrap();
    let full = |v: &[usize]| v[..v.len() - 1].to_vec();

    let r = rounds(&h, 26);
    assert!(full(&r).iter().all(|&a| a == 5), "{r:?}");

    h.retune(Tuning {
        max_draft: Some(1),
        ..spec.tuning()
    });
    let r = rounds(&h, 26);
    assert!(full(&r).iter().all(|&a| a == 2), "{r:?}");

    // back up, capped by the draft model's block (built for max_draft 4 at launch)
    h.retune(Tuning {
        max_draft: Some(9),
        ..spec.tuning()
    });
    let r = rounds(&h, 26);
    assert!(full(&r).iter().all(|&a| a == 5), "{r:?}");
}
