//! `dspark models`: the registry as a table, each target variant with its RAM estimate (weights
//! for its quantization plus KV cache at the default context, from the on-disk `config.json`
//! when present, else the shape embedded in the registry) and where it already is on disk.

use anyhow::Result;
use clap::Args;
use dspark_hub::local::{find_on_disk, OnDisk};
use dspark_hub::registry::{Entry, Shape, DEFAULT_CONTEXT, REGISTRY};

#[derive(Args, Debug)]
pub struct ModelsArgs {}

/// The shape of `repo`: its on-disk config when readable, else the registry's.
pub fn shape_of(entry: &Entry, disk: Option<&OnDisk>) -> Shape {
    disk.and_then(|d| std::fs::read(d.path().join("config.json")).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| Shape::from_config_json(&v))
        .unwrap_or(entry.shape)
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

fn mark(d: Option<&OnDisk>) -> String {
    match d {
        None => String::new(),
        Some(OnDisk::HfCache(p)) => format!("on disk (HF cache: {})", p.display()),
        Some(OnDisk::LmStudio(p)) => format!("on disk (LM Studio: {})", p.display()),
        Some(OnDisk::Demo(p)) => format!("on disk ({})", p.display()),
    }
}

pub fn run(_: ModelsArgs) -> Result<()> {
    println!("RAM = weights + KV cache at {DEFAULT_CONTEXT} tokens (drafter not included)\n");
    for e in REGISTRY {
        let note = if e.shape_assumed {
            " (shape assumed until config.json is on disk)"
        } else {
            ""
        };
        println!(
            "{}  {:.1}B params, {} layers{note}",
            e.id,
            e.shape.params() as f64 / 1e9,
            e.shape.layers
        );
        if let Some(why) = e.unavailable {
            println!("  unavailable: {why}");
        }
        for (i, v) in e.variants.iter().enumerate() {
            let disk = find_on_disk(v.repo);
            let ram = shape_of(e, disk.as_ref()).ram_bytes(v.quant);
            let role = if i == 0 { "target" } else { "" };
            let line = format!(
                "  {role:7} {:40} {:5} {:>8}  {}",
                v.repo,
                v.quant.label(),
                gb(ram),
                mark(disk.as_ref())
            );
            println!("{}", line.trim_end());
        }
        for (role, d) in [
            ("dspark", e.dspark),
            ("dflash", e.dflash),
            ("draft", e.draft),
        ] {
            match d {
                Some(d) if e.variants.iter().any(|v| v.repo == d) => {
                    println!("  {role:7} {d} (the target itself, kept quantized)")
                }
                Some(d) => println!(
                    "{}",
                    format!("  {role:7} {d:40} {}", mark(find_on_disk(d).as_ref())).trim_end()
                ),
                None => {}
            }
        }
        println!();
    }
    Ok(())
}
