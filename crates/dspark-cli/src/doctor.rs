//! `dspark doctor`: is this machine ready? Reports OS and arch, the backends compiled in (and
//! runs a tiny matmul on each usable one), memory against the default model's RAM estimate,
//! free disk for model downloads, and the config and cache paths. Exits non-zero with the
//! reasons when a check fails. Reads the system only; changes nothing but a probe file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use candle_core::{Device, Tensor};
use clap::Args;
use dspark_hub::local::find_on_disk;
use dspark_hub::registry::{lookup, Quant, DEMO};
use dspark_hub::settings::Settings;
use dspark_hub::{paths, registry};

#[derive(Args, Debug)]
pub struct DoctorArgs {}

struct Report {
    failures: Vec<String>,
}

impl Report {
    fn ok(&self, what: &str, detail: impl std::fmt::Display) {
        println!("  ok    {what:14} {detail}");
    }
    fn info(&self, what: &str, detail: impl std::fmt::Display) {
        println!("  --    {what:14} {detail}");
    }
    fn fail(&mut self, what: &str, detail: impl std::fmt::Display) {
        println!("  FAIL  {what:14} {detail}");
        self.failures.push(format!("{what}: {detail}"));
    }
}

pub fn run(_: DoctorArgs) -> Result<()> {
    let mut r = Report {
        failures: Vec::new(),
    };
    println!("dspark {} doctor", env!("CARGO_PKG_VERSION"));
    r.info(
        "system",
        format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    );

    match matmul(&Device::Cpu) {
        Ok(()) => r.ok(
            "candle cpu",
            format!("matmul ok ({})", dspark_engine::backend::cpu::describe()),
        ),
        Err(e) => r.fail("candle cpu", format!("matmul failed: {e}")),
    }
    if dspark_engine::launch::HAS_CUDA {
        match Device::new_cuda(0)
            .map_err(anyhow::Error::from)
            .and_then(|d| matmul(&d))
        {
            Ok(()) => r.ok("candle cuda", "device 0 matmul ok"),
            Err(e) => r.fail(
                "candle cuda",
                format!("built with cuda but device 0 is unusable: {e}"),
            ),
        }
    } else {
        r.info(
            "candle cuda",
            "not compiled in (build with --features cuda)",
        );
    }
    if dspark_engine::launch::HAS_MLX {
        r.info("mlx", "compiled in");
    } else {
        r.info("mlx", "not compiled in (build with --features mlx)");
    }

    let config = paths::config_file();
    let settings = match Settings::load(&config) {
        Ok(s) => {
            let state = if config.exists() {
                "valid"
            } else {
                "absent, defaults in force"
            };
            r.ok("config", format!("{} ({state})", config.display()));
            s
        }
        Err(e) => {
            r.fail("config", e);
            Settings::default()
        }
    };

    let model = settings.model.clone().unwrap_or_else(|| DEMO.to_string());
    let target = registry::resolve(&model, registry::Mode::Baseline, None)
        .map(|x| x.target)
        .unwrap_or(model);
    let need = estimate(&target);
    let on_disk = find_on_disk(&target).is_some() || Path::new(&target).exists();
    match (memory(), need) {
        (Some(m), Some(need)) if m.total < need => r.fail(
            "memory",
            format!(
                "{} total, but the default model {target} needs about {}",
                gb(m.total),
                gb(need)
            ),
        ),
        (Some(m), need) => r.ok(
            "memory",
            format!(
                "{} total, {} available; default model {target} needs {}",
                gb(m.total),
                gb(m.available),
                need.map(gb).unwrap_or_else(|| "an unknown amount".into())
            ),
        ),
        (None, _) => r.info("memory", "could not be read on this OS"),
    }

    let hf = paths::hf_cache_dir();
    for (what, dir) in [
        ("dspark cache", paths::cache_dir()),
        ("hf cache", hf.clone()),
    ] {
        match writable(&dir) {
            Ok(()) => r.ok(what, dir.display()),
            Err(e) => r.fail(what, format!("{} is not writable: {e}", dir.display())),
        }
    }
    match free_disk(&hf) {
        Some(free) if !on_disk && need.is_some_and(|n| free < n) => r.fail(
            "disk",
            format!(
                "{} free at {}, less than the default model's {}",
                gb(free),
                hf.display(),
                gb(need.unwrap_or(0))
            ),
        ),
        Some(free) => r.ok("disk", format!("{} free at {}", gb(free), hf.display())),
        None => r.info("disk", "free space unknown"),
    }
    for d in paths::lmstudio_dirs() {
        let state = if d.is_dir() { "found" } else { "absent" };
        r.info("lm studio", format!("{} ({state})", d.display()));
    }

    if r.failures.is_empty() {
        println!("ready");
        Ok(())
    } else {
        bail!("not ready: {}", r.failures.join("; "))
    }
}

fn matmul(d: &Device) -> Result<()> {
    let a = Tensor::new(&[[1f32, 2.], [3., 4.]], d)?;
    let b = Tensor::new(&[[0f32, 1.], [1., 0.]], d)?;
    let got: Vec<Vec<f32>> = a.matmul(&b)?.to_vec2()?;
    if got != vec![vec![2., 1.], vec![4., 3.]] {
        bail!("wrong result {got:?}");
    }
    Ok(())
}

/// RAM estimate of a registry target (the variant named, else the entry's default).
fn estimate(target: &str) -> Option<u64> {
    let e = lookup(target)?;
    let quant = e
        .variants
        .iter()
        .find(|v| v.repo == target)
        .map(|v| v.quant)
        .unwrap_or(if target == DEMO {
            Quant::GgufQ4_1
        } else {
            e.variants[0].quant
        });
    Some(e.shape.ram_bytes(quant))
}

fn gb(b: u64) -> String {
    format!("{:.1} GB", b as f64 / 1e9)
}

struct Memory {
    total: u64,
    available: u64,
}

#[cfg(target_os = "linux")]
fn memory() -> Option<Memory> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some(Memory {
        total: field("MemTotal:")?,
        available: field("MemAvailable:").unwrap_or(0),
    })
}

#[cfg(target_os = "macos")]
fn memory() -> Option<Memory> {
    let mut total: u64 = 0;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: a valid NUL-terminated name and an out-buffer of the size passed.
    let rc = unsafe {
        libc::sysctlbyname(
            c"hw.memsize".as_ptr(),
            (&mut total as *mut u64).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0).then_some(Memory {
        total,
        available: 0,
    })
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn memory() -> Option<Memory> {
    None
}

/// Free bytes on the file system holding `dir` (or its nearest existing ancestor).
#[cfg(unix)]
fn free_disk(dir: &Path) -> Option<u64> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let c = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(st.f_bavail as u64 * st.f_frsize as u64)
}

#[cfg(not(unix))]
fn free_disk(_: &Path) -> Option<u64> {
    None
}

/// Creates `dir` if needed and writes and removes a probe file in it.
fn writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe: PathBuf = dir.join(format!(".dspark-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"ok")?;
    std::fs::remove_file(&probe)
}
