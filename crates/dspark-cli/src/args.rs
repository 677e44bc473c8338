//! Argument groups shared by several subcommands.

use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// Model directory, .gguf file, or `demo`.
    #[arg(long, default_value = "demo")]
    pub model: String,
    /// Tensor backend: auto (MLX on Apple Silicon builds with the `mlx` feature, else
    /// candle), candle or mlx.
    #[arg(long, env = "DSPARK_BACKEND", default_value = "auto", value_parser = ["auto", "candle", "mlx"])]
    pub backend: String,
    /// auto, cpu, cuda or cuda:N (candle); auto, cpu or gpu (mlx; auto is the GPU on Apple
    /// Silicon).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Activation dtype: f32, f16 or bf16 (default: f32 on cpu, bf16 on cuda).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Keep GGUF block-quantized weights quantized instead of dequantizing to the dtype.
    #[arg(long)]
    pub keep_quantized: bool,
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
    /// Decoding mode: baseline, dspark, dflash or draft.
    #[arg(long, default_value = "baseline", value_parser = ["baseline", "dspark", "dflash", "draft"])]
    pub mode: String,
    /// Drafter directory (DSpark/DFlash) or small model (draft). `--model demo` has a default
    /// draft-model drafter: the same GGUF kept quantized.
    #[arg(long)]
    pub drafter: Option<String>,
    /// Drafts verified per round (default: full block for dspark/dflash, 4 for draft).
    #[arg(long)]
    pub max_draft: Option<usize>,
    /// DSpark confidence truncation threshold (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub confidence_threshold: f32,
}
