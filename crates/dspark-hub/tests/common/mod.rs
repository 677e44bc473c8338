//! A fake Hugging Face hub for tests: axum on 127.0.0.1:0 serving one repo in the hub's layout
//! (`/api/models/{org}/{name}/revision/{rev}` with `?blobs=true` fields,
//! `/api/models/{org}/{name}/tree/{rev}` in the hub's tree format (LFS hash as `lfs.oid`), and
//! `/{org}/{name}/resolve/{rev}/{file}` for GET and HEAD with Range support and etag headers).
//! It counts requests and bytes served, records the Range start of every file GET, and can cut a
//! response short, serve corrupted bytes, or demand a token on demand.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha1::Sha1;
use sha2::{Digest, Sha256};

pub const REPO: &str = "tiny-org/tiny-qwen3";
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

pub struct FakeFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub lfs: bool,
}

impl FakeFile {
    pub fn sha256(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }
    pub fn git_sha1(&self) -> String {
        let mut h = Sha1::new();
        h.update(format!("blob {}\0", self.bytes.len()).as_bytes());
        h.update(&self.bytes);
        hex(&h.finalize())
    }
    pub fn etag(&self) -> String {
        if self.lfs {
            self.sha256()
        } else {
            self.git_sha1()
        }
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Default)]
pub struct Stats {
    pub requests: AtomicUsize,
    pub bytes_served: AtomicU64,
    /// (file, range start) for each file request.
    pub file_requests: Mutex<Vec<(String, u64)>>,
}

pub struct Hub {
    pub files: Vec<FakeFile>,
    pub stats: Stats,
    /// When set, the next response for this file stops after this many body bytes and drops
    /// the connection.
    pub cut_after: Mutex<Option<(String, u64)>>,
    /// While set, every response for this file stops at this absolute byte offset, reports on
    /// the channel and stalls until the server is dropped (for killing a client mid-download;
    /// a client that times out and retries with Range stalls again at once). Clear it to let
    /// the file through.
    pub stall_after: Mutex<Option<(String, u64, std::sync::mpsc::Sender<()>)>>,
    /// Files served with one byte flipped.
    pub corrupt: Mutex<Vec<String>>,
    /// When set, every request needs `Authorization: Bearer <token>` (401 otherwise).
    pub token: Mutex<Option<String>>,
}

impl Hub {
    /// The tiny Qwen3 fixture (config.json as a git file, model.safetensors as an LFS file).
    pub fn tiny_qwen3() -> Hub {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/qwen3");
        let read = |n: &str| std::fs::read(dir.join(n)).expect("fixture");
        let files = vec![
            FakeFile {
                name: "config.json".into(),
                bytes: read("config.json"),
                lfs: false,
            },
            FakeFile {
                name: "model.safetensors".into(),
                bytes: read("model.safetensors"),
                lfs: true,
            },
        ];
        Hub {
            files,
            stats: Stats::default(),
            cut_after: Mutex::new(None),
            stall_after: Mutex::new(None),
            corrupt: Mutex::new(Vec::new()),
            token: Mutex::new(None),
        }
    }

    pub fn file(&self, name: &str) -> &FakeFile {
        self.files.iter().find(|f| f.name == name).expect("file")
    }

    pub fn served(&self) -> u64 {
        self.stats.bytes_served.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }

    pub fn file_requests(&self) -> Vec<(String, u64)> {
        self.stats.file_requests.lock().unwrap().clone()
    }
}

/// A running fake hub; the server lives as long as this value.
pub struct Running {
    pub hub: Arc<Hub>,
    pub endpoint: String,
    _rt: tokio::runtime::Runtime,
}

pub fn start(hub: Hub) -> Running {
    let hub = Arc::new(hub);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let app = Router::new()
        .route("/api/models/{org}/{name}/revision/{rev}", get(api))
        .route("/api/models/{org}/{name}/tree/{rev}", get(tree))
        .route("/{org}/{name}/resolve/{rev}/{*file}", get(resolve))
        .with_state(hub.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    Running {
        hub,
        endpoint: format!("http://{addr}"),
        _rt: rt,
    }
}

/// 401 unless the request carries the token the hub demands.
fn unauthorized(hub: &Hub, headers: &HeaderMap) -> Option<Response> {
    let want = hub.token.lock().unwrap().clone()?;
    let got = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    (got != Some(format!("Bearer {want}").as_str()))
        .then(|| (StatusCode::UNAUTHORIZED, "Invalid credentials").into_response())
}

async fn tree(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, rev)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.stats.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = unauthorized(&hub, &headers) {
        return r;
    }
    if format!("{org}/{name}") != REPO || (rev != "main" && rev != COMMIT) {
        return (StatusCode::NOT_FOUND, "Repository not found").into_response();
    }
    let entries: Vec<serde_json::Value> = hub
        .files
        .iter()
        .map(|f| {
            let mut v = serde_json::json!({"type": "file", "oid": f.git_sha1(), "size": f.bytes.len(), "path": f.name});
            if f.lfs {
                v["lfs"] = serde_json::json!({"oid": f.sha256(), "size": f.bytes.len(), "pointerSize": 134});
            }
            v
        })
        .collect();
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::Value::from(entries).to_string(),
    )
        .into_response()
}

