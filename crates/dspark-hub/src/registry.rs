//! The built-in model registry: targets with their DSpark, DFlash and draft-model drafters, the
//! known shapes used for RAM estimates, and `resolve` (reference §7), which picks a drafter for
//! a target. Pure data and string matching: no file system, no network.

use crate::HubError;

/// Decoding mode, as far as drafter resolution cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Baseline,
    DSpark,
    DFlash,
    Draft,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "baseline" => Some(Mode::Baseline),
            "dspark" => Some(Mode::DSpark),
            "dflash" => Some(Mode::DFlash),
            "draft" => Some(Mode::Draft),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::DSpark => "dspark",
            Mode::DFlash => "dflash",
            Mode::Draft => "draft",
        }
    }
}

/// Weight storage format of one published variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// MLX affine 4-bit, group size 64 (bf16 scale and bias per group).
    Mlx4,
    /// MLX affine 8-bit, group size 64.
    Mlx8,
    Bf16,
    /// GGUF Q4_1 (32 weights per block, f16 scale and min).
    GgufQ4_1,
}

impl Quant {
    /// Average bits per weight, including per-group scales.
    pub fn bits_per_weight(self) -> f64 {
        match self {
            Quant::Mlx4 => 4.0 + 32.0 / 64.0,
            Quant::Mlx8 => 8.0 + 32.0 / 64.0,
            Quant::Bf16 => 16.0,
            Quant::GgufQ4_1 => 5.0,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Quant::Mlx4 => "4bit",
            Quant::Mlx8 => "8bit",
            Quant::Bf16 => "bf16",
            Quant::GgufQ4_1 => "q4_1",
        }
    }
}

pub use crate::shape::{Hybrid, Shape, DEFAULT_CONTEXT};

/// One published weight variant of a target.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub repo: &'static str,
    pub quant: Quant,
}

/// A registry entry: one target model and its drafters.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Lower-case match key, e.g. `qwen3-8b`.
    pub id: &'static str,
    /// Published variants; the first is the default target.
    pub variants: &'static [Variant],
    pub dspark: Option<&'static str>,
    pub dflash: Option<&'static str>,
    /// Small model for draft-model mode (same tokenizer).
    pub draft: Option<&'static str>,
    pub shape: Shape,
    /// True when `shape` is an assumption rather than the published config.
    pub shape_assumed: bool,
    /// Why the engine cannot run this model yet (`None` = it can).
    pub unavailable: Option<&'static str>,
}

impl Entry {
    pub fn default_target(&self) -> &'static str {
        self.variants[0].repo
    }

    pub fn drafter(&self, mode: Mode) -> Option<&'static str> {
        match mode {
            Mode::Baseline => None,
            Mode::DSpark => self.dspark,
            Mode::DFlash => self.dflash,
            Mode::Draft => self.draft,
        }
    }
}

const QWEN3_4B: Shape = Shape {
    layers: 36,
    hidden: 2560,
    ffn: 9728,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    vocab: 151936,
    tied: true,
    hybrid: None,
};
const QWEN3_8B: Shape = Shape {
    layers: 36,
    hidden: 4096,
    ffn: 12288,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    vocab: 151936,
    tied: false,
    hybrid: None,
};
const QWEN3_14B: Shape = Shape {
    layers: 40,
    hidden: 5120,
    ffn: 17408,
    heads: 40,
    kv_heads: 8,
    head_dim: 128,
    vocab: 151936,
    tied: false,
    hybrid: None,
};
/// Gemma 4 12B's published text config: 48 layers, every sixth (5, 11, .., 47) full attention
/// with one kv head of 512 and values taken from the keys; the others slide over 1024 positions
/// with 8 kv heads of 256; tied 262,144-entry table (11.9B parameters).
const GEMMA_12B: Shape = Shape {
    layers: 48,
    hidden: 3840,
    ffn: 15360,
    heads: 16,
    kv_heads: 8,
    head_dim: 256,
    vocab: 262144,
    tied: true,
    hybrid: Some(Hybrid {
        global_layers: 8,
        window: 1024,
        global_head_dim: 512,
        global_kv_heads: 1,
        k_eq_v: true,
    }),
};
const SMOLLM2_135M: Shape = Shape {
    layers: 30,
    hidden: 576,
    ffn: 1536,
    heads: 9,
    kv_heads: 3,
    head_dim: 64,
    vocab: 49152,
    tied: true,
    hybrid: None,
};

const QWEN3_DRAFT: &str = "mlx-community/Qwen3-0.6B-4bit";

