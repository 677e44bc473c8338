//! `dspark bench-server`: the HTTP server's cost. (1) Per streamed token, the same generation
//! through the in-process engine handle vs. through HTTP/SSE on a loopback port (ratio), and
//! (2) time-to-first-token p50/p99 with 1, 4 and 16 concurrent loopback streaming clients.
//! Writes JSON. Not part of any timed test.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use dspark_engine::chat_template::ChatOptions;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::worker::{EngineHandle, Event, JobParams, Prompt};
use dspark_server::{app, AppState, ServerConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args::{flag_layer, ModelArgs, SpecArgs};
use crate::model_arg::{launch, layers};

#[derive(Args, Debug)]
pub struct BenchServerArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Tokens per generation in the overhead comparison.
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Repetitions of the overhead comparison (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Streaming requests per client in the TTFT runs.
    #[arg(long, default_value_t = 2)]
    pub requests_per_client: usize,
    /// max_tokens of each TTFT request.
    #[arg(long, default_value_t = 4)]
    pub ttft_tokens: usize,
    #[arg(long, default_value = "target/bench-server.json")]
    pub out: PathBuf,
}

const PROMPT: &str = "Write a long list of animals, one per line.";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Engine only: seconds per token from the first delta to Done, through the handle.
fn engine_only(h: &EngineHandle, ids: &[u32], n: usize) -> Result<(f64, usize)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let params = JobParams {
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        stop: vec![],
    };
    h.submit(
        ids.to_vec(),
        params,
        Box::new(move |e| tx.send((Instant::now(), e)).is_ok()),
    )?;
    let mut first = None;
    loop {
        let (t, e) = rx
            .recv_timeout(Duration::from_secs(600))
            .context("engine timed out")?;
        match e {
            Event::Delta { tokens, .. } if tokens > 0 => {
                first.get_or_insert(t);
            }
            Event::Done(s) => {
                let f = first.context("no tokens")?;
                let k = s.completion_tokens.saturating_sub(1).max(1);
                return Ok(((t - f).as_secs_f64() / k as f64, s.completion_tokens));
            }
            Event::Error(e) => return Err(e.into()),
            _ => {}
        }
    }
}

/// One streaming chat request over a raw loopback connection: (ttft, secs/token after the first, tokens).
async fn http_stream(addr: std::net::SocketAddr, max_tokens: usize) -> Result<(f64, f64, usize)> {
    let body = json!({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens, "stream": true,
                      "stream_options": {"include_usage": true}})
    .to_string();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let (mut first, mut last, mut frames) = (None, t0, 0usize);
    let mut scanned = 0;
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf[scanned..]).into_owned();
        let now = Instant::now();
        // count complete frames carrying content text
        let mut consumed = 0;
        while let Some(end) = text[consumed..].find("\n\n") {
            let frame = &text[consumed..consumed + end];
            if frame.contains("\"delta\":{\"content\":\"") && !frame.contains("\"delta\":{\"role\"")
            {
                frames += 1;
                first.get_or_insert(now);
                last = now;
            }
            consumed += end + 2;
        }
        scanned += consumed;
        if text.contains("data: [DONE]") {
            break;
        }
    }
    let first = first.context("no content frames")?;
    let ttft = (first - t0).as_secs_f64();
    let per_tok = (last - first).as_secs_f64() / frames.saturating_sub(1).max(1) as f64;
    Ok((ttft, per_tok, frames))
}

pub fn run(a: BenchServerArgs) -> Result<()> {
    let mut flags = flag_layer(&a.model, &a.spec);
    flags.prefix_cache = Some(false);
    flags.queue = Some(64);
    let l = launch(&layers(flags, None)?.merged())?;
    let path = l.spec.model.clone();
    let h: EngineHandle = dspark_engine::launch::spawn(&l.spec)?;
    let msgs = json!([{"role": "user", "content": PROMPT}]);
    let prompt = Prompt::Chat {
        messages: msgs,
        options: ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        },
    };
    let ids = h.prepare(&prompt, a.tokens)?.ids;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let handle = h.clone();
    let report = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let router = app(AppState::new(Arc::new(handle.clone()), ServerConfig::new("bench")));
        tokio::spawn(dspark_server::serve(listener, router, std::future::pending()));
        let (mut eng, mut srv) = (vec![], vec![]);
        let mut tokens = 0;
        for _ in 0..a.reps.max(1) {
            let hh = handle.clone();
            let ids2 = ids.clone();
            let n = a.tokens;
            let (e, k) = tokio::task::spawn_blocking(move || engine_only(&hh, &ids2, n)).await??;
            let (_, s, frames) = http_stream(addr, a.tokens).await?;
            eng.push(e);
            srv.push(s);
            tokens = k.min(frames);
        }
        if tokens < 8 {
            bail!("the model stopped after {tokens} tokens; the per-token comparison needs more");
        }
        let (e_med, s_med) = (median(&mut eng), median(&mut srv));
        let mut ttft = serde_json::Map::new();
        for clients in [1usize, 4, 16] {
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let r = a.requests_per_client;
                let n = a.ttft_tokens;
                tasks.push(tokio::spawn(async move {
                    let mut v = Vec::new();
                    for _ in 0..r {
                        v.push(http_stream(addr, n).await?.0);
                    }
                    anyhow::Ok(v)
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await??);
            }
            let (p50, p99) = (percentile(&mut all, 0.5), percentile(&mut all, 0.99));
            println!("TTFT with {clients:>2} concurrent clients: p50 {:.1} ms, p99 {:.1} ms ({} requests)", p50 * 1e3, p99 * 1e3, all.len());
            ttft.insert(clients.to_string(), json!({"p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "requests": all.len()}));
        }
        println!(
            "per streamed token: engine-only {:.3} ms, via HTTP/SSE {:.3} ms, ratio {:.3} ({} tokens, median of {})",
            e_med * 1e3,
            s_med * 1e3,
            s_med / e_med,
            tokens,
            a.reps
        );
        anyhow::Ok(json!({
            "model": path.display().to_string(), "mode": handle.info().mode, "tokens": tokens,
            "engine_ms_per_token": e_med * 1e3, "server_ms_per_token": s_med * 1e3,
            "server_over_engine_ratio": s_med / e_med,
            "ttft": ttft,
        }))
    })?;
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.out, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
