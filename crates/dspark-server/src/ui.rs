//! The web UI hook: the files of `ui/` embedded in the binary (so `dspark serve` and the
//! desktop app serve identical bytes) plus `GET /api/live`, the live speculative-decoding
//! gauges (current tok/s, accept length, and a histogram of tokens committed per round).
//!
//! [`attach`] wraps the engine in a recorder that sees every round's `Delta` event on its way
//! to the HTTP layer; it changes nothing about what the routes stream.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use dspark_engine::queue::CountersSnapshot;
use dspark_engine::worker::{Event, EventFn, JobParams, ModelInfo, Prepared, Prompt};
use dspark_engine::EngineError;
use serde::Serialize;

use crate::{AppState, Engine};

macro_rules! ui_file {
    ($name:literal, $mime:literal) => {
        (
            $name,
            $mime,
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../ui/", $name)) as &[u8],
        )
    };
}

/// Every file of `ui/`: (path, content type, bytes).
pub const FILES: &[(&str, &str, &[u8])] = &[
    ui_file!("index.html", "text/html; charset=utf-8"),
    ui_file!("style.css", "text/css; charset=utf-8"),
    ui_file!("api.js", "text/javascript; charset=utf-8"),
    ui_file!("app.js", "text/javascript; charset=utf-8"),
    ui_file!("chat.js", "text/javascript; charset=utf-8"),
    ui_file!("panels.js", "text/javascript; charset=utf-8"),
    ui_file!("icon.png", "image/png"),
];

/// Histogram buckets: 1..=HIST_MAX tokens per round; the last bucket holds larger rounds.
pub const HIST_MAX: usize = 16;

#[derive(Default)]
struct Live {
    running: u32,
    started: Option<Instant>,
    cur_tokens: u64,
    cur_rounds: u64,
    last_tps: f64,
    last_accept: f64,
    rounds: u64,
    tokens: u64,
    hist: [u64; HIST_MAX],
    generations: u64,
}

/// Live round statistics, shared by the recorder, `/api/live` and the desktop app's tray.
#[derive(Default)]
pub struct LiveStats {
    live: Mutex<Live>,
}

/// What `/api/live` returns.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct LiveSnapshot {
    /// A generation is running now.
    pub generating: bool,
    /// Tokens per second of the running generation (else of the last one).
    pub tokens_per_sec: f64,
    /// Tokens committed per round of the running generation (else of the last one).
    pub accept_len: f64,
    /// Rounds and tokens since start, all generations.
    pub rounds: u64,
    pub tokens: u64,
    /// `histogram[i]`: rounds that committed `i + 1` tokens (the last bucket: that many or more).
    pub histogram: Vec<u64>,
    pub generations: u64,
}

impl LiveStats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn started(&self) {
        let mut l = self.lock();
        l.running += 1;
        l.started = Some(Instant::now());
        l.cur_tokens = 0;
        l.cur_rounds = 0;
    }

    fn round(&self, tokens: usize) {
        if tokens == 0 {
            return;
        }
        let mut l = self.lock();
        l.cur_tokens += tokens as u64;
        l.cur_rounds += 1;
        l.rounds += 1;
        l.tokens += tokens as u64;
        l.hist[tokens.min(HIST_MAX) - 1] += 1;
        let secs = l.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if secs > 0.0 {
            l.last_tps = l.cur_tokens as f64 / secs;
        }
        l.last_accept = l.cur_tokens as f64 / l.cur_rounds as f64;
    }

    fn finished(&self, summary: Option<(f64, f64)>) {
        let mut l = self.lock();
        l.running = l.running.saturating_sub(1);
        l.generations += 1;
        if let Some((tps, accept)) = summary {
            l.last_tps = tps;
            l.last_accept = accept;
        }
    }

    pub fn snapshot(&self) -> LiveSnapshot {
        let l = self.lock();
        LiveSnapshot {
            generating: l.running > 0,
            tokens_per_sec: (l.last_tps * 10.0).round() / 10.0,
            accept_len: (l.last_accept * 100.0).round() / 100.0,
            rounds: l.rounds,
            tokens: l.tokens,
            histogram: l.hist.to_vec(),
            generations: l.generations,
        }
    }
}

/// An engine that reports each round to [`LiveStats`] and passes every event on unchanged.
struct Recording {
    inner: Arc<dyn Engine>,
    stats: Arc<LiveStats>,
}

impl Engine for Recording {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn tokenizer(&self) -> Option<Arc<dspark_engine::tokenizer::Tokenizer>> {
        self.inner.tokenizer()
    }
    fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError> {
        self.inner.prepare(prompt, max_new)
    }
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        mut on_event: EventFn,
    ) -> Result<(), EngineError> {
        let stats = self.stats.clone();
        let mut open = false;
        let wrapped: EventFn = Box::new(move |ev: Event| {
            match &ev {
                Event::Started { .. } => {
                    open = true;
                    stats.started();
                }
                Event::Delta { tokens, .. } => stats.round(*tokens),
                Event::Done(s) if open => {
                    open = false;
                    stats.finished(Some((s.tokens_per_sec, s.accept_len)));
                }
                Event::Error(_) if open => {
                    open = false;
                    stats.finished(None);
                }
                _ => {}
            }
            let keep = on_event(ev);
            if !keep && open {
                // the client went away: the engine cancels and sends nothing more
                open = false;
                stats.finished(None);
            }
            keep
        });
        self.inner.submit(prompt, params, wrapped)
    }
    fn counters(&self) -> CountersSnapshot {
        self.inner.counters()
    }
}

/// Wraps `state`'s engine in the round recorder and returns the UI router (static files and
/// `/api/live`) to pass to [`crate::app_with_ui`].
pub fn attach(mut state: AppState, stats: Arc<LiveStats>) -> (AppState, Router) {
    state.engine = Arc::new(Recording {
        inner: state.engine.clone(),
        stats: stats.clone(),
    });
    (state, router(stats))
}

/// The static files of `ui/` and `GET /api/live`.
pub fn router(stats: Arc<LiveStats>) -> Router {
    Router::new()
        .route("/api/live", get(live))
        .route("/", get(file))
        .route("/{name}", get(file))
        .with_state(stats)
}

async fn live(State(stats): State<Arc<LiveStats>>) -> Json<LiveSnapshot> {
    Json(stats.snapshot())
}

async fn file(uri: Uri) -> Response {
    let name = match uri.path().trim_start_matches('/') {
        "" => "index.html",
        n => n,
    };
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, mime, bytes)) => (
            [
                (header::CONTENT_TYPE, *mime),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *bytes,
        )
            .into_response(),
        None => crate::routes::health::not_found(uri).await.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_rounds_and_clamps_large_ones() {
        let s = LiveStats::default();
        s.started();
        for t in [1, 3, 3, 40, 0] {
            s.round(t);
        }
        let snap = s.snapshot();
        assert!(snap.generating);
        assert_eq!(snap.rounds, 4);
        assert_eq!(snap.tokens, 47);
        assert_eq!(snap.histogram[0], 1);
        assert_eq!(snap.histogram[2], 2);
        assert_eq!(snap.histogram[HIST_MAX - 1], 1);
        s.finished(Some((12.5, 2.0)));
        let snap = s.snapshot();
        assert!(!snap.generating);
        assert_eq!((snap.tokens_per_sec, snap.accept_len), (12.5, 2.0));
    }

    #[test]
    fn every_ui_file_is_embedded_and_nonempty() {
        for (name, _, bytes) in FILES {
            assert!(!bytes.is_empty(), "{name}");
        }
    }
}
