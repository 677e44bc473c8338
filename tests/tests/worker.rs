//! The engine worker on the real SmolLM2 GGUF: event order, streamed text equal to a direct
//! baseline generation, cancellation within one round, queue-full admission, context overflow.

use std::sync::mpsc;
use std::time::Duration;

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::generate::GenParams;
use dspark_engine::load::load_model;
use dspark_engine::pipeline::Pipeline;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Mode, SpecParams};
use dspark_engine::worker::{EngineHandle, Event, JobParams, Prompt};
use dspark_engine::EngineError;
use dspark_tests::artefact;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

fn handle(queue: usize) -> EngineHandle {
    EngineHandle::spawn::<_, EngineError, _>(
        || {
            let b = CandleBackend::cpu();
            let lm = load_model(
                &b,
                &artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
                None,
            )?;
            Pipeline::new(
                lm,
                Mode::Baseline,
                None,
                SpecParams {
                    max_draft: 1,
                    confidence_threshold: 0.0,
                    lookup: false,
                },
            )
        },
        queue,
    )
    .unwrap()
}

fn chat(text: &str) -> Prompt {
    Prompt::Chat {
        messages: json!([{"role": "user", "content": text}]),
        options: ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        },
    }
}

fn params(n: usize) -> JobParams {
    JobParams {
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        stop: vec![],
    }
}

#[test]
fn worker_streams_same_text_as_direct_generation_then_done() {
    let h = handle(4);
    let prep = h.prepare(&chat("Name three colors."), 12).unwrap();
    let (tx, rx) = mpsc::channel();
    h.submit(
        prep.ids.clone(),
        params(12),
        Box::new(move |e| tx.send(e).is_ok()),
    )
    .unwrap();
    let mut text = String::new();
    let mut tokens = 0;
    assert!(matches!(
        rx.recv_timeout(WAIT).unwrap(),
        Event::Started { .. }
    ));
    let summary = loop {
        match rx.recv_timeout(WAIT).unwrap() {
            Event::Delta {
                text: t, tokens: n, ..
            } => {
                text.push_str(&t);
                tokens += n;
            }
            Event::Done(s) => break s,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(tokens, summary.completion_tokens);
    assert_eq!(summary.stats.prompt_tokens, prep.ids.len());
    // direct baseline run on the same ids
    let b = CandleBackend::cpu();
    let lm = load_model(
        &b,
        &artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        None,
    )
    .unwrap();
    let mut pipe = Pipeline::new(
        lm,
        Mode::Baseline,
        None,
        SpecParams {
            max_draft: 1,
            confidence_threshold: 0.0,
            lookup: false,
        },
    )
    .unwrap();
    let gp = GenParams {
        max_new_tokens: 12,
        sampling: SamplingParams::greedy(),
        eos: pipe.target.eos_ids(),
    };
    let mut ids = Vec::new();
    pipe.generate(&prep.ids, &gp, &mut ids).unwrap();
    assert_eq!(text, pipe.target.tokenizer.decode(&ids, true).unwrap());
    assert_eq!(h.counters().completed, 1);
}

#[test]
fn false_from_callback_cancels_within_one_round_and_worker_keeps_serving() {
    let h = handle(4);
    let prep = h
        .prepare(&chat("Write a long story about a dragon."), 200)
        .unwrap();
    let mut deltas = 0;
    h.submit(
        prep.ids.clone(),
        params(200),
        Box::new(move |e| {
            if matches!(e, Event::Delta { .. }) {
                deltas += 1;
            }
            deltas < 2 // gone after the second round
        }),
    )
    .unwrap();
    // the worker is FIFO: once this second job is done, the first has ended
    let (tx, rx) = mpsc::channel();
    h.submit(prep.ids, params(3), Box::new(move |e| tx.send(e).is_ok()))
        .unwrap();
    let done = loop {
        if let Event::Done(s) = rx.recv_timeout(WAIT).unwrap() {
            break s;
        }
    };
    assert_eq!(done.completion_tokens, 3);
    let c = h.counters();
    assert_eq!((c.cancelled, c.completed), (1, 1));
    assert_eq!(
        c.generated_tokens,
        2 + 3,
        "the cancelled job ran exactly two rounds"
    );
}

#[test]
fn full_queue_rejects_with_queue_full_while_worker_busy() {
    let h = handle(1);
    let prep = h.prepare(&Prompt::Text("Hello".into()), 4).unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let mut release_rx = Some(release_rx);
    // job A holds the worker inside its Started callback until released
    h.submit(
        prep.ids.clone(),
        params(4),
        Box::new(move |e| {
            if let (Event::Started { .. }, Some(r)) = (&e, release_rx.take()) {
                let _ = started_tx.send(());
                let _ = r.recv_timeout(WAIT);
            }
            true
        }),
    )
    .unwrap();
    started_rx.recv_timeout(WAIT).unwrap();
    h.submit(prep.ids.clone(), params(4), Box::new(|_| true))
        .unwrap(); // fills the queue
    let err = h
        .submit(prep.ids.clone(), params(4), Box::new(|_| true))
        .unwrap_err();
    assert!(matches!(err, EngineError::QueueFull), "{err:?}");
    let c = h.counters();
    assert_eq!((c.rejected, c.queued, c.running), (1, 1, 1));
    release_tx.send(()).unwrap();
}

#[test]
fn prepare_rejects_context_overflow() {
    let h = handle(1);
    let err = h.prepare(&chat("hi"), 10_000_000).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::ContextOverflow {
                max_new: 10_000_000,
                ..
            }
        ),
        "{err:?}"
    );
}