macro_rules! variants {
    ($($repo:literal => $q:ident),* $(,)?) => { &[$(Variant { repo: $repo, quant: Quant::$q }),*] };
}

/// Why Gemma 4 entries cannot be loaded yet.
const GEMMA_UNAVAILABLE: &str =
    "Gemma 4 12B is not enabled yet: the engine's gemma4 model (its `gemma4_unified` class \
     included) matches transformers on tiny random checkpoints and loads and runs a random \
     checkpoint of the published 12B shape on CUDA, but no real 12B checkpoint has been loaded \
     to verify its weights and chat template; its RAM estimate uses the published config";

/// The name under which the demo model is requested.
pub const DEMO: &str = "demo";

/// All entries. `demo` is SmolLM2-135M-Instruct whose draft-model drafter is itself, kept
/// quantized; its DFlash and DSpark drafters are the trained ones shipped in `assets/drafters/`.
pub const REGISTRY: &[Entry] = &[
    Entry {
        id: "qwen3-4b",
        variants: variants!("mlx-community/Qwen3-4B-8bit" => Mlx8, "mlx-community/Qwen3-4B-4bit" => Mlx4,
                            "mlx-community/Qwen3-4B-bf16" => Bf16),
        dspark: Some("deepseek-ai/dspark_qwen3_4b_block7"),
        dflash: Some("z-lab/Qwen3-4B-DFlash-b16"),
        draft: Some(QWEN3_DRAFT),
        shape: QWEN3_4B,
        shape_assumed: false,
        unavailable: None,
    },
    Entry {
        id: "qwen3-8b",
        variants: variants!("mlx-community/Qwen3-8B-8bit" => Mlx8, "mlx-community/Qwen3-8B-4bit" => Mlx4,
                            "mlx-community/Qwen3-8B-bf16" => Bf16),
        dspark: Some("deepseek-ai/dspark_qwen3_8b_block7"),
        dflash: Some("z-lab/Qwen3-8B-DFlash-b16"),
        draft: Some(QWEN3_DRAFT),
        shape: QWEN3_8B,
        shape_assumed: false,
        unavailable: None,
    },
    Entry {
        id: "qwen3-14b",
        variants: variants!("mlx-community/Qwen3-14B-8bit" => Mlx8, "mlx-community/Qwen3-14B-4bit" => Mlx4,
                            "mlx-community/Qwen3-14B-bf16" => Bf16),
        dspark: Some("deepseek-ai/dspark_qwen3_14b_block7"),
        dflash: None,
        draft: Some(QWEN3_DRAFT),
        shape: QWEN3_14B,
        shape_assumed: false,
        unavailable: None,
    },
    Entry {
        id: "gemma-4-12b",
        variants: variants!("mlx-community/gemma-4-12B-it-8bit" => Mlx8,
                            "mlx-community/gemma-4-12B-it-4bit" => Mlx4,
                            "mlx-community/gemma-4-12B-it-bf16" => Bf16),
        dspark: Some("deepseek-ai/dspark_gemma4_12b_block7"),
        dflash: Some("z-lab/gemma4-12B-it-DFlash"),
        draft: None,
        shape: GEMMA_12B,
        shape_assumed: false,
        unavailable: Some(GEMMA_UNAVAILABLE),
    },
    Entry {
        id: "smollm2-135m",
        variants: variants!("demo" => GgufQ4_1),
        dspark: Some(crate::demo::DEMO_DSPARK),
        dflash: Some(crate::demo::DEMO_DFLASH),
        draft: Some(DEMO),
        shape: SMOLLM2_135M,
        shape_assumed: false,
        unavailable: None,
    },
];

/// Target used when no model is given (reference: gemma-4-12B-it-8bit).
pub const DEFAULT_TARGET: &str = "mlx-community/gemma-4-12B-it-8bit";

/// Legacy family aliases.
const FAMILIES: &[(&str, &str)] = &[
    ("qwen3", "mlx-community/Qwen3-4B-8bit"),
    ("gemma4", "mlx-community/gemma-4-12B-it-8bit"),
];

