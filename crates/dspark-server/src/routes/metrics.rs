//! `GET /metrics`: JSON by default; Prometheus text exposition with `?format=prometheus` or an
//! `Accept` header naming `text/plain` or `application/openmetrics-text`. Aggregates are
//! updated by the generation routes; engine counters come from the engine itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use dspark_engine::worker::Summary;
use serde_json::json;

use crate::AppState;

#[derive(Default)]
struct Agg {
    requests: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    accept_weighted: f64,
    gen_secs: f64,
    target_forwards: u64,
    http: BTreeMap<u16, u64>,
    prefix_cache: dspark_engine::prefix_cache::PrefixCacheInfo,
}

/// Server-side aggregates.
pub struct Metrics {
    started: Instant,
    agg: Mutex<Agg>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            agg: Mutex::default(),
        }
    }
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Agg> {
        self.agg.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A finished generation.
    pub fn record(&self, s: &Summary) {
        let mut a = self.lock();
        a.requests += 1;
        a.prompt_tokens += s.stats.prompt_tokens as u64;
        a.completion_tokens += s.completion_tokens as u64;
        a.cached_tokens += s.stats.cached_tokens as u64;
        a.accept_weighted += s.accept_len * s.completion_tokens as f64;
        a.gen_secs += s.stats.prefill_secs + s.stats.decode_secs;
        a.target_forwards += s.stats.target_forwards as u64;
        a.prefix_cache = s.prefix_cache.clone();
    }

    /// An HTTP response status.
    pub fn record_status(&self, status: u16) {
        *self.lock().http.entry(status).or_default() += 1;
    }
}

fn wants_prometheus(uri: &Uri, headers: &HeaderMap) -> bool {
    let q = uri.query().unwrap_or("");
    if q.split('&')
        .any(|kv| kv == "format=prometheus" || kv == "format=text")
    {
        return true;
    }
    if q.split('&').any(|kv| kv == "format=json") {
        return false;
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.contains("text/plain") || accept.contains("application/openmetrics-text")
}

pub async fn handler(State(st): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let info = st.engine.info();
    let e = st.engine.counters();
    let a = st.metrics.lock();
    let tokens = a.completion_tokens.max(1) as f64;
    let mean_accept = if a.completion_tokens > 0 {
        a.accept_weighted / tokens
    } else {
        0.0
    };
    let mean_tps = if a.gen_secs > 0.0 {
        a.completion_tokens as f64 / a.gen_secs
    } else {
        0.0
    };
    let uptime = st.metrics.started.elapsed().as_secs_f64();
    if !wants_prometheus(&uri, &headers) {
        let http: BTreeMap<String, u64> = a.http.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let body = json!({
            "model": st.cfg.model_id, "mode": info.mode, "drafter": info.drafter,
            "uptime_secs": (uptime * 10.0).round() / 10.0,
            "requests": a.requests, "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens, "cached_tokens": a.cached_tokens,
            "target_forwards": a.target_forwards,
            "mean_accept_len": (mean_accept * 1000.0).round() / 1000.0,
            "mean_tokens_per_sec": (mean_tps * 10.0).round() / 10.0,
            "engine": e, "http_responses": http, "prefix_cache": a.prefix_cache,
        });
        return Json(body).into_response();
    }
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, lines: &[(String, String)]| {
        let _ = writeln!(
            out,
            "# HELP dspark_{name} {help}\n# TYPE dspark_{name} {kind}"
        );
        for (labels, v) in lines {
            let _ = writeln!(out, "dspark_{name}{labels} {v}");
        }
    };
    let one = |v: String| vec![(String::new(), v)];
    metric(
        "requests_total",
        "counter",
        "Finished generations.",
        &one(a.requests.to_string()),
    );
    metric(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens of finished generations.",
        &one(a.prompt_tokens.to_string()),
    );
    metric(
        "completion_tokens_total",
        "counter",
        "Generated tokens of finished generations.",
        &one(a.completion_tokens.to_string()),
    );
    metric(
        "cached_tokens_total",
        "counter",
        "Prompt tokens served from a cache.",
        &one(a.cached_tokens.to_string()),
    );
    metric(
        "target_forwards_total",
        "counter",
        "Target model forward passes.",
        &one(a.target_forwards.to_string()),
    );
    let pc = &a.prefix_cache;
    for (name, help, v) in [
        (
            "prefix_cache_hits_total",
            "Requests that reused a cached prefix.",
            pc.hits.to_string(),
        ),
        (
            "prefix_cache_reused_tokens_total",
            "Prompt tokens reused from the prefix cache.",
            pc.reused_tokens.to_string(),
        ),
        (
            "prefix_cache_slots",
            "Prefix-cache slots held (RAM + disk).",
            (pc.slots_ram + pc.slots_disk).to_string(),
        ),
        (
            "prefix_cache_ram_bytes",
            "Prefix-cache bytes in RAM.",
            pc.bytes_ram.to_string(),
        ),
        (
            "prefix_cache_disk_bytes",
            "Prefix-cache bytes spilled to disk.",
            pc.bytes_disk.to_string(),
        ),
        (
            "prefix_cache_spill_errors_total",
            "Prefix-cache spills that failed (disk full, unwritable directory); the slot was dropped.",
            pc.spill_errors.to_string(),
        ),
        (
            "prefix_cache_corrupt_files_total",
            "Spilled prefix-cache files found corrupt or truncated and ignored.",
            pc.corrupt_files.to_string(),
        ),
    ] {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        metric(name, kind, help, &one(v));
    }
    metric(
        "mean_accept_len",
        "gauge",
        "Token-weighted mean tokens per round.",
        &one(format!("{mean_accept:.3}")),
    );
    metric(
        "mean_tokens_per_sec",
        "gauge",
        "Generated tokens per generation second.",
        &one(format!("{mean_tps:.1}")),
    );
    metric(
        "queue_depth",
        "gauge",
        "Jobs waiting for the engine.",
        &one(e.queued.to_string()),
    );
    metric(
        "running",
        "gauge",
        "Jobs running on the engine.",
        &one(e.running.to_string()),
    );
    let jobs: Vec<(String, String)> = [
        ("completed", e.completed),
        ("cancelled", e.cancelled),
        ("failed", e.failed),
        ("rejected", e.rejected),
    ]
    .iter()
    .map(|(k, v)| (format!("{{outcome=\"{k}\"}}"), v.to_string()))
    .collect();
    metric(
        "engine_jobs_total",
        "counter",
        "Engine jobs by outcome.",
        &jobs,
    );
    metric(
        "engine_generated_tokens_total",
        "counter",
        "Tokens generated by the engine, cancelled jobs included.",
        &one(e.generated_tokens.to_string()),
    );
    let http: Vec<(String, String)> = a
        .http
        .iter()
        .map(|(k, v)| (format!("{{status=\"{k}\"}}"), v.to_string()))
        .collect();
    metric(
        "http_responses_total",
        "counter",
        "HTTP responses by status.",
        &http,
    );
    metric(
        "uptime_seconds",
        "gauge",
        "Seconds since start.",
        &one(format!("{uptime:.1}")),
    );
    drop(a);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
