//! User settings: a TOML file in the platform config dir (`DSPARK_CONFIG` overrides), merged
//! under command-line flags, and a [`SettingsWatcher`] that re-reads the file when it changes.
//! An invalid file is reported with its line and column and never replaces the settings in force.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, RwLock};

use notify::{RecursiveMode, Watcher};
use serde::{Deserialize, Deserializer};

use crate::registry::Mode;

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 8080;

/// Everything the file may set; `None` means "not set here".
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub model: Option<String>,
    #[serde(default, deserialize_with = "de_mode")]
    pub mode: Option<Mode>,
    pub drafter: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub api_key: Option<String>,
    /// Default of the chat template's `enable_thinking`.
    pub thinking: Option<bool>,
    pub max_draft: Option<usize>,
}

fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
    let s = String::deserialize(d)?;
    Mode::parse(&s).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown mode `{s}` (baseline, dspark, dflash, draft)"
        ))
    })
}

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

    /// These settings with every field that `cli` sets taken from `cli` (flags beat the file).
    pub fn merge_cli(&self, cli: &Settings) -> Settings {
        fn pick<T: Clone>(cli: &Option<T>, file: &Option<T>) -> Option<T> {
            cli.clone().or_else(|| file.clone())
        }
        Settings {
            model: pick(&cli.model, &self.model),
            mode: pick(&cli.mode, &self.mode),
            drafter: pick(&cli.drafter, &self.drafter),
            host: pick(&cli.host, &self.host),
            port: pick(&cli.port, &self.port),
            api_key: pick(&cli.api_key, &self.api_key),
            thinking: pick(&cli.thinking, &self.thinking),
            max_draft: pick(&cli.max_draft, &self.max_draft),
        }
    }

    pub fn host(&self) -> &str {
        self.host.as_deref().unwrap_or(DEFAULT_HOST)
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

    /// Fields that differ between `self` and `new` and only take effect after a restart
    /// (the loaded models and the listening socket); the others can be applied live.
    pub fn restart_needed(&self, new: &Settings) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.model != new.model {
            v.push("model");
        }
        if self.mode != new.mode {
            v.push("mode");
        }
        if self.drafter != new.drafter {
            v.push("drafter");
        }
        if self.host != new.host {
            v.push("host");
        }
        if self.port != new.port {
            v.push("port");
        }
        v
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingsEvent {
    /// The file changed and parsed; `restart_needed` lists fields that apply only after a restart.
    Changed {
        settings: Settings,
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
                    if !restart_needed.is_empty() {
                        tracing::warn!(
                            "changed settings take effect after a restart: {}",
                            restart_needed.join(", ")
                        );
                    }
                    SettingsEvent::Changed {
                        settings: new,
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
    fn cli_beats_file_beats_defaults() {
        let file = Settings {
            model: Some("f".into()),
            port: Some(1),
            thinking: Some(true),
            ..Default::default()
        };
        let cli = Settings {
            port: Some(2),
            mode: Some(Mode::Baseline),
            ..Default::default()
        };
        let m = file.merge_cli(&cli);
        assert_eq!(m.model.as_deref(), Some("f"));
        assert_eq!(m.port(), 2);
        assert_eq!(m.mode, Some(Mode::Baseline));
        assert_eq!(m.thinking, Some(true));
        assert_eq!(m.host(), DEFAULT_HOST);
        assert_eq!(file.restart_needed(&m), vec!["mode", "port"]);
    }
}