async fn api(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, rev)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.stats.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = unauthorized(&hub, &headers) {
        return r;
    }
    if format!("{org}/{name}") != REPO || (rev != "main" && rev != COMMIT) {
        return (StatusCode::NOT_FOUND, "Repository not found").into_response();
    }
    let siblings: Vec<serde_json::Value> = hub
        .files
        .iter()
        .map(|f| {
            let mut v = serde_json::json!({"rfilename": f.name, "size": f.bytes.len(), "blobId": f.git_sha1()});
            if f.lfs {
                v["lfs"] = serde_json::json!({"sha256": f.sha256(), "size": f.bytes.len(), "pointerSize": 134});
            }
            v
        })
        .collect();
    let body =
        serde_json::json!({"id": REPO, "modelId": REPO, "sha": COMMIT, "siblings": siblings});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn resolve(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, rev, file)): UrlPath<(String, String, String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    hub.stats.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = unauthorized(&hub, &headers) {
        return r;
    }
    let Some(f) = hub.files.iter().find(|f| f.name == file) else {
        return (StatusCode::NOT_FOUND, "Entry not found").into_response();
    };
    if format!("{org}/{name}") != REPO || (rev != "main" && rev != COMMIT) {
        return (StatusCode::NOT_FOUND, "Revision not found").into_response();
    }
    let len = f.bytes.len() as u64;
    // `bytes=a-` or `bytes=a-b` (b inclusive)
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| {
            let end = if b.is_empty() {
                None
            } else {
                Some(b.parse::<u64>().ok()? + 1)
            };
            Some((a.parse::<u64>().ok()?, end))
        });
    let start = range.map(|r| r.0);
    let end = range.and_then(|r| r.1).unwrap_or(len).min(len);
    if method == Method::HEAD {
        // metadata only: not a file request, no bytes, no cut or stall consumed
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(
            header::ETAG,
            HeaderValue::from_str(&format!("\"{}\"", f.etag())).unwrap(),
        );
        h.insert("x-repo-commit", HeaderValue::from_static(COMMIT));
        if f.lfs {
            h.insert(
                "x-linked-etag",
                HeaderValue::from_str(&format!("\"{}\"", f.sha256())).unwrap(),
            );
            h.insert("x-linked-size", HeaderValue::from(len));
        }
        return (StatusCode::OK, h).into_response();
    }
    hub.stats
        .file_requests
        .lock()
        .unwrap()
        .push((f.name.clone(), start.unwrap_or(0)));
    if let Some(s) = start {
        if s >= len {
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{len}"))],
            )
                .into_response();
        }
    }
    let from = start.unwrap_or(0);
    let mut bytes = f.bytes[from as usize..end.max(from) as usize].to_vec();
    if hub.corrupt.lock().unwrap().contains(&f.name) && !bytes.is_empty() {
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
    }
    let cut = {
        let mut c = hub.cut_after.lock().unwrap();
        match c.as_ref() {
            Some((n, _)) if *n == f.name => c.take().map(|(_, at)| at),
            _ => None,
        }
    };
    let stall = {
        let c = hub.stall_after.lock().unwrap();
        match c.as_ref() {
            Some((n, at, tx)) if *n == f.name => Some((*at, tx.clone())),
            _ => None,
        }
    };
    let mut resp_headers = HeaderMap::new();
    resp_headers.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(bytes.len() as u64),
    );
    resp_headers.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{}\"", f.etag())).unwrap(),
    );
    resp_headers.insert("x-repo-commit", HeaderValue::from_static(COMMIT));
    if f.lfs {
        resp_headers.insert(
            "x-linked-etag",
            HeaderValue::from_str(&format!("\"{}\"", f.sha256())).unwrap(),
        );
        resp_headers.insert("x-linked-size", HeaderValue::from(len));
    }
    resp_headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let status = if start.is_some() {
        resp_headers.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {from}-{}/{len}", end - 1)).unwrap(),
        );
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    if let Some((at, tx)) = stall {
        let n = (at.saturating_sub(from) as usize).min(bytes.len());
        hub.stats.bytes_served.fetch_add(n as u64, Ordering::SeqCst);
        let first = bytes[..n].to_vec();
        let stream = futures_util::stream::unfold(0u8, move |state| {
            let (first, tx) = (first.clone(), tx.clone());
            async move {
                if state == 0 {
                    return Some((Ok::<_, std::io::Error>(first), 1));
                }
                let _ = tx.send(());
                std::future::pending::<()>().await;
                None
            }
        });
        return (status, resp_headers, Body::from_stream(stream)).into_response();
    }
    let body = match cut {
        Some(n) => {
            let n = (n as usize).min(bytes.len());
            hub.stats.bytes_served.fetch_add(n as u64, Ordering::SeqCst);
            // Chunk, then one Pending (hyper flushes what it has), then an error that aborts
            // the connection short of Content-Length.
            let first = bytes[..n].to_vec();
            let stream = futures_util::stream::unfold(0u8, move |state| {
                let first = first.clone();
                async move {
                    match state {
                        0 => Some((Ok(first), 1)),
                        1 => {
                            tokio::task::yield_now().await;
                            Some((
                                Err(std::io::Error::new(
                                    std::io::ErrorKind::ConnectionReset,
                                    "cut by the test",
                                )),
                                2,
                            ))
                        }
                        _ => None,
                    }
                }
            });
            Body::from_stream(stream)
        }
        None => {
            hub.stats
                .bytes_served
                .fetch_add(bytes.len() as u64, Ordering::SeqCst);
            Body::from(bytes)
        }
    };
    (status, resp_headers, body).into_response()
}
