//! The in-process server host: owns the loaded engine, the axum router (the same
//! `dspark_server` router `dspark serve` runs, web UI included) and the optional HTTP listener.
//!
//! The app's webview never fetches localhost: commands hand requests to [`Host::request`] and
//! [`Host::chat`], which call the router directly (`tower::ServiceExt::oneshot`). The HTTP
//! listener is only for outside clients (LM Studio clients, editors, curl).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use axum::body::Body;
use axum::http::{header, Method, Request};
use axum::Router;
use dspark_engine::worker::EngineHandle;
use dspark_hub::download::Progress;
use dspark_hub::layers::Layers;
use dspark_hub::settings::Settings;
use dspark_server::ui::LiveStats;
use dspark_server::{AppState, Engine, LiveConfig, ServerConfig};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;
use tower::ServiceExt;

use crate::settings::AppSettings;

/// What to load: the model manager's form and the settings' model fields.
#[derive(Clone, Debug, Default, serde::Deserialize, Serialize, PartialEq)]
pub struct LoadRequest {
    pub model: String,
    pub mode: String,
    #[serde(default)]
    pub drafter: Option<String>,
    #[serde(default)]
    pub max_draft: Option<usize>,
}

/// A proxied API failure: the HTTP status and the server's JSON error body.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApiFailure {
    pub status: u16,
    pub body: Value,
}

impl ApiFailure {
    pub fn msg(m: impl std::fmt::Display) -> Self {
        ApiFailure {
            status: 500,
            body: serde_json::json!({"error": {"message": m.to_string()}}),
        }
    }
}

impl From<anyhow::Error> for ApiFailure {
    fn from(e: anyhow::Error) -> Self {
        ApiFailure::msg(format!("{e:#}"))
    }
}

/// What `app_info` reports.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Info {
    /// `http://127.0.0.1:PORT` while the listener runs.
    pub url: Option<String>,
    pub listening: bool,
    /// A model is loaded and the router answers (in-app chat works).
    pub running: bool,
    pub loading: bool,
    pub model: Option<String>,
    pub mode: Option<String>,
    pub error: Option<String>,
    pub settings_path: String,
    /// Download progress while a load fetches the model (bytes of the whole snapshot).
    pub download: Option<Download>,
}

/// Where a load's download stands.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Download {
    pub total: u64,
    pub done: u64,
    pub file: String,
}

struct Loaded {
    id: String,
    mode: String,
    router: Router,
    /// The router's live API key and thinking default.
    live: Arc<LiveConfig>,
    /// The real engine, to retune on a settings change (`None` for test doubles).
    handle: Option<EngineHandle>,
}

#[derive(Default)]
struct Inner {
    loaded: Option<Loaded>,
    listener: Option<(SocketAddr, oneshot::Sender<()>)>,
    loading: Option<String>,
    error: Option<String>,
    download: Option<Download>,
}

type Notify = Box<dyn Fn(&str) + Send + Sync>;

/// Shared app state (managed by Tauri as `Arc<Host>`).
pub struct Host {
    inner: Mutex<Inner>,
    /// Live round statistics of whatever engine is loaded (tray title, gauges).
    pub live: Arc<LiveStats>,
    pub settings_path: PathBuf,
    chats: Mutex<HashMap<u32, oneshot::Sender<()>>>,
    notify: Mutex<Option<Notify>>,
    /// Set by [`Host::cancel_load`]; the running load's download stops at the next chunk.
    cancel_load: AtomicBool,
}

