//! Refuses, before anything is read into memory, a model whose weights cannot fit in the
//! memory the machine has available, with the numbers: a half-loaded model that drives the
//! machine into swap or the OOM killer loses more than a clear error does.
//!
//! The estimate is of the weights as the backend will hold them: a GGUF file that is
//! dequantized costs its parameter count times the compute dtype's size, except that where
//! the exact kernel holds its block-quantized matmul weights packed, those count at most 1.25
//! bytes per element; one kept quantized costs its file size plus the packed layout's overhead
//! (at most a quarter); safetensors are held about as stored. Available memory is Linux's `MemAvailable`; where it cannot be read
//! the check passes. `DSPARK_SKIP_MEMORY_CHECK=1` turns it off, and
//! `DSPARK_MEMORY_AVAILABLE_MB` states the available memory instead of measuring it.

use std::path::Path;

use crate::backend::Backend;
use crate::model::config::TransformerConfig;
use crate::weights::LoadError;

/// Bytes the weights of `cfg`, stored at `path`, will take on `backend`, and how that was
/// estimated.
pub fn weights_estimate<B: Backend>(
    backend: &B,
    cfg: &TransformerConfig,
    path: &Path,
) -> (u64, String) {
    let file_bytes = stored_bytes(path);
    let gguf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        || (path.is_dir() && !path.join("config.json").is_file());
    if gguf && !backend.keeps_gguf_quantized() && backend.holds_gguf_exact_packed() {
        if let Some(packed) = exact_packed_bytes(path, cfg.tie_word_embeddings) {
            return (
                packed,
                format!(
                    "{:.0} M parameters dequantized to {:?}, the quantized matmul weights held \
                     packed (exact kernel); --keep-quantized would hold about {:.2} GB",
                    parameters(cfg) as f64 / 1e6,
                    backend.compute_dtype(),
                    (file_bytes + file_bytes / 4) as f64 / 1e9
                ),
            );
        }
    }
    if gguf && !backend.keeps_gguf_quantized() {
        let bytes = backend.compute_dtype().size_in_bytes() as u64;
        let n = parameters(cfg);
        (
            n * bytes,
            format!(
                "{:.0} M parameters dequantized to {:?}; --keep-quantized would hold about \
                 {:.2} GB",
                n as f64 / 1e6,
                backend.compute_dtype(),
                (file_bytes + file_bytes / 4) as f64 / 1e9
            ),
        )
    } else if gguf {
        (
            file_bytes + file_bytes / 4,
            "GGUF blocks kept quantized: file size plus the packed layout".into(),
        )
    } else {
        (file_bytes, "safetensors held as stored".into())
    }
}

/// Bytes a GGUF file's tensors take dequantized to f32 with the exact kernel's packing: a
/// tensor of a packed type at most 1.25 bytes per element (codes as bytes or nibbles, plus
/// f16 or f32 scales and mins: Q6_K's bytes with an f32 scale per 16 is the most), every other
/// one, and an untied token embedding (looked up, not multiplied), at 4. `None` when the
/// header cannot be read (the caller then assumes a dense copy).
fn exact_packed_bytes(path: &Path, tied: bool) -> Option<u64> {
    let path = if path.is_dir() {
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "gguf"))?
    } else {
        path.to_path_buf()
    };
    let mut f = std::fs::File::open(&path).ok()?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).ok()?;
    let total = content
        .tensor_infos
        .iter()
        .map(|(name, t)| {
            let n = t.shape.elem_count() as u64;
            let packed = crate::backend::cpu::qexact::exact_format(t.ggml_dtype).is_some()
                && (tied || name != "token_embd.weight");
            if packed {
                n + n / 4
            } else {
                4 * n
            }
        })
        .sum();
    Some(total)
}

/// Parameters of a decoder-only transformer of this shape (norm weights included).
pub fn parameters(cfg: &TransformerConfig) -> u64 {
    let (v, h, i) = (
        cfg.vocab_size as u64,
        cfg.hidden_size as u64,
        cfg.intermediate_size as u64,
    );
    let (q, kv) = (
        (cfg.num_heads * cfg.head_dim) as u64,
        (cfg.num_kv_heads * cfg.head_dim) as u64,
    );
    let per_layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * cfg.head_dim as u64;
    let head = if cfg.tie_word_embeddings { 0 } else { v * h };
    v * h + head + cfg.num_layers as u64 * per_layer + h
}

/// Size of the checkpoint's weight files: the file itself, or a directory's `.safetensors`
/// and `.gguf` files.
fn stored_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.path()
                .extension()
                .is_some_and(|x| x == "safetensors" || x == "gguf")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Memory available to a new allocation, in bytes: `DSPARK_MEMORY_AVAILABLE_MB` if set, else
/// `MemAvailable` from `/proc/meminfo`; `None` where neither exists.
pub fn available_bytes() -> Option<u64> {
    if let Some(mb) = std::env::var("DSPARK_MEMORY_AVAILABLE_MB")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        return Some((mb * 1e6) as u64);
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&info)
}

fn meminfo_available(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Errors when `needed` exceeds `available` (unless the check is turned off).
pub fn check(path: &Path, needed: u64, how: &str, available: Option<u64>) -> Result<(), LoadError> {
    if std::env::var("DSPARK_SKIP_MEMORY_CHECK").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    match available {
        Some(available) if needed > available => Err(LoadError::TooLarge {
            path: path.to_path_buf(),
            needed,
            available,
            how: how.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available() {
        let info = "MemTotal: 24000000 kB\nMemFree: 100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(meminfo_available(info), Some(2048 * 1024));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn refuses_with_the_numbers() {
        let p = Path::new("/models/big");
        assert!(check(p, 10, "x", Some(10)).is_ok());
        assert!(check(p, 10, "x", None).is_ok());
        let e = check(
            p,
            33_000_000_000,
            "8 B parameters dequantized to F32",
            Some(9_000_000_000),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("33.00 GB") && e.contains("9.00 GB"), "{e}");
        assert!(
            e.contains("dequantized to F32") && e.contains("DSPARK_SKIP_MEMORY_CHECK"),
            "{e}"
        );
    }

    #[test]
    fn counts_parameters_of_a_known_shape() {
        // SmolLM2-135M: 134.5 M parameters with its tied embedding
        let cfg = TransformerConfig {
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_layers: 30,
            num_heads: 9,
            num_kv_heads: 3,
            head_dim: 64,
            tie_word_embeddings: true,
            ..crate::testing::RandomSpec::tiny(8).config()
        };
        let n = parameters(&cfg) as f64 / 1e6;
        assert!((134.0..135.0).contains(&n), "{n}");
    }
}
