//! `dspark`: the command line. Parses arguments and hands off to the engine, hub and server;
//! holds no model logic of its own.

mod args;
mod bench;
mod bench_backends;
mod bench_server;
mod doctor;
mod generate;
mod model_arg;
mod models;
mod pull;
mod serve;
mod settings;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dspark",
    version,
    about = "Local LLM server with lossless speculative decoding"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text for one prompt, streamed to stdout, then a stats line.
    Generate(generate::GenerateArgs),
    /// Measure prefill/decode speed (speculative modes side by side with baseline); writes JSON.
    Bench(bench::BenchArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat, completions, SSE, tools).
    Serve(serve::ServeArgs),
    /// Server overhead per streamed token vs engine-only, and TTFT p50/p99 at 1/4/16 clients.
    BenchServer(bench_server::BenchServerArgs),
    /// Decode tok/s of one model on candle-CPU and MLX-CPU side by side (informational).
    BenchBackends(bench_backends::BenchBackendsArgs),
    /// List the model registry: targets, drafters, RAM estimates, what is already on disk.
    Models(models::ModelsArgs),
    /// Download a hub repo into the Hugging Face cache (resumable, integrity-checked).
    Pull(pull::PullArgs),
    /// The settings `serve` runs with (flags, env, settings file, defaults) and each one's source.
    Settings(settings::SettingsArgs),
    /// Check that this machine can run dspark; exits non-zero with the reasons if not.
    Doctor(doctor::DoctorArgs),
}

/// Large buffers (weights, caches) on transparent huge pages: faster weight streaming.
#[global_allocator]
static ALLOC: dspark_engine::huge_pages::HugePageAlloc = dspark_engine::huge_pages::HugePageAlloc;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DSPARK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Serve(a) => serve::run(a),
        Command::BenchServer(a) => bench_server::run(a),
        Command::BenchBackends(a) => bench_backends::run(a),
        Command::Models(a) => models::run(a),
        Command::Pull(a) => pull::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Settings(a) => settings::run(a),
    };
    if let Err(e) = res {
        eprintln!("dspark: error: {e:#}");
        std::process::exit(1);
    }
}
