//! Tauri commands: the UI's IPC transport (`ui/api.js`, `ipcApi`). API calls go through the
//! in-process router; model management and settings call the hub and the engine directly.
//! Errors reach the UI as `{status, body}` with an OpenAI-style error body, shown in words.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Method;
use dspark_hub::download::{Progress, PullOptions};
use serde::Serialize;
use serde_json::{json, Value};
use tauri::ipc::Channel;
use tauri::State;

use crate::host::{ApiFailure, Host, Info, LoadRequest};
use crate::settings::AppSettings;

type Res<T> = Result<T, ApiFailure>;

#[tauri::command]
pub fn app_info(host: State<'_, Arc<Host>>) -> Info {
    host.info()
}

/// `GET path` on the in-process router (`/v1/models`, `/metrics`, `/api/live`, `/health`).
#[tauri::command]
pub async fn api_get(host: State<'_, Arc<Host>>, path: String) -> Res<Value> {
    host.request(Method::GET, &path, None).await
}

/// A streaming chat completion; `on_event` gets SSE text ending on event boundaries.
#[tauri::command]
pub async fn chat(
    host: State<'_, Arc<Host>>,
    id: u32,
    body: Value,
    on_event: Channel<String>,
) -> Res<()> {
    host.chat(id, body, |piece| on_event.send(piece).is_ok())
        .await
}

/// Stops the chat `id` (the Stop button); false when it had already finished.
#[tauri::command]
pub fn chat_cancel(host: State<'_, Arc<Host>>, id: u32) -> bool {
    host.cancel(id)
}

#[tauri::command]
pub fn settings_get(host: State<'_, Arc<Host>>) -> Res<AppSettings> {
    Ok(AppSettings::load(&host.settings_path)?)
}

/// Saves the UI's fields over the file's (model fields are kept), returns where.
#[tauri::command]
pub fn settings_save(host: State<'_, Arc<Host>>, settings: AppSettings) -> Res<Value> {
    let mut s = AppSettings::load(&host.settings_path).unwrap_or_default();
    s.port = settings.port;
    s.api_key = settings.api_key.filter(|k| !k.is_empty());
    s.thinking = settings.thinking;
    s.max_draft = settings.max_draft;
    s.save(&host.settings_path)?;
    // the router and engine take the new key, thinking default and draft knobs at once
    host.apply_settings();
    Ok(json!({"where": host.settings_path.display().to_string()}))
}

#[derive(Serialize)]
pub struct RegistryRow {
    pub id: &'static str,
    pub target: &'static str,
    pub dspark: Option<&'static str>,
    pub dflash: Option<&'static str>,
    pub draft: Option<&'static str>,
    pub ram_bytes: u64,
    pub on_disk: bool,
    /// Why the engine cannot run this model yet (`None` = it can).
    pub unavailable: Option<&'static str>,
}

/// The hub registry: targets, their drafters per mode, RAM estimate, and whether on disk.
#[tauri::command]
pub async fn registry() -> Vec<RegistryRow> {
    tauri::async_runtime::spawn_blocking(|| {
        dspark_hub::registry::REGISTRY
            .iter()
            .map(|e| RegistryRow {
                id: e.id,
                target: e.default_target(),
                dspark: e.dspark,
                dflash: e.dflash,
                draft: e.draft,
                ram_bytes: e.shape.ram_bytes(e.variants[0].quant),
                on_disk: dspark_hub::local::find_on_disk(e.default_target()).is_some(),
                unavailable: e.unavailable,
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// The drafter the hub picks for `model` in `mode`.
#[tauri::command]
pub fn resolve_drafter(model: String, mode: String) -> Res<Value> {
    let r = crate::loader::resolve(&model, &mode, None)?;
    Ok(json!({"target": r.target, "drafter": r.drafter}))
}

#[tauri::command]
pub async fn load_model(host: State<'_, Arc<Host>>, req: LoadRequest) -> Res<Info> {
    let h = host.inner().clone();
    h.load(req).await?;
    Ok(h.info())
}

/// Cancels a running load's download (what arrived is kept and resumed next time).
#[tauri::command]
pub fn cancel_load(host: State<'_, Arc<Host>>) -> bool {
    host.cancel_load()
}

#[tauri::command]
pub fn unload_model(host: State<'_, Arc<Host>>) -> Info {
    host.unload();
    host.info()
}

#[tauri::command]
pub async fn server_start(host: State<'_, Arc<Host>>) -> Res<Info> {
    host.start_listener().await?;
    Ok(host.info())
}

#[tauri::command]
pub fn server_stop(host: State<'_, Arc<Host>>) -> Info {
    host.stop_listener();
    host.info()
}

/// Sends download progress at most every 150 ms.
struct ChannelProgress {
    ch: Channel<Value>,
    st: Mutex<(u64, u64, String, Option<Instant>)>,
}

impl ChannelProgress {
    fn send(&self, force: bool) {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let due =
            st.3.is_none_or(|t| t.elapsed() >= Duration::from_millis(150));
        if force || due {
            st.3 = Some(Instant::now());
            let _ = self
                .ch
                .send(json!({"total": st.0, "done": st.1, "file": st.2}));
        }
    }
}

impl Progress for ChannelProgress {
    fn start(&self, _files: usize, total: u64, done: u64) {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = total;
        st.1 = done;
        drop(st);
        self.send(true);
    }
    fn file_start(&self, name: &str, _size: u64, _done: u64) {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).2 = name.to_string();
        self.send(true);
    }
    fn advance(&self, bytes: u64) {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).1 += bytes;
        self.send(false);
    }
    fn finish(&self) {
        self.send(true);
    }
}

/// Downloads a hub repo into the HF cache with progress.
#[tauri::command]
pub async fn pull(repo: String, on_progress: Channel<Value>) -> Res<Value> {
    let p = ChannelProgress {
        ch: on_progress,
        st: Mutex::new((0, 0, String::new(), None)),
    };
    let pulled = tauri::async_runtime::spawn_blocking(move || {
        dspark_hub::pull(&repo, &PullOptions::from_env(), &p)
    })
    .await
    .map_err(|e| ApiFailure::msg(format!("the download thread failed: {e}")))?
    .map_err(ApiFailure::msg)?;
    Ok(json!({"path": pulled.snapshot.display().to_string(), "bytes": pulled.fetched_bytes}))
}
