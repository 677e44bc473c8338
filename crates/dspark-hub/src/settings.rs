//! User settings: a TOML file in the platform config dir (`DSPARK_CONFIG` overrides), merged
//! under command-line flags, and a [`SettingsWatcher`] that re-reads the file when it changes.
//! An invalid file is reported with its line and column and never replaces the settings in force.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, RwLock};

use notify::{RecursiveMode, Watcher};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::registry::Mode;

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 8080;

/// Everything the file may set; `None` means "not set here". Keys are also read from the
/// environment as `DSPARK_<KEY>` (see [`crate::layers`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub model: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_mode",
        serialize_with = "ser_mode",
        skip_serializing_if = "Option::is_none"
    )]
    pub mode: Option<Mode>,
    pub drafter: Option<String>,
    /// The id `/v1/models` reports (default: the registry id, repo id or file name).
    pub served_model_name: Option<String>,
    /// auto, candle, mlx or cuda.
    #[serde(default, deserialize_with = "de_backend")]
    pub backend: Option<String>,
    /// auto, cpu, cuda, cuda:N (candle); auto, cpu, gpu (MLX).
    pub device: Option<String>,
    /// f32, f16 or bf16.
    #[serde(default, deserialize_with = "de_dtype")]
    pub dtype: Option<String>,
    pub keep_quantized: Option<bool>,
    /// Matmul arithmetic on the CPU: f32 (the default) or bf16 (AMX tiles where the CPU has
    /// AMX-BF16: activations rounded to bf16 per matmul, products summed in f32).
    #[serde(default, deserialize_with = "de_matmul")]
    pub matmul: Option<String>,
    pub max_draft: Option<usize>,
    pub confidence_threshold: Option<f32>,
    /// Ids a DFlash/DSpark drafter's head scores, its most frequent first, plus each prompt's
    /// (0 = the whole vocabulary; unset: what the drafter's config or ranking says).
    pub draft_vocab: Option<usize>,
    /// Prompt lookup after each round's first draft, for DFlash/DSpark (unset: on where
    /// the backend's rows are batch-invariant: our CPU and CUDA kernels).
    pub lookup: Option<bool>,
    /// The prefix cache on or off.
    pub prefix_cache: Option<bool>,
    pub prefix_cache_slots: Option<usize>,
    /// RAM budget of the prefix cache in MB (0 = unlimited).
    pub prefix_cache_ram_mb: Option<usize>,
    pub prefix_cache_dir: Option<PathBuf>,
    /// Requests that may wait while one generates.
    pub queue: Option<usize>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub api_key: Option<String>,
    /// Default of the chat template's `enable_thinking`.
    pub thinking: Option<bool>,
}

fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
    let s = String::deserialize(d)?;
    Mode::parse(&s).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown mode `{s}` (baseline, dspark, dflash, draft)"
        ))
    })
}

fn ser_mode<S: Serializer>(m: &Option<Mode>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_str(m.as_str()),
        None => s.serialize_none(),
    }
}

fn de_backend<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    match dspark_engine::launch::BackendKind::parse(&s) {
        Some(_) => Ok(Some(s)),
        None => Err(serde::de::Error::custom(format!(
            "unknown backend `{s}` (auto, candle, mlx, cuda)"
        ))),
    }
}

fn de_matmul<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    match dspark_engine::launch::Matmul::parse(&s) {
        Some(_) => Ok(Some(s)),
        None => Err(serde::de::Error::custom(format!(
            "unknown matmul `{s}` (f32, bf16)"
        ))),
    }
}

fn de_dtype<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    match dspark_engine::backend::DType::parse(&s) {
        Some(_) => Ok(Some(s)),
        None => Err(serde::de::Error::custom(format!(
            "unknown dtype `{s}` (f32, f16, bf16)"
        ))),
    }
}

/// Keys a running server applies at once; any other change waits for a restart.
pub const LIVE_KEYS: &[&str] = &[
    "api_key",
    "thinking",
    "max_draft",
    "confidence_threshold",
    "lookup",
    "prefix_cache_slots",
    "prefix_cache_ram_mb",
];

