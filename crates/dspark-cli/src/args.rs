//! Argument groups shared by several subcommands. Flags carry no defaults of their own: they
//! become the top layer of the settings (`dspark_hub::layers`: flags, env, file, defaults).

use clap::Args;
use dspark_hub::settings::Settings;

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// Model directory, .gguf file, registry id, hub repo id, or `demo` (default: demo).
    #[arg(long)]
    pub model: Option<String>,
    /// Tensor backend: auto (MLX on Apple Silicon builds with the `mlx` feature, else
    /// candle), candle, mlx or cuda (candle on CUDA). Env: DSPARK_BACKEND.
    #[arg(long, value_parser = ["auto", "candle", "mlx", "cuda"])]
    pub backend: Option<String>,
    /// auto, cpu, cuda or cuda:N (candle); auto, cpu or gpu (mlx; auto is the GPU on Apple
    /// Silicon).
    #[arg(long)]
    pub device: Option<String>,
    /// Activation dtype: f32, f16 or bf16 (default: f32 on cpu, bf16 on cuda).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Keep GGUF block-quantized weights quantized (run by the packed kernels; less memory).
    #[arg(long, conflicts_with = "dequantize")]
    pub keep_quantized: bool,
    /// Dequantize GGUF block-quantized weights to the dtype at load (the default; the
    /// reference arithmetic of transformers' GGUF loader).
    #[arg(long)]
    pub dequantize: bool,
    /// Matmul arithmetic on the CPU: f32 (default) or bf16 (each matmul's activations rounded
    /// to bf16, products summed in f32: on AMX tiles where the CPU has AMX-BF16, where verify
    /// blocks of up to 16 tokens cost about one decode step; else by AVX-512 BF16 dot
    /// products, as on AMD Zen 4; else f32). Env: DSPARK_MATMUL.
    #[arg(long, value_parser = ["f32", "bf16"])]
    pub matmul: Option<String>,
}

#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Maximum new tokens.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Args, Clone, Debug)]
pub struct SpecArgs {
    /// Decoding mode: baseline (default), dspark, dflash or draft.
    #[arg(long, value_parser = ["baseline", "dspark", "dflash", "draft"])]
    pub mode: Option<String>,
    /// Drafter directory (DSpark/DFlash) or small model (draft). `--model demo` has a default
    /// draft-model drafter: the same GGUF kept quantized.
    #[arg(long)]
    pub drafter: Option<String>,
    /// Drafts verified per round. Default for dspark/dflash: each round's count is chosen up to
    /// the full block from this machine's measured acceptance and round times (greedy on CPU
    /// or CUDA kernels, and unseeded sampling; else the full block); for draft, a count that
    /// adapts between 2 and 8 to the acceptance seen so far in each request, starting at 8.
    /// Setting it fixes it.
    #[arg(long)]
    pub max_draft: Option<usize>,
    /// DSpark confidence truncation threshold (default 0 = off).
    #[arg(long)]
    pub confidence_threshold: Option<f32>,
    /// Ids a DFlash/DSpark drafter's head scores, its most frequent first, plus each
    /// request's prompt ids: its draft vocabulary (drafts stay exact; acceptance falls only
    /// where the target's token lies outside it). 0 = the whole vocabulary. Default: the
    /// drafter's config (`draft_vocab_size`), else its ranking's `size` (16384 for the demo's),
    /// else the whole vocabulary. Env: DSPARK_DRAFT_VOCAB.
    #[arg(long)]
    pub draft_vocab: Option<usize>,
    /// Prompt lookup for dflash/dspark: after each round's first draft, where the context
    /// through it ends in a pair of tokens seen earlier, draft what followed the occurrence
    /// with the longest match instead of the drafter's rest (exact either way); a measured
    /// draft count chooses how many such drafts a round verifies. Default: on with our CPU and
    /// CUDA kernels (batch-invariant rows), off elsewhere (MLX). Env: DSPARK_LOOKUP.
    #[arg(long, value_name = "BOOL")]
    pub lookup: Option<bool>,
}

/// The settings layer of the model and speculative flags.
pub fn flag_layer(m: &ModelArgs, s: &SpecArgs) -> Settings {
    Settings {
        model: m.model.clone(),
        backend: m.backend.clone(),
        device: m.device.clone(),
        dtype: m.dtype.clone(),
        keep_quantized: if m.dequantize {
            Some(false)
        } else {
            m.keep_quantized.then_some(true)
        },
        matmul: m.matmul.clone(),
        mode: s.mode.as_deref().and_then(dspark_hub::Mode::parse),
        drafter: s.drafter.clone(),
        max_draft: s.max_draft,
        confidence_threshold: s.confidence_threshold,
        draft_vocab: s.draft_vocab,
        lookup: s.lookup,
        ..Settings::default()
    }
}
