//! `dspark settings`: the settings `dspark serve` would run with (same flags), each value with
//! its source: flag, env (`DSPARK_<KEY>`), file, or default.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::model_arg::layers;
use crate::serve::ServeArgs;

#[derive(Args, Debug)]
pub struct SettingsArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: SettingsArgs) -> Result<()> {
    let path = a.serve.config_path();
    let l = layers(a.serve.flags(), Some(&path))?;
    let rows = l.explain();
    if a.json {
        let doc = json!({ "file": path.display().to_string(), "file_exists": path.is_file(), "settings": rows });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let state = if path.is_file() { "" } else { " (not present)" };
    println!("settings file: {}{state}", path.display());
    println!("precedence: flag > env (DSPARK_<KEY>) > file > default");
    for r in rows {
        let v = r.value.unwrap_or_else(|| "(unset)".into());
        println!("{:<22} {:<44} {}", r.key, v, r.source.as_str());
    }
    Ok(())
}
