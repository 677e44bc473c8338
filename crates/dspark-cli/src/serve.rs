//! `dspark serve`: merges flags, environment and the settings file, starts the engine through
//! `dspark_engine::launch`, binds the OpenAI-compatible server (default 127.0.0.1:8080),
//! prints a startup banner, and applies settings-file edits live. All HTTP lives in
//! `dspark-server`; this file only wires settings to it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use clap::Args;
use dspark_engine::worker::EngineHandle;
use dspark_hub::layers::Layers;
use dspark_hub::settings::{Settings, SettingsEvent, SettingsWatcher};
use dspark_server::scripted::{Script, ScriptedEngine};
use dspark_server::{app, AppState, Cors, Engine, LiveConfig, ServerConfig};

use crate::args::{flag_layer, ModelArgs, SpecArgs};
use crate::model_arg::{launch, layers};

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Listen address (default 127.0.0.1).
    #[arg(long)]
    pub host: Option<String>,
    /// 0 picks a free port (the banner shows which). Default 8080.
    #[arg(long)]
    pub port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on every route except OPTIONS and /health.
    /// Env: DSPARK_API_KEY.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Default to enable_thinking=false (requests may override it).
    #[arg(long)]
    pub no_thinking: bool,
    /// Browser origins allowed by CORS (repeatable; `*` = any). Localhost origins are always allowed.
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// Requests that may wait while one generates; more get 429 with Retry-After. Default 8.
    #[arg(long)]
    pub queue: Option<usize>,
    /// max_tokens when a request gives none (capped by the context left).
    #[arg(long, default_value_t = 2048)]
    pub default_max_tokens: usize,
    /// The model id reported by /v1/models (default: the registry id, repo id or file name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Prefix-cache slots (conversations whose KV state is kept). Default 8.
    #[arg(long)]
    pub prefix_cache_slots: Option<usize>,
    /// RAM budget of the prefix cache; over it, least recently used slots spill to
    /// --prefix-cache-dir (or are dropped without one). 0 = unlimited. Default 2048.
    #[arg(long)]
    pub prefix_cache_ram_mb: Option<usize>,
    /// Directory for spilled prefix-cache slots (reused after a restart).
    #[arg(long)]
    pub prefix_cache_dir: Option<PathBuf>,
    /// Turn the prefix cache off.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Settings file (default: $DSPARK_CONFIG, else the platform config dir's
    /// dspark/config.toml); read at start and watched while serving.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Test hook: serve a scripted engine from this JSON file instead of a model.
    #[arg(long, hide = true)]
    pub scripted: Option<PathBuf>,
    #[command(flatten)]
    pub limits: RequestLimits,
}

/// Limits on each request; over them the answer is an OpenAI-shaped error.
#[derive(Args, Debug, Clone)]
pub struct RequestLimits {
    /// Largest request body in bytes; larger gets 413.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Most header fields per request; more get 431 (hyper refuses over 100 on its own).
    #[arg(long, default_value_t = 64)]
    pub max_headers: usize,
    /// Most bytes of header names and values per request; more get 431.
    #[arg(long, default_value_t = 32 << 10)]
    pub max_header_bytes: usize,
    /// Most messages in one chat request; more get 400 (param `messages`).
    #[arg(long, default_value_t = 2048)]
    pub max_messages: usize,
    /// Most bytes of text summed over a request's message contents (or its prompt); more get
    /// 400 (param `messages` / `prompt`).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_content_bytes: usize,
}

impl RequestLimits {
    /// Writes these limits into the server config.
    pub fn apply(&self, cfg: &mut ServerConfig) {
        cfg.max_body_bytes = self.max_body_bytes;
        cfg.max_headers = self.max_headers;
        cfg.max_header_bytes = self.max_header_bytes;
        cfg.limits.max_messages = self.max_messages;
        cfg.limits.max_content_bytes = self.max_content_bytes;
    }
}