/// Why a settings file could not be used.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("watching {path}: {message}")]
    Watch { path: PathBuf, message: String },
}

impl Settings {
    /// Parses TOML text; `path` only labels errors.
    pub fn parse(text: &str, path: &Path) -> Result<Settings, SettingsError> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
            SettingsError::Parse {
                path: path.into(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }

    /// Reads `path`; a missing file means default settings.
    pub fn load(path: &Path) -> Result<Settings, SettingsError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Settings::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            Err(e) => Err(SettingsError::Io {
                path: path.into(),
                message: e.to_string(),
            }),
        }
    }

    pub fn host(&self) -> &str {
        self.host.as_deref().unwrap_or(DEFAULT_HOST)
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

    /// Keys whose values differ between `self` and `new` and only take effect after a
    /// restart (the loaded models, the backend and the listening socket); the rest of the
    /// differences ([`LIVE_KEYS`]) can be applied live.
    pub fn restart_needed(&self, new: &Settings) -> Vec<&'static str> {
        let (a, b) = (self.values(), new.values());
        crate::layers::KEYS
            .iter()
            .copied()
            .filter(|k| !LIVE_KEYS.contains(k) && a.get(*k) != b.get(*k))
            .collect()
    }

    /// The keys set here as a TOML table.
    pub fn to_table(&self) -> toml::Table {
        match toml::Value::try_from(self) {
            Ok(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        }
    }

    /// Settings from a TOML table (the checks of [`Settings::parse`], without positions).
    pub fn deserialize_table(t: toml::Table) -> Result<Settings, String> {
        toml::Value::Table(t)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().trim().to_string())
    }

    /// The keys set here, with their values as TOML text.
    pub fn values(&self) -> std::collections::BTreeMap<String, String> {
        self.to_table()
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect()
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// What the watcher saw.
#[derive(Clone, Debug, PartialEq)]
pub enum SettingsEvent {
    /// The file changed and parsed; `restart_needed` lists fields that apply only after a restart.
    Changed {
        settings: Box<Settings>,
        restart_needed: Vec<&'static str>,
    },
    /// The file changed but is invalid; the previous settings stay in force.
    Invalid(SettingsError),
}

/// Live view of the settings file.
pub struct SettingsWatcher {
    current: Arc<RwLock<Settings>>,
    path: PathBuf,
    _watcher: notify::RecommendedWatcher,
}

impl SettingsWatcher {
    /// Loads `path` and watches it; `on_event` runs on the watcher's thread after each reload.
    /// The initial load must succeed. An empty file is taken as a write in progress and skipped
    /// (editors that truncate before writing would otherwise flash the defaults in).
    pub fn start<F>(path: &Path, on_event: F) -> Result<SettingsWatcher, SettingsError>
    where
        F: Fn(&SettingsEvent) + Send + 'static,
    {
        let initial = Settings::load(path)?;
        let current = Arc::new(RwLock::new(initial));
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let watch_err = |e: &dyn std::fmt::Display| SettingsError::Watch {
            path: path.into(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(|e| watch_err(&e))?;
        let name = path.file_name().map(|n| n.to_os_string());
        let (cur, file) = (current.clone(), path.to_path_buf());
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let Ok(ev) = res else { return };
            if ev.kind.is_access()
                || !ev
                    .paths
                    .iter()
                    .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
            {
                return;
            }
            let text = match std::fs::read_to_string(&file) {
                Ok(t) if t.trim().is_empty() => return,
                Ok(t) => t,
                Err(_) => return, // removed or mid-rename: keep what is in force
            };
            let event = match Settings::parse(&text, &file) {
                Ok(new) => {
                    let mut guard = cur.write().unwrap_or_else(|p| p.into_inner());
                    if *guard == new {
                        return;
                    }
                    let restart_needed = guard.restart_needed(&new);
                    *guard = new.clone();
                    drop(guard);
                    tracing::info!("settings reloaded from {}", file.display());
                    SettingsEvent::Changed {
                        settings: Box::new(new),
                        restart_needed,
                    }
                }
                Err(e) => {
                    tracing::error!("{e}; keeping the previous settings");
                    SettingsEvent::Invalid(e)
                }
            };
            on_event(&event);
        })
        .map_err(|e| watch_err(&e))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| watch_err(&e))?;
        Ok(SettingsWatcher {
            current,
            path: path.into(),
            _watcher: watcher,
        })
    }

    /// Like [`SettingsWatcher::start`], delivering events on a channel.
    pub fn with_channel(
        path: &Path,
    ) -> Result<(SettingsWatcher, mpsc::Receiver<SettingsEvent>), SettingsError> {
        let (tx, rx) = mpsc::channel();
        let w = SettingsWatcher::start(path, move |e| {
            let _ = tx.send(e.clone());
        })?;
        Ok((w, rx))
    }

    /// The settings in force now.
    pub fn current(&self) -> Settings {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_fields() {
        let s = Settings::parse(
            "model = \"qwen3-8b\"\nmode = \"dspark\"\ndrafter = \"/d\"\nhost = \"0.0.0.0\"\nport = 9000\n\
             api_key = \"k\"\nthinking = false\nmax_draft = 3\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(s.mode, Some(Mode::DSpark));
        assert_eq!(
            (s.host(), s.port(), s.thinking, s.max_draft),
            ("0.0.0.0", 9000, Some(false), Some(3))
        );
        assert_eq!(
            Settings::parse("", Path::new("c")).unwrap(),
            Settings::default()
        );
        assert_eq!(Settings::default().port(), DEFAULT_PORT);
    }

    #[test]
    fn parse_errors_have_line_and_column() {
        let cases = [
            ("model = \"a\"\nport = \"x\"\n", 2, 8, "expected u16"),
            ("model = \"a\"\n\nmode = \"fast\"\n", 3, 8, "unknown mode"),
            ("host = \"h\"\ncolour = 1\n", 2, 1, "colour"),
            ("port = 8080\nhost = [\n", 3, 1, "expected"),
        ];
        for (text, line, column, needle) in cases {
            match Settings::parse(text, Path::new("c.toml")) {
                Err(SettingsError::Parse {
                    line: l,
                    column: c,
                    message,
                    ..
                }) => {
                    assert_eq!((l, c), (line, column), "{text:?}: {message}");
                    assert!(message.contains(needle), "{message}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_non_live_keys_need_a_restart() {
        let a = Settings::parse("port = 1\napi_key = \"a\"\n", Path::new("c")).unwrap();
        let b = Settings::parse(
            "port = 2\napi_key = \"b\"\nmode = \"draft\"\nmax_draft = 3\nbackend = \"candle\"\n",
            Path::new("c"),
        )
        .unwrap();
        assert_eq!(a.restart_needed(&b), vec!["mode", "backend", "port"]);
        assert!(Settings::parse("backend = \"tpu\"\n", Path::new("c")).is_err());
        assert!(Settings::parse("dtype = \"f8\"\n", Path::new("c")).is_err());
        let e = Settings::parse("matmul = \"f16\"\n", Path::new("c")).unwrap_err();
        assert!(
            e.to_string().contains("unknown matmul `f16` (f32, bf16)"),
            "{e}"
        );
        let ok = Settings::parse("matmul = \"bf16\"\n", Path::new("c")).unwrap();
        assert_eq!(ok.matmul.as_deref(), Some("bf16"));
        let dv = Settings::parse("draft_vocab = 16384\n", Path::new("c")).unwrap();
        assert_eq!(dv.draft_vocab, Some(16384));
        let e = Settings::parse("draft_vocab = -1\n", Path::new("c")).unwrap_err();
        assert!(
            e.to_string().contains("c:1:15") && e.to_string().contains("usize"),
            "{e}"
        );
        let env = crate::layers::env_layer(|k| (k == "DSPARK_DRAFT_VOCAB").then(|| "0".into()));
        assert_eq!(env.unwrap().draft_vocab, Some(0));
    }
}
