//! The app's view of the hub settings file (the TOML that `dspark serve` also reads, see
//! `dspark_hub::settings`): read through the hub's parser, written back with `toml_edit` so
//! that keys the app does not edit, comments and layout survive.

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

    /// `text` (the file as it is) with this struct's keys set or removed; every other key,
    /// comment and the layout stay as they were (`toml_edit`).
    pub fn edit_toml(&self, text: &str) -> Result<String> {
        use toml_edit::{value, DocumentMut, Item};
        let mut doc: DocumentMut = text
            .parse()
            .context("the settings file is not valid TOML")?;
        let mut put = |k: &str, v: Option<Item>| match v {
            Some(v) => doc[k] = v,
            None => {
                doc.remove(k);
            }
        };
        put("model", self.model.as_deref().map(value));
        put("mode", self.mode.as_deref().map(value));
        put("drafter", self.drafter.as_deref().map(value));
        put("host", self.host.as_deref().map(value));
        put("port", self.port.map(|p| value(i64::from(p))));
        put("api_key", self.api_key.as_deref().map(value));
        put("thinking", self.thinking.map(value));
        put("max_draft", self.max_draft.map(|n| value(n as i64)));
        Ok(doc.to_string())
    }

    /// Validates with the hub's parser, then replaces `path` atomically (creating its
    /// directory), keeping keys this struct does not know.
    pub fn save(&self, path: &Path) -> Result<()> {
        let old = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                "# dspark settings (the app and `dspark serve` read them; `dspark settings` explains)\n".into()
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let text = self.edit_toml(&old)?;
        Settings::parse(&text, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
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
        std::fs::create_dir_all(&dir).unwrap();
        let kept = "# mine\nconfidence_threshold = 0.5 # tuned\nprefix_cache_slots = 3\n";
        std::fs::write(&path, kept).unwrap();
        s.save(&path).unwrap();
        assert_eq!(AppSettings::load(&path).unwrap(), s);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(kept), "{text}");
        let hub = Settings::load(&path).unwrap();
        assert_eq!(
            (hub.confidence_threshold, hub.prefix_cache_slots),
            (Some(0.5), Some(3))
        );
        // unsetting removes the key and nothing else
        AppSettings {
            api_key: None,
            ..s.clone()
        }
        .save(&path)
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("api_key") && text.contains("# tuned"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