impl ServeArgs {
    /// The settings layer of these flags.
    pub fn flags(&self) -> Settings {
        Settings {
            served_model_name: self.served_model_name.clone(),
            prefix_cache: self.no_prefix_cache.then_some(false),
            prefix_cache_slots: self.prefix_cache_slots,
            prefix_cache_ram_mb: self.prefix_cache_ram_mb,
            prefix_cache_dir: self.prefix_cache_dir.clone(),
            queue: self.queue,
            host: self.host.clone(),
            port: self.port,
            api_key: self.api_key.clone(),
            thinking: self.no_thinking.then_some(false),
            ..flag_layer(&self.model, &self.spec)
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(dspark_hub::paths::config_file)
    }
}

/// The engine (a handle to retune when it is a real one), its id and the model path.
type Started = (Arc<dyn Engine>, Option<EngineHandle>, String, String);

fn start_engine(a: &ServeArgs, merged: &Settings) -> Result<Started> {
    if let Some(file) = &a.scripted {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let script: Script = serde_json::from_str(&text).context("parsing the script")?;
        let id = merged
            .served_model_name
            .clone()
            .unwrap_or_else(|| "scripted".into());
        return Ok((
            Arc::new(ScriptedEngine::new(script)),
            None,
            id,
            "scripted".into(),
        ));
    }
    let l = launch(merged)?;
    let handle = dspark_engine::launch::spawn(&l.spec)?;
    let path = l.spec.model.display().to_string();
    Ok((Arc::new(handle.clone()), Some(handle), l.id, path))
}

/// Applies settings-file changes while serving: the API key, thinking default, draft knobs
/// and prefix-cache limits at once; the rest is logged as needing a restart. Flags and the
/// environment keep beating the file.
fn watch_settings(
    path: &std::path::Path,
    layers: Layers,
    live: Arc<LiveConfig>,
    engine: Option<EngineHandle>,
) -> Option<SettingsWatcher> {
    let state = Mutex::new(layers);
    let w = SettingsWatcher::start(path, move |ev| {
        let SettingsEvent::Changed { settings, .. } = ev else {
            return; // the watcher logged why; the settings in force stay
        };
        let mut l = state.lock().unwrap_or_else(|p| p.into_inner());
        let old = l.merged();
        l.file = (**settings).clone();
        let new = l.merged();
        live.set_api_key(new.api_key.clone());
        live.set_thinking(new.thinking.unwrap_or(true));
        if let Some(h) = &engine {
            h.retune(dspark_hub::launch::tuning(&new));
        }
        let restart = old.restart_needed(&new);
        if !restart.is_empty() {
            tracing::warn!(
                "settings changed that take effect after a restart: {}",
                restart.join(", ")
            );
        }
        tracing::info!(
            "settings applied (API key, thinking default, draft and prefix-cache limits)"
        );
    });
    match w {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("{e}; settings changes need a restart");
            None
        }
    }
}

pub fn run(a: ServeArgs) -> Result<()> {
    let config = a.config_path();
    let layers = layers(a.flags(), Some(&config))?;
    let merged = layers.merged();
    let (engine, handle, id, path) = start_engine(&a, &merged)?;
    let mut cfg = ServerConfig::new(id.clone());
    cfg.api_key = merged.api_key.clone().filter(|k| !k.is_empty());
    cfg.cors = Cors::from_list(&a.cors_origins);
    cfg.limits.thinking = merged.thinking.unwrap_or(true);
    cfg.limits.default_max_tokens = a.default_max_tokens.max(1);
    a.limits.apply(&mut cfg);
    let auth = cfg.api_key.is_some();
    let thinking = cfg.limits.thinking;
    let info = engine.info().clone();
    let state = AppState::new(engine, cfg);
    let _watcher = watch_settings(&config, layers, state.live.clone(), handle);
    let router = app(state);
    let (host, port) = (merged.host().to_string(), merged.port());
    let queue = merged.queue.unwrap_or(8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr: SocketAddr = format!("{host}:{port}")
            .parse()
            .or_else(|_| format!("[{host}]:{port}").parse())
            .with_context(|| format!("bad host/port `{host}:{port}`"))?;
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot bind {addr}"))?;
        let local = listener.local_addr()?;
        let base = format!("http://{local}");
        let drafter = match (info.drafter.as_deref(), info.draft_vocab) {
            (None, _) => "none".to_string(),
            (Some(d), None) => d.to_string(),
            (Some(d), Some(k)) => {
                let plus = if dspark_engine::drafters::draft_vocab::prompt_ids_join() { " + each prompt's" } else { "" };
                format!("{d} (draft vocabulary {k}{plus} of {} ids)", info.vocab_size)
            }
        };
        let key_hdr = if auth { " -H \"Authorization: Bearer $DSPARK_API_KEY\"" } else { "" };
        println!("dspark serve · mode {} · model {id} ({path}) · drafter {drafter}", info.mode);
        println!("  auth: {} · thinking default: {thinking} · queue: {queue}", if auth { "on (Bearer key)" } else { "off" });
        println!("  settings: {} (watched; `dspark settings` shows what is in force)", config.display());
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
