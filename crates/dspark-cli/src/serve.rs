//! `dspark serve`: loads the model on the engine worker thread, binds the OpenAI-compatible
//! server (default 127.0.0.1:8080) and prints a startup banner. All HTTP lives in
//! `dspark-server`; this file only wires flags to it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use dspark_engine::load::load_model;
use dspark_engine::worker::EngineHandle;
use dspark_server::scripted::{Script, ScriptedEngine};
use dspark_server::{app, AppState, Cors, Engine, ServerConfig};

use crate::args::{ModelArgs, SpecArgs};
use crate::model_arg::{any_backend, build_pipeline, resolve_model, AnyBackend, CliBackend};
use dspark_engine::prefix_cache::PrefixCacheConfig;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (the banner shows which).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route except OPTIONS and /health.
    #[arg(long, env = "DSPARK_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Default to enable_thinking=false (requests may override it).
    #[arg(long)]
    pub no_thinking: bool,
    /// Browser origins allowed by CORS (repeatable; `*` = any). Localhost origins are always allowed.
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// Requests that may wait while one generates; more get 429 with Retry-After.
    #[arg(long, default_value_t = 8)]
    pub queue: usize,
    /// max_tokens when a request gives none (capped by the context left).
    #[arg(long, default_value_t = 2048)]
    pub default_max_tokens: usize,
    /// The model id reported by /v1/models (default: the model file or directory name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Prefix-cache slots (conversations whose KV state is kept).
    #[arg(long, default_value_t = 8)]
    pub prefix_cache_slots: usize,
    /// RAM budget of the prefix cache; over it, least recently used slots spill to
    /// --prefix-cache-dir (or are dropped without one). 0 = unlimited.
    #[arg(long, default_value_t = 2048)]
    pub prefix_cache_ram_mb: usize,
    /// Directory for spilled prefix-cache slots (reused after a restart).
    #[arg(long)]
    pub prefix_cache_dir: Option<PathBuf>,
    /// Turn the prefix cache off.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Test hook: serve a scripted engine from this JSON file instead of a model.
    #[arg(long, hide = true)]
    pub scripted: Option<PathBuf>,
}

fn model_id(a: &ServeArgs, path: Option<&std::path::Path>) -> String {
    if let Some(n) = &a.served_model_name {
        return n.clone();
    }
    match path {
        Some(p) => p.file_stem().or(p.file_name()).map_or_else(
            || a.model.model.clone(),
            |s| s.to_string_lossy().into_owned(),
        ),
        None => "scripted".into(),
    }
}

fn start_engine(a: &ServeArgs) -> Result<(Arc<dyn Engine>, String, String)> {
    if let Some(file) = &a.scripted {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let script: Script = serde_json::from_str(&text).context("parsing the script")?;
        return Ok((
            Arc::new(ScriptedEngine::new(script)),
            model_id(a, None),
            "scripted".into(),
        ));
    }
    let path = resolve_model(&a.model.model)?;
    let id = model_id(a, Some(&path));
    let (m, s) = (a.model.clone(), a.spec.clone());
    let p2 = path.clone();
    let pc = (!a.no_prefix_cache).then(|| PrefixCacheConfig {
        max_slots: a.prefix_cache_slots.max(1),
        max_ram_bytes: a.prefix_cache_ram_mb << 20,
        dir: a.prefix_cache_dir.clone(),
        min_reuse: 16,
    });
    let handle = match any_backend(&a.model)? {
        AnyBackend::Candle(b) => spawn_on(b, m, s, p2, a.queue, pc)?,
        #[cfg(feature = "mlx")]
        AnyBackend::Mlx(b) => spawn_on(b, m, s, p2, a.queue, pc)?,
    };
    Ok((Arc::new(handle), id, path.display().to_string()))
}

/// The engine worker on backend `b`: the model and drafter are built on the worker thread,
/// which then owns every tensor (MLX arrays included).
fn spawn_on<B: CliBackend>(
    b: B,
    m: ModelArgs,
    s: SpecArgs,
    path: PathBuf,
    queue: usize,
    prefix_cache: Option<PrefixCacheConfig>,
) -> Result<EngineHandle> {
    EngineHandle::spawn(
        move || -> Result<_> {
            let lm = load_model(&b, &path, None)
                .with_context(|| format!("loading {}", path.display()))?;
            let mut pipe = build_pipeline(&m, &s, lm, &b)?;
            if let Some(cfg) = prefix_cache {
                pipe.enable_prefix_cache(cfg, s.drafter.as_deref().unwrap_or("default"));
            }
            Ok(pipe)
        },
        queue,
    )
}

pub fn run(a: ServeArgs) -> Result<()> {
    let (engine, id, path) = start_engine(&a)?;
    let mut cfg = ServerConfig::new(id.clone());
    cfg.api_key = a.api_key.clone().filter(|k| !k.is_empty());
    cfg.cors = Cors::from_list(&a.cors_origins);
    cfg.limits.thinking = !a.no_thinking;
    cfg.limits.default_max_tokens = a.default_max_tokens.max(1);
    let auth = cfg.api_key.is_some();
    let info = engine.info().clone();
    let router = app(AppState::new(engine, cfg));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", a.host, a.port)
            .parse()
            .or_else(|_| format!("[{}]:{}", a.host, a.port).parse())
            .with_context(|| format!("bad --host/--port `{}:{}`", a.host, a.port))?;
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot bind {addr}"))?;
        let local = listener.local_addr()?;
        let base = format!("http://{local}");
        let drafter = info.drafter.as_deref().unwrap_or("none");
        let key_hdr = if auth { " -H \"Authorization: Bearer $DSPARK_API_KEY\"" } else { "" };
        println!("dspark serve · mode {} · model {id} ({path}) · drafter {drafter}", info.mode);
        println!("  auth: {} · thinking default: {} · queue: {}", if auth { "on (Bearer key)" } else { "off" }, !a.no_thinking, a.queue);
        println!("  OpenAI base URL: {base}/v1");
        println!("  try: curl -s {base}/v1/chat/completions -H 'Content-Type: application/json'{key_hdr} -d '{{\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'");
        println!("listening on {base}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        dspark_server::serve(listener, router, shutdown).await?;
        Ok(())
    })
}
