//! `dspark pull REPO`: downloads a hub repo into the Hugging Face cache with a total and a
//! per-file progress bar. Interrupting (Ctrl-C) leaves `.incomplete` files that the next pull
//! resumes; the download logic itself lives in `dspark_hub::download`.

use std::sync::Mutex;

use anyhow::Result;
use clap::Args;
use dspark_hub::download::{pull, Progress, PullOptions};
use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Args, Debug)]
pub struct PullArgs {
    /// Hub repo id (ORG/NAME) or a registry id such as `qwen3-8b` (see `dspark models`).
    pub repo: String,
    /// Branch, tag or commit.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Use only the local cache (same as HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,
}

pub fn run(a: PullArgs) -> Result<()> {
    let repo = match dspark_hub::registry::REGISTRY
        .iter()
        .find(|e| e.id == a.repo.to_lowercase())
    {
        Some(e) => e.default_target().to_string(),
        None => a.repo.clone(),
    };
    let mut opts = PullOptions::from_env();
    opts.revision = a.revision;
    opts.offline |= a.offline;
    if !opts.offline {
        eprintln!(
            "dspark: pulling {repo}@{} from {} (interrupt any time; pull again to resume)",
            opts.revision, opts.endpoint
        );
    }
    let bars = Bars::new();
    let got = pull(&repo, &opts, &bars)?;
    bars.clear();
    eprintln!(
        "dspark: {repo} ready at {} ({} fetched, {} files already cached)",
        got.snapshot.display(),
        HumanBytes(got.fetched_bytes),
        got.reused_files
    );
    println!("{}", got.snapshot.display());
    Ok(())
}

/// indicatif bars: one for the whole snapshot, one for the file in flight.
pub struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    file: Mutex<Option<ProgressBar>>,
}

impl Bars {
    pub fn new() -> Bars {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let total = multi.add(ProgressBar::hidden());
        Bars {
            multi,
            total,
            file: Mutex::new(None),
        }
    }

    fn clear(&self) {
        let _ = self.multi.clear();
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Progress for Bars {
    fn start(&self, files: usize, total: u64, done: u64) {
        self.total.set_draw_target(ProgressDrawTarget::stderr());
        self.total.set_style(style(
            "total {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ));
        self.total.set_length(total);
        self.total.set_position(done);
        self.total.set_message(format!("({files} files)"));
    }

    fn file_start(&self, name: &str, size: u64, done: u64) {
        let bar = self.multi.add(ProgressBar::new(size));
        bar.set_style(style("{msg:24!} {bar:30} {bytes}/{total_bytes}"));
        bar.set_message(name.to_string());
        bar.set_position(done);
        if let Some(old) = self
            .file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(bar)
        {
            old.finish_and_clear();
        }
    }

    fn advance(&self, bytes: u64) {
        self.total.inc(bytes);
        if let Some(b) = self.file.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            b.inc(bytes);
        }
    }

    fn file_done(&self, _name: &str) {
        if let Some(b) = self.file.lock().unwrap_or_else(|p| p.into_inner()).take() {
            b.finish_and_clear();
        }
    }

    fn finish(&self) {
        self.total.finish_and_clear();
    }
}
