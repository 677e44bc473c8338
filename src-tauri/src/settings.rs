//! The app's view of the hub settings file (the TOML that `dspark serve` also reads, see
//! `dspark_hub::settings`): read through the hub's parser, written back as plain TOML.

use std::path::Path;

use anyhow::{Context, Result};
use dspark_hub::settings::Settings;
use serde::{Deserialize, Serialize};

/// The settings the UI edits; `None` = not set (the defaults apply).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct AppSettings {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub drafter: Option<String>,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub thinking: Option<bool>,
    #[serde(default)]
    pub max_draft: Option<usize>,
}

impl AppSettings {
    /// Reads `path` with the hub's parser (a missing file gives defaults).
    pub fn load(path: &Path) -> Result<AppSettings> {
        let s = Settings::load(path)?;
        Ok(AppSettings {
            model: s.model,
            mode: s.mode.map(|m| m.as_str().to_string()),
            drafter: s.drafter,
            host: s.host,
            port: s.port,
            api_key: s.api_key,
            thinking: s.thinking,
            max_draft: s.max_draft,
        })
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(dspark_hub::settings::DEFAULT_PORT)
    }

    /// The TOML text of these settings (unset fields are left out).
    pub fn to_toml(&self) -> String {
        // TOML basic strings accept JSON's string escapes
        let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let mut out = String::from(
            "# dspark settings (written by the dspark app; `dspark serve` reads them too)\n",
        );
        let mut line = |k: &str, v: String| out.push_str(&format!("{k} = {v}\n"));
        if let Some(v) = &self.model {
            line("model", q(v));
        }
        if let Some(v) = &self.mode {
            line("mode", q(v));
        }
        if let Some(v) = &self.drafter {
            line("drafter", q(v));
        }
        if let Some(v) = &self.host {
            line("host", q(v));
        }
        if let Some(v) = self.port {
            line("port", v.to_string());
        }
        if let Some(v) = &self.api_key {
            line("api_key", q(v));
        }
        if let Some(v) = self.thinking {
            line("thinking", v.to_string());
        }
        if let Some(v) = self.max_draft {
            line("max_draft", v.to_string());
        }
        out
    }

    /// Validates with the hub's parser, then writes `path` (creating its directory).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = self.to_toml();
        Settings::parse(&text, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_hub_parser() {
        let dir = std::env::temp_dir().join(format!("dspark-app-settings-{}", std::process::id()));
        let path = dir.join("config.toml");
        let s = AppSettings {
            model: Some("demo".into()),
            mode: Some("draft".into()),
            port: Some(0),
            api_key: Some("k\"ey".into()),
            thinking: Some(false),
            max_draft: Some(4),
            ..Default::default()
        };
        s.save(&path).unwrap();
        assert_eq!(AppSettings::load(&path).unwrap(), s);
        let _ = std::fs::remove_dir_all(dir);
    }
}