impl Host {
    pub fn new(settings_path: PathBuf) -> Arc<Host> {
        Arc::new(Host {
            inner: Mutex::default(),
            live: Arc::default(),
            settings_path,
            chats: Mutex::default(),
            notify: Mutex::new(None),
            cancel_load: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called with "server" whenever the state changes and "load-progress" while a load
    /// downloads (the app forwards both as events; `info().download` has the numbers).
    pub fn set_notify(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    fn changed(&self) {
        self.emit("server");
    }

    fn emit(&self, event: &str) {
        if let Some(f) = &*self.notify.lock().unwrap_or_else(|e| e.into_inner()) {
            f(event);
        }
    }

    /// Stops the running load's download (kept on disk; the next load resumes it). False
    /// when nothing is loading.
    pub fn cancel_load(&self) -> bool {
        let loading = self.lock().loading.is_some();
        if loading {
            self.cancel_load.store(true, Ordering::Relaxed);
        }
        loading
    }

    pub fn settings(&self) -> AppSettings {
        AppSettings::load(&self.settings_path).unwrap_or_default()
    }

    /// The settings in force: the environment over the settings file over the defaults (as
    /// `dspark serve` merges them, without flags). An unreadable file counts as empty.
    pub fn effective(&self) -> Settings {
        Layers::load(Settings::default(), Some(&self.settings_path))
            .map(|l| l.merged())
            .unwrap_or_else(|e| {
                tracing::warn!("{e}; using the defaults");
                Layers::default().merged()
            })
    }

    /// Serves `engine` (replacing whatever was loaded) under the id `id`.
    pub fn install(&self, engine: Arc<dyn Engine>, id: String) {
        self.install_engine(engine, None, id);
    }

    fn install_engine(&self, engine: Arc<dyn Engine>, handle: Option<EngineHandle>, id: String) {
        let s = self.effective();
        let mode = engine.info().mode.clone();
        let mut cfg = ServerConfig::new(id.clone());
        cfg.api_key = s.api_key.clone().filter(|k| !k.is_empty());
        cfg.limits.thinking = s.thinking.unwrap_or(true);
        let (state, ui) = dspark_server::ui::attach(AppState::new(engine, cfg), self.live.clone());
        let live = state.live.clone();
        let router = dspark_server::app_with_ui(state, ui);
        let mut g = self.lock();
        g.loaded = Some(Loaded {
            id,
            mode,
            router,
            live,
            handle,
        });
        g.loading = None;
        g.error = None;
        drop(g);
        self.changed();
    }

    /// Applies the settings in force to what is loaded, at once: the router's API key and
    /// thinking default, the engine's draft knobs and prefix-cache limits.
    pub fn apply_settings(&self) {
        let s = self.effective();
        let g = self.lock();
        if let Some(l) = &g.loaded {
            l.live.set_api_key(s.api_key.clone());
            l.live.set_thinking(s.thinking.unwrap_or(true));
            if let Some(h) = &l.handle {
                h.retune(dspark_hub::launch::tuning(&s));
            }
        }
    }

    /// Drops the engine (its worker thread ends with the last handle) and stops the listener.
    pub fn unload(&self) {
        self.stop_listener();
        self.lock().loaded = None;
        self.changed();
    }

    /// Loads `req` on a blocking thread, then serves it; failures are kept for `info`.
    pub async fn load(self: &Arc<Self>, req: LoadRequest) -> Result<(), ApiFailure> {
        self.lock().loading = Some(req.model.clone());
        self.cancel_load.store(false, Ordering::Relaxed);
        self.changed();
        let r2 = req.clone();
        let path = self.settings_path.clone();
        let me = self.clone();
        let res = tokio::task::spawn_blocking(move || {
            let progress = LoadProgress {
                host: me.clone(),
                last: Mutex::new(None),
            };
            let r = crate::loader::load_engine(&path, &r2, &progress);
            me.lock().download = None;
            r
        })
        .await
        .map_err(|e| anyhow!("the loader thread failed: {e}"));
        match res.and_then(|r| r) {
            Ok((engine, handle, id)) => {
                let was_listening = self.lock().listener.is_some();
                self.stop_listener();
                self.install_engine(engine, Some(handle), id);
                let mut s = self.settings();
                s.model = Some(req.model);
                s.mode = Some(req.mode);
                s.drafter = req.drafter;
                s.max_draft = req.max_draft;
                s.save(&self.settings_path)?;
                if was_listening {
                    self.start_listener().await?;
                }
                Ok(())
            }
            Err(e) => {
                let msg = format!("{e:#}");
                let mut g = self.lock();
                g.loading = None;
                g.error = Some(msg.clone());
                drop(g);
                self.changed();
                Err(ApiFailure::msg(msg))
            }
        }
    }

    pub fn info(&self) -> Info {
        let g = self.lock();
        Info {
            url: g.listener.as_ref().map(|(a, _)| format!("http://{a}")),
            listening: g.listener.is_some(),
            running: g.loaded.is_some(),
            loading: g.loading.is_some(),
            model: g
                .loaded
                .as_ref()
                .map(|l| l.id.clone())
                .or_else(|| g.loading.clone()),
            mode: g.loaded.as_ref().map(|l| l.mode.clone()),
            error: g.error.clone(),
            settings_path: self.settings_path.display().to_string(),
            download: g.download.clone(),
        }
    }

    fn router(&self) -> Result<Router, ApiFailure> {
        let g = self.lock();
        match &g.loaded {
            Some(l) => Ok(l.router.clone()),
            None => Err(ApiFailure::msg(match &g.loading {
                Some(m) => format!("the model `{m}` is still loading"),
                None => "no model is loaded: load one under Models".into(),
            })),
        }
    }

    /// Binds the HTTP listener on the settings' host and port (0 = any free port).
    pub async fn start_listener(&self) -> Result<String, ApiFailure> {
        if let Some((a, _)) = &self.lock().listener {
            return Ok(format!("http://{a}"));
        }
        let router = self.router()?;
        let s = self.settings();
        let addr = format!("{}:{}", s.host.as_deref().unwrap_or("127.0.0.1"), s.port());
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (is another server using the port? change it under Settings)"))?;
        let local = listener.local_addr().map_err(anyhow::Error::from)?;
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            if let Err(e) = dspark_server::serve(listener, router, stop).await {
                tracing::error!("server on {local}: {e}");
            }
        });
        self.lock().listener = Some((local, tx));
        self.changed();
        Ok(format!("http://{local}"))
    }

    pub fn stop_listener(&self) {
        let l = self.lock().listener.take();
        if let Some((_, tx)) = l {
            let _ = tx.send(());
            self.changed();
        }
    }

    /// A request to the router carrying the key in force; a path that is no valid URI (or
    /// a key that is no valid header) is an error, never a panic.
    fn build(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Body>, ApiFailure> {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(k) = self.effective().api_key.filter(|k| !k.is_empty()) {
            b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        }
        .map_err(|e| ApiFailure {
            status: 400,
            body: serde_json::json!({"error": {
                "message": format!("`{path}` cannot be requested: {e}"),
                "type": "invalid_request_error"}}),
        })
    }

    /// One API call through the router; JSON (or text as a string) back, errors as failures.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiFailure> {
        if !path.starts_with('/') {
            return Err(ApiFailure::msg(format!("`{path}` is not an API path")));
        }
        let resp = self
            .router()?
            .oneshot(self.build(method, path, body)?)
            .await
            .map_err(|e| ApiFailure::msg(format!("{e}")))?;
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20)
            .await
            .map_err(|e| ApiFailure::msg(format!("{e}")))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            return Err(ApiFailure { status, body: v });
        }
        Ok(v)
    }