/// The entry whose id matches `target`'s basename, ignoring organisation, case and
/// quantisation suffixes; longer ids are tried first so `qwen3-14b` never falls to `qwen3-4b`.
pub fn lookup(target: &str) -> Option<&'static Entry> {
    let t = target.trim_end_matches(['/', '\\']);
    if t == DEMO {
        return REGISTRY.iter().find(|e| e.draft == Some(DEMO));
    }
    let base = t.rsplit(['/', '\\']).next().unwrap_or(t).to_lowercase();
    let base_nodash: String = base.chars().filter(|&c| c != '-' && c != '_').collect();
    let mut entries: Vec<&Entry> = REGISTRY.iter().collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.id.len()));
    entries.into_iter().find(|e| {
        let id_nodash: String = e.id.chars().filter(|&c| c != '-').collect();
        base.contains(e.id) || base_nodash.contains(&id_nodash)
    })
}

/// The reason `target` (a registry id, repo id or path) cannot run yet, if the registry knows
/// one. Checked before anything is downloaded.
pub fn unavailable_reason(target: &str) -> Option<(&'static str, &'static str)> {
    let t = target.trim();
    let t = FAMILIES
        .iter()
        .find(|(f, _)| *f == t)
        .map_or(t, |(_, repo)| *repo);
    let t = if t.is_empty() { DEFAULT_TARGET } else { t };
    lookup(t).and_then(|e| e.unavailable.map(|r| (e.id, r)))
}

/// A resolved target and drafter (repo ids, paths or `demo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub target: String,
    pub drafter: Option<String>,
}

