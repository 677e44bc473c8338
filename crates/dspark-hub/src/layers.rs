//! Settings precedence: command-line flags, then the environment (`DSPARK_<KEY>`), then the
//! settings file, then the defaults. [`Layers::merged`] is what runs; [`Layers::explain`]
//! says where each value came from (`dspark settings`).

use std::path::Path;

use serde::Serialize;

use crate::settings::{Settings, SettingsError};

/// Every settings key, in the order `dspark settings` prints them.
pub const KEYS: &[&str] = &[
    "model",
    "mode",
    "drafter",
    "served_model_name",
    "backend",
    "device",
    "dtype",
    "keep_quantized",
    "matmul",
    "max_draft",
    "confidence_threshold",
    "draft_vocab",
    "lookup",
    "prefix_cache",
    "prefix_cache_slots",
    "prefix_cache_ram_mb",
    "prefix_cache_dir",
    "queue",
    "host",
    "port",
    "api_key",
    "thinking",
];

/// Where a merged value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Env => "env",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

/// The defaults under everything else (fields left `None` have no fixed default: the mode's
/// draft policy, the device's dtype, no drafter override, no key).
pub fn defaults() -> Settings {
    Settings {
        model: Some(crate::registry::DEMO.into()),
        mode: Some(crate::registry::Mode::Baseline),
        backend: Some("auto".into()),
        device: Some("auto".into()),
        // GGUF blocks are dequantized unless asked (`--keep-quantized`): the packed kernels round
        // activations to 8 bits as llama.cpp does, and on the demo's Q4_1 that turns 'What is
        // the capital of France?' into a degenerate loop (llama.cpp's own answer starts the
        // same way) where the dequantized weights answer 'Paris' as transformers does. MLX
        // affine weights stay packed either way (f32 activations).
        keep_quantized: Some(false),
        // bf16 matmuls are opt-in: they round activations to bf16, so greedy tokens may part
        // from the f32 reference's (transformers') at near-ties
        matmul: Some("f32".into()),
        confidence_threshold: Some(0.0),
        prefix_cache: Some(true),
        prefix_cache_slots: Some(8),
        prefix_cache_ram_mb: Some(2048),
        queue: Some(8),
        host: Some(crate::settings::DEFAULT_HOST.into()),
        port: Some(crate::settings::DEFAULT_PORT),
        thinking: Some(true),
        ..Settings::default()
    }
}

/// The four layers, highest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layers {
    pub flags: Settings,
    pub env: Settings,
    pub file: Settings,
}

/// One line of [`Layers::explain`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explained {
    pub key: &'static str,
    /// TOML text of the value; `None` = unset.
    pub value: Option<String>,
    pub source: Source,
}

impl Layers {
    /// Flags over the environment over `file` (read from disk; missing = empty; `None` =
    /// no file layer).
    /// Flags are checked as the file's values are (`--dtype f8` fails here).
    pub fn load(flags: Settings, file: Option<&Path>) -> Result<Layers, SettingsError> {
        let flags =
            Settings::deserialize_table(flags.to_table()).map_err(|message| SettingsError::Io {
                path: "command line".into(),
                message,
            })?;
        Ok(Layers {
            flags,
            env: env_layer(|k| std::env::var(k).ok())?,
            file: file.map(Settings::load).transpose()?.unwrap_or_default(),
        })
    }

    /// The settings in force.
    pub fn merged(&self) -> Settings {
        let mut t = toml::Table::new();
        for layer in [&defaults(), &self.file, &self.env, &self.flags] {
            t.extend(layer.to_table());
        }
        Settings::deserialize_table(t).unwrap_or_default()
    }

    /// Each key's merged value and its source.
    pub fn explain(&self) -> Vec<Explained> {
        let layers = [
            (Source::Flag, self.flags.values()),
            (Source::Env, self.env.values()),
            (Source::File, self.file.values()),
            (Source::Default, defaults().values()),
        ];
        KEYS.iter()
            .map(|&key| {
                let hit = layers
                    .iter()
                    .find_map(|(src, vals)| vals.get(key).map(|v| (*src, v.clone())));
                let (source, value) = match hit {
                    Some((s, v)) => (s, Some(v)),
                    None => (Source::Default, None),
                };
                let value = match key {
                    "api_key" => value.map(|_| "\"…\" (hidden)".to_string()),
                    _ => value,
                };
                Explained { key, value, source }
            })
            .collect()
    }
}

/// The environment layer: `DSPARK_<KEY>` for every key, read through `get`. A value is taken
/// as TOML when it parses as the key's type (`8080`, `true`), else as a string.
pub fn env_layer(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
    let mut table = toml::Table::new();
    for key in KEYS {
        let var = format!("DSPARK_{}", key.to_uppercase());
        let Some(raw) = get(&var) else { continue };
        let typed = toml::from_str::<toml::Table>(&format!("{key} = {raw}"))
            .ok()
            .filter(|t| Settings::deserialize_table(t.clone()).is_ok());
        let table_one = typed.unwrap_or_else(|| {
            let mut t = toml::Table::new();
            t.insert(key.to_string(), toml::Value::String(raw.clone()));
            t
        });
        if let Err(e) = Settings::deserialize_table(table_one.clone()) {
            return Err(SettingsError::Io {
                path: var.into(),
                message: e,
            });
        }
        table.extend(table_one);
    }
    Settings::deserialize_table(table).map_err(|message| SettingsError::Io {
        path: "environment".into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Mode;

    #[test]
    fn flags_beat_env_beat_file_beat_defaults() {
        let l = Layers {
            flags: Settings {
                port: Some(2),
                mode: Some(Mode::Draft),
                ..Default::default()
            },
            env: env_layer(|k| match k {
                "DSPARK_PORT" => Some("3".into()),
                "DSPARK_API_KEY" => Some("123".into()),
                "DSPARK_MODEL" => Some("qwen3-8b".into()),
                _ => None,
            })
            .unwrap(),
            file: Settings::parse(
                "model = \"f\"\nport = 4\nthinking = false\n",
                Path::new("c"),
            )
            .unwrap(),
        };
        let m = l.merged();
        assert_eq!(m.port, Some(2));
        assert_eq!(m.mode, Some(Mode::Draft));
        assert_eq!(m.model.as_deref(), Some("qwen3-8b"));
        assert_eq!(m.api_key.as_deref(), Some("123"));
        assert_eq!(m.thinking, Some(false));
        assert_eq!(m.queue, Some(8));
        assert_eq!(m.host.as_deref(), Some("127.0.0.1"));
        let src: Vec<(&str, Source)> = l.explain().iter().map(|e| (e.key, e.source)).collect();
        for (k, s) in [
            ("port", Source::Flag),
            ("model", Source::Env),
            ("thinking", Source::File),
            ("queue", Source::Default),
        ] {
            assert!(src.contains(&(k, s)), "{k}: {src:?}");
        }
        let key = l
            .explain()
            .into_iter()
            .find(|e| e.key == "api_key")
            .unwrap();
        assert!(!key.value.unwrap().contains("123"));
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let e = env_layer(|k| (k == "DSPARK_PORT").then(|| "eighty".into())).unwrap_err();
        assert!(e.to_string().contains("DSPARK_PORT"), "{e}");
        let e = env_layer(|k| (k == "DSPARK_MODE").then(|| "warp".into())).unwrap_err();
        assert!(e.to_string().contains("unknown mode"), "{e}");
    }
}
