//! `GET /health` (no auth), the default page at `/` (replaced by the web UI later through
//! [`crate::app_with_ui`]), and the JSON 404/405 fallbacks.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Html;
use axum::Json;

use crate::error::ApiError;
use crate::openapi::Health;
use crate::AppState;

pub async fn health(State(st): State<AppState>) -> Json<Health> {
    let info = st.engine.info();
    Json(Health {
        status: "ok",
        model: st.cfg.model_id.clone(),
        mode: info.mode.clone(),
        drafter: info.drafter.clone(),
    })
}

/// `GET`/`HEAD /` until the web UI lands.
pub async fn index(State(st): State<AppState>) -> Html<String> {
    let info = st.engine.info();
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>dspark</title></head><body>\
         <h1>dspark</h1><p>Serving <code>{}</code> in <code>{}</code> mode.</p>\
         <p>OpenAI-compatible API under <code>/v1</code>: <code>POST /v1/chat/completions</code>, \
         <code>POST /v1/completions</code>, <code>GET /v1/models</code>; also <code>/health</code> and \
         <code>/metrics</code> (<code>?format=prometheus</code>).</p></body></html>",
        html_escape(&st.cfg.model_id),
        html_escape(&info.mode)
    ))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for `{}`", uri.path()))
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