    /// A streaming chat completion: `sink` gets the SSE text in pieces that end on event
    /// boundaries. [`Host::cancel`] with the same `id` stops it (the body is dropped, so the
    /// server cancels the generation exactly as when an HTTP client disconnects).
    pub async fn chat(
        &self,
        id: u32,
        mut body: Value,
        mut sink: impl FnMut(String) -> bool,
    ) -> Result<(), ApiFailure> {
        if let Some(o) = body.as_object_mut() {
            o.insert("stream".into(), Value::Bool(true));
        }
        let (tx, mut rx) = oneshot::channel();
        self.chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let res = async {
            let req = self.build(Method::POST, "/v1/chat/completions", Some(&body))?;
            let resp = self
                .router()?
                .oneshot(req)
                .await
                .map_err(|e| ApiFailure::msg(format!("{e}")))?;
            let status = resp.status().as_u16();
            if status >= 400 {
                let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default();
                let v = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
                return Err(ApiFailure { status, body: v });
            }
            let mut stream = resp.into_body().into_data_stream();
            let mut buf: Vec<u8> = Vec::new();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    next = stream.next() => match next {
                        Some(Ok(bytes)) => {
                            buf.extend_from_slice(&bytes);
                            if let Some(end) = last_event_end(&buf) {
                                let piece: Vec<u8> = buf.drain(..end).collect();
                                if !sink(String::from_utf8_lossy(&piece).into_owned()) {
                                    break;
                                }
                            }
                        }
                        Some(Err(e)) => return Err(ApiFailure::msg(format!("the stream broke: {e}"))),
                        None => {
                            if !buf.is_empty() {
                                sink(String::from_utf8_lossy(&buf).into_owned());
                            }
                            break;
                        }
                    }
                }
            }
            Ok(())
        }
        .await;
        self.chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        res
    }

    /// Stops the chat `id`; false when none is running under that id.
    pub fn cancel(&self, id: u32) -> bool {
        let tx = self
            .chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        tx.map(|tx| tx.send(()).is_ok()).unwrap_or(false)
    }
}

/// A load's download progress, kept in the host (for `info`) and announced as
/// "load-progress" at most every 150 ms; polled for cancellation.
struct LoadProgress {
    host: Arc<Host>,
    last: Mutex<Option<std::time::Instant>>,
}

impl LoadProgress {
    fn update(&self, force: bool, f: impl FnOnce(&mut Download)) {
        f(self
            .host
            .lock()
            .download
            .get_or_insert_with(Download::default));
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if force || last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(150)) {
            *last = Some(std::time::Instant::now());
            drop(last);
            self.host.emit("load-progress");
        }
    }
}

impl Progress for LoadProgress {
    fn start(&self, _files: usize, total: u64, done: u64) {
        self.update(true, |d| {
            d.total = total;
            d.done = done;
        });
    }
    fn file_start(&self, name: &str, _size: u64, _done: u64) {
        self.update(true, |d| d.file = name.to_string());
    }
    fn advance(&self, bytes: u64) {
        self.update(false, |d| d.done += bytes);
    }
    fn finish(&self) {
        self.update(true, |_| {});
    }
    fn cancelled(&self) -> bool {
        self.host.cancel_load.load(Ordering::Relaxed)
    }
}

/// The end of the last complete SSE event (`\n\n`) in `buf`.
fn last_event_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2)
}

#[cfg(test)]
mod tests {
    use super::last_event_end;

    #[test]
    fn events_split_on_blank_lines() {
        assert_eq!(last_event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(last_event_end(b"data: a"), None);
    }
}
