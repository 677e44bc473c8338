//! dspark's OpenAI-compatible HTTP server (axum): routes, validation, SSE, tool-call and
//! reasoning extraction, auth/CORS and metrics. [`app`] builds the router without sockets;
//! [`serve`] runs it on a listener. Only this crate knows HTTP; it never touches tensors.

pub mod anthropic_sse;
pub mod choices;
pub mod engine;
pub mod error;
pub mod event_stream;
pub mod infer;
pub mod logprobs;
pub mod middleware;
pub mod openai;
pub mod openapi;
pub mod openapi_extra;
pub mod openapi_parts;
pub mod responses_sse;
pub mod routes;
pub mod scripted;
pub mod sse;
pub mod structured;
pub mod structured_gemma4;
pub mod thinking;
pub mod tools;
pub mod ui;
pub mod validate;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use engine::Engine;
pub use middleware::Cors;
use routes::metrics::Metrics;
pub use validate::Limits;

/// Server settings (from `dspark serve` flags).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The id reported by `/v1/models` and echoed when a request names no model.
    pub model_id: String,
    pub api_key: Option<String>,
    pub cors: Cors,
    pub limits: Limits,
    /// Request bodies over this get 413 (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Requests with more header fields get 431 (`--max-headers`).
    pub max_headers: usize,
    /// Requests whose header names and values sum to more bytes get 431 (`--max-header-bytes`).
    pub max_header_bytes: usize,
    /// Interval of SSE keep-alive comments.
    pub keep_alive: Duration,
    /// Unix time reported as the model's `created`.
    pub created: u64,
}

impl ServerConfig {
    pub fn new(model_id: impl Into<String>) -> Self {
        ServerConfig {
            model_id: model_id.into(),
            api_key: None,
            cors: Cors::Local(vec![]),
            limits: Limits::default(),
            max_body_bytes: 8 << 20,
            max_headers: 64,
            max_header_bytes: 32 << 10,
            keep_alive: Duration::from_secs(15),
            created: openai::unix_now(),
        }
    }
}

/// Settings a running server applies at once (a settings-file reload, the app's Settings
/// pane): the API key and the thinking default. Starts from the [`ServerConfig`].
#[derive(Debug)]
pub struct LiveConfig {
    api_key: RwLock<Option<String>>,
    thinking: AtomicBool,
}

impl LiveConfig {
    fn new(cfg: &ServerConfig) -> Self {
        LiveConfig {
            api_key: RwLock::new(cfg.api_key.clone()),
            thinking: AtomicBool::new(cfg.limits.thinking),
        }
    }

    /// The key every request must present (`None` or empty = no auth).
    pub fn api_key(&self) -> Option<String> {
        self.api_key
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_api_key(&self, key: Option<String>) {
        *self.api_key.write().unwrap_or_else(|p| p.into_inner()) = key.filter(|k| !k.is_empty());
    }

    /// The default of `enable_thinking` when a request does not set it.
    pub fn thinking(&self) -> bool {
        self.thinking.load(Ordering::Relaxed)
    }

    pub fn set_thinking(&self, on: bool) {
        self.thinking.store(on, Ordering::Relaxed);
    }
}

#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<dyn Engine>,
    pub cfg: Arc<ServerConfig>,
    pub live: Arc<LiveConfig>,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    pub fn new(engine: Arc<dyn Engine>, cfg: ServerConfig) -> Self {
        AppState {
            engine,
            live: Arc::new(LiveConfig::new(&cfg)),
            cfg: Arc::new(cfg),
            metrics: Arc::default(),
        }
    }

    /// The validation limits in force (the static ones, with the live thinking default).
    pub fn limits(&self) -> Limits {
        Limits {
            thinking: self.live.thinking(),
            ..self.cfg.limits.clone()
        }
    }
}

/// The API router with the web UI (`ui/`, embedded) at `/`.
pub fn app(state: AppState) -> Router {
    let (state, ui) = ui::attach(state, Arc::default());
    app_with_ui(state, ui)
}

/// The API router; requests matching no API route go to `ui` (the web UI hook: it serves
/// `/` and its assets, and should answer unknown paths itself). Auth and CORS cover `ui` too.
pub fn app_with_ui(state: AppState, ui: Router) -> Router {
    let ui = ui.fallback(routes::health::not_found);
    let api = Router::new()
        .route("/v1/chat/completions", post(routes::chat::handler))
        .route("/chat/completions", post(routes::chat::handler))
        .route("/v1/completions", post(routes::completions::handler))
        .route("/completions", post(routes::completions::handler))
        .route("/v1/responses", post(routes::responses::handler))
        .route("/v1/messages", post(routes::messages::handler))
        .route(
            "/v1/messages/count_tokens",
            post(routes::messages::count_tokens),
        )
        .route("/v1/models", get(routes::models::list))
        .route("/models", get(routes::models::list))
        .route("/v1/models/{id}", get(routes::models::get))
        .route("/health", get(routes::health::health))
        .route("/openapi.json", get(openapi::handler))
        .route("/metrics", get(routes::metrics::handler))
        .method_not_allowed_fallback(routes::health::method_not_allowed)
        .fallback_service(ui)
        .layer(DefaultBodyLimit::max(state.cfg.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::auth,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::cors,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::header_limits,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::count_status,
        ))
        .layer(axum::middleware::from_fn(routes::messages::anthropic_layer));
    api.with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