/// Picks the target and the drafter for `mode` (reference §7, steps 1-6).
pub fn resolve(model: &str, mode: Mode, drafter: Option<&str>) -> Result<Resolved, HubError> {
    let model = model.trim();
    let target = match model {
        "" => DEFAULT_TARGET.to_string(),
        m => match FAMILIES.iter().find(|(f, _)| *f == m) {
            Some((_, repo)) => repo.to_string(),
            None => match REGISTRY.iter().find(|e| e.id == m) {
                Some(e) => e.default_target().to_string(),
                None => m.to_string(),
            },
        },
    };
    if mode == Mode::Baseline {
        return Ok(Resolved {
            target,
            drafter: None,
        });
    }
    if let Some(d) = drafter.filter(|d| !d.is_empty()) {
        return Ok(Resolved {
            target,
            drafter: Some(d.to_string()),
        });
    }
    match lookup(&target).and_then(|e| e.drafter(mode)) {
        Some(d) => Ok(Resolved {
            target,
            drafter: Some(d.to_string()),
        }),
        None => Err(HubError::NoDrafter {
            mode: mode.as_str(),
            target,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(model: &str, mode: Mode, drafter: Option<&str>, want: Option<&str>) {
        let r = resolve(model, mode, drafter).unwrap_or_else(|e| panic!("{model} {mode:?}: {e}"));
        assert_eq!(r.drafter.as_deref(), want, "{model} {mode:?}");
    }

    #[test]
    fn full_repo_resolves_both_modes() {
        let t = "mlx-community/Qwen3-8B-8bit";
        check(
            t,
            Mode::DSpark,
            None,
            Some("deepseek-ai/dspark_qwen3_8b_block7"),
        );
        check(t, Mode::DFlash, None, Some("z-lab/Qwen3-8B-DFlash-b16"));
        assert_eq!(resolve(t, Mode::DSpark, None).unwrap().target, t);
    }

    #[test]
    fn quantisation_and_org_agnostic() {
        for t in [
            "mlx-community/Qwen3-4B-4bit",
            "mlx-community/Qwen3-4B-bf16",
            "Qwen/Qwen3-4B",
            "someone/qwen3-4b-instruct-q8",
        ] {
            check(
                t,
                Mode::DSpark,
                None,
                Some("deepseek-ai/dspark_qwen3_4b_block7"),
            );
        }
    }

    #[test]
    fn gemma_naming_variants() {
        for t in [
            "mlx-community/gemma-4-12B-it-8bit",
            "google/gemma-4-12b-it",
            "x/gemma4-12b-it-4bit",
        ] {
            check(
                t,
                Mode::DSpark,
                None,
                Some("deepseek-ai/dspark_gemma4_12b_block7"),
            );
            check(t, Mode::DFlash, None, Some("z-lab/gemma4-12B-it-DFlash"));
        }
    }

    #[test]
    fn sizes_do_not_cross_match() {
        check(
            "mlx-community/Qwen3-4B-8bit",
            Mode::DSpark,
            None,
            Some("deepseek-ai/dspark_qwen3_4b_block7"),
        );
        check(
            "mlx-community/Qwen3-8B-8bit",
            Mode::DSpark,
            None,
            Some("deepseek-ai/dspark_qwen3_8b_block7"),
        );
        check(
            "mlx-community/Qwen3-14B-4bit",
            Mode::DSpark,
            None,
            Some("deepseek-ai/dspark_qwen3_14b_block7"),
        );
        let e = resolve("mlx-community/Qwen3-14B-4bit", Mode::DFlash, None).unwrap_err();
        assert!(e.to_string().contains("--drafter"), "{e}");
    }

    #[test]
    fn family_and_id_aliases() {
        let r = resolve("qwen3", Mode::DSpark, None).unwrap();
        assert_eq!(r.target, "mlx-community/Qwen3-4B-8bit");
        assert_eq!(
            r.drafter.as_deref(),
            Some("deepseek-ai/dspark_qwen3_4b_block7")
        );
        assert_eq!(
            resolve("gemma4", Mode::Baseline, None).unwrap().target,
            DEFAULT_TARGET
        );
        assert_eq!(
            resolve("qwen3-8b", Mode::Baseline, None).unwrap().target,
            "mlx-community/Qwen3-8B-8bit"
        );
        assert_eq!(
            resolve("", Mode::Baseline, None).unwrap().target,
            DEFAULT_TARGET
        );
    }

    #[test]
    fn explicit_drafter_wins_on_any_target() {
        check(
            "mlx-community/Qwen3-8B-8bit",
            Mode::DSpark,
            Some("/my/drafter"),
            Some("/my/drafter"),
        );
        check(
            "org/unknown-model",
            Mode::DFlash,
            Some("org/d"),
            Some("org/d"),
        );
    }

    #[test]
    fn baseline_needs_no_drafter() {
        check("org/unknown-model", Mode::Baseline, None, None);
        check(
            "mlx-community/Qwen3-8B-8bit",
            Mode::Baseline,
            Some("ignored"),
            None,
        );
    }

    #[test]
    fn unknown_target_names_drafter_flag() {
        let e = resolve("org/unknown-model", Mode::DSpark, None).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no built-in dspark drafter") && msg.contains("--drafter"),
            "{msg}"
        );
    }

    #[test]
    fn local_path_matched_by_basename() {
        check(
            "/models/Qwen3-8B-8bit/",
            Mode::DSpark,
            None,
            Some("deepseek-ai/dspark_qwen3_8b_block7"),
        );
        check(
            "/home/u/.lmstudio/models/mlx-community/Qwen3-4B-4bit",
            Mode::DFlash,
            None,
            Some("z-lab/Qwen3-4B-DFlash-b16"),
        );
    }

    #[test]
    fn draft_mode_uses_registered_small_model() {
        check("demo", Mode::Draft, None, Some("demo"));
        check(
            "mlx-community/Qwen3-8B-4bit",
            Mode::Draft,
            None,
            Some(QWEN3_DRAFT),
        );
        check(
            "mlx-community/Qwen3-8B-4bit",
            Mode::Draft,
            Some("/d"),
            Some("/d"),
        );
        check("demo", Mode::DSpark, None, Some("demo-dspark"));
        check("demo", Mode::DFlash, None, Some("demo-dflash"));
        check("smollm2-135m", Mode::DSpark, None, Some("demo-dspark"));
    }

    #[test]
    fn gemma_is_marked_unavailable() {
        for t in [
            "gemma-4-12b",
            "gemma4",
            "mlx-community/gemma-4-12B-it-4bit",
            "",
        ] {
            let (id, why) = unavailable_reason(t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(id, "gemma-4-12b");
            assert!(why.contains("not enabled yet"), "{why}");
        }
        for t in [
            "qwen3-8b",
            "demo",
            "mlx-community/Qwen3-4B-4bit",
            "org/unknown",
        ] {
            assert_eq!(unavailable_reason(t), None, "{t}");
        }
    }

    #[test]
    fn ram_estimates_match_known_sizes() {
        // Qwen3-8B has 8.19B parameters (incl. untied lm_head), Qwen3-4B 4.02B (tied).
        let p8 = QWEN3_8B.params() as f64 / 1e9;
        let p4 = QWEN3_4B.params() as f64 / 1e9;
        assert!((8.1..8.3).contains(&p8), "{p8}");
        assert!((3.9..4.1).contains(&p4), "{p4}");
        let gb = QWEN3_8B.ram_bytes(Quant::Mlx8) as f64 / 1e9;
        assert!((9.0..11.5).contains(&gb), "{gb}");
        let cfg = serde_json::json!({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288, "vocab_size": 151936});
        assert_eq!(Shape::from_config_json(&cfg), Some(QWEN3_8B));
    }
}
