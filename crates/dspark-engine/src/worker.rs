//! The engine worker: one OS thread owns the [`Pipeline`] and every tensor; a clonable
//! [`EngineHandle`] renders and tokenizes prompts on the caller's thread, then submits jobs
//! through the bounded [`queue`](crate::queue). Events go back through a callback run on the
//! worker (`FnMut(Event) -> bool`); a `false` return means "client gone" and cancels the
//! generation at the next round. Knows nothing about HTTP or async runtimes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value as Json;

use crate::backend::Backend;
use crate::chat_template::ChatOptions;
use crate::detok::{StopFilter, StreamDecoder};
use crate::error::EngineError;
use crate::generate::{FinishReason, Flow, GenParams, GenStats, TokenSink};
use crate::pipeline::Pipeline;
use crate::queue::{Counters, CountersSnapshot, JobQueue, JobRx};
use crate::sampling::logprobs::{Rendered, TokenLogprob};
use crate::sampling::SamplingParams;
use crate::tokenizer::Tokenizer;

/// What to generate from.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// OpenAI-style messages rendered with the model's chat template.
    Chat {
        messages: Json,
        options: ChatOptions,
    },
    /// Raw text, tokenized without special tokens.
    Text(String),
}

/// A prompt rendered and tokenized, checked against the context length.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub ids: Vec<u32>,
    /// The rendered prompt text (for chat: the template output).
    pub text: String,
}

/// Per-request generation settings.
#[derive(Clone, Debug)]
pub struct JobParams {
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
}

/// What the worker reports, in order: `Started`, zero or more `Delta`, then `Done` or `Error`.
#[derive(Debug)]
pub enum Event {
    /// The job left the queue and generation begins.
    Started {
        queued_secs: f64,
    },
    /// One round's committed tokens and the text they released (may be empty).
    Delta {
        text: String,
        tokens: usize,
        /// One entry per token when the request asked for log-probabilities.
        logprobs: Vec<Rendered>,
    },
    Done(Summary),
    Error(EngineError),
}

/// The final report of one generation.
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish_reason: FinishReason,
    /// A stop string ended the generation.
    pub stopped_by_string: bool,
    pub completion_tokens: usize,
    pub stats: GenStats,
    /// Mean tokens committed per round.
    pub accept_len: f64,
    pub tokens_per_sec: f64,
    /// Prefix-cache counters after this generation (`enabled: false` when off).
    pub prefix_cache: crate::prefix_cache::PrefixCacheInfo,
}

/// Static facts about the served model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub mode: String,
    pub drafter: Option<String>,
    pub model_path: String,
    pub context_len: usize,
    pub has_chat_template: bool,
    /// Rows of the target's logits (valid token ids are below it).
    pub vocab_size: usize,
    /// Ids the drafter's head scores (`None`: the whole vocabulary, or no such drafter).
    pub draft_vocab: Option<usize>,
}

/// Settings a running engine can change (a settings-file reload, the app's Settings pane).
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Drafts per round (`None` = the mode's default, see `spec::policy`).
    pub max_draft: Option<usize>,
    /// DSpark confidence truncation threshold (0 = off).
    pub confidence_threshold: f32,
    /// Prompt lookup after each round's first draft (`None` = the default, see
    /// `spec::policy::lookup`).
    pub lookup: Option<bool>,
    /// Prefix-cache (slots, RAM bytes); ignored when the cache is off.
    pub prefix_limits: Option<(usize, usize)>,
}

/// The latest [`Tuning`] not yet applied by the worker.
type PendingTuning = Arc<Mutex<Option<Tuning>>>;

/// Callback run on the worker thread for each event; `false` = the receiver is gone.
pub type EventFn = Box<dyn FnMut(Event) -> bool + Send>;

pub(crate) struct Job {
    pub prompt: Vec<u32>,
    pub params: JobParams,
    pub on_event: EventFn,
}

/// Clonable handle to the worker: prepares prompts and submits jobs. Cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    queue: JobQueue,
    tokenizer: Arc<Tokenizer>,
    info: Arc<ModelInfo>,
    tuning: PendingTuning,
}

impl EngineHandle {
    /// Starts the worker thread that owns the pipeline built by `build` (run on that thread,
    /// so backends whose arrays belong to their creating thread work). Waits until the
    /// build finishes and returns its error if it failed. `queue_cap` jobs may wait while
    /// one runs.
    pub fn spawn<B, E, F>(build: F, queue_cap: usize) -> Result<Self, E>
    where
        B: Backend + 'static,
        E: From<EngineError> + Send + 'static,
        F: FnOnce() -> Result<Pipeline<B>, E> + Send + 'static,
    {
        let (queue, rx) = JobQueue::new(queue_cap);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let tuning = PendingTuning::default();
        let pending = tuning.clone();
        std::thread::Builder::new()
            .name("dspark-engine".into())
            .spawn(move || match build() {
                Ok(pipe) => {
                    let t = pipe.target.tokenizer.clone();
                    let info = ModelInfo {
                        mode: pipe.mode.as_str().to_owned(),
                        drafter: pipe.drafter_name().map(str::to_owned),
                        model_path: pipe.target.path.display().to_string(),
                        context_len: pipe.target.model.cfg.max_position_embeddings,
                        has_chat_template: t.chat_template().is_some(),
                        vocab_size: pipe.target.model.cfg.vocab_size,
                        draft_vocab: pipe.draft_vocab_len(),
                    };
                    let _ = ready_tx.send(Ok((t, info)));
                    run_worker(pipe, rx, pending);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| {
                E::from(EngineError::Invalid(format!(
                    "cannot start the engine thread: {e}"
                )))
            })?;
        let (tokenizer, info) = ready_rx
            .recv()
            .map_err(|_| E::from(EngineError::WorkerGone))??;
        Ok(EngineHandle {
            queue,
            tokenizer,
            info: Arc::new(info),
            tuning,
        })
    }

    /// Changes draft settings and prefix-cache limits; the worker applies them before the
    /// next job (a generation in progress keeps its settings).
    pub fn retune(&self, t: Tuning) {
        *self.tuning.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// Counters of the worker (queued, running, completed, cancelled, failed, tokens).
    pub fn counters(&self) -> CountersSnapshot {
        self.queue.counters().snapshot()
    }

    /// Renders (chat) and tokenizes `prompt`, and checks that `max_new` more tokens fit the
    /// context. Runs on the caller's thread; may take milliseconds for long prompts.
    pub fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError> {
        let text = match prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Chat { messages, options } => match self.tokenizer.chat_template() {
                Some(t) => t
                    .render(messages, options)
                    .map_err(|e| EngineError::Template(e.to_string()))?,
                None => plain_transcript(messages),
            },
        };
        let ids = self
            .tokenizer
            .encode(&text, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        if ids.is_empty() {
            return Err(EngineError::Invalid(
                "the prompt encodes to no tokens".into(),
            ));
        }
        crate::generate::baseline::check_context(ids.len(), max_new, self.info.context_len)?;
        Ok(Prepared { ids, text })
    }

    /// Queues a job; fails at once with `QueueFull` when `queue_cap` jobs already wait.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        on_event: EventFn,
    ) -> Result<(), EngineError> {
        self.queue.push(Job {
            prompt,
            params,
            on_event,
        })
    }
}

/// Without a chat template: message contents joined by newlines.
fn plain_transcript(messages: &Json) -> String {
    let list = messages.as_array().map(Vec::as_slice).unwrap_or_default();
    let parts: Vec<String> = list
        .iter()
        .map(|m| match m.get("content") {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Array(a)) => a
                .iter()
                .filter_map(|p| p.get("text").and_then(Json::as_str))
                .collect(),
            _ => String::new(),
        })
        .collect();
    parts.join("\n")
}

fn run_worker<B: Backend>(mut pipe: Pipeline<B>, rx: JobRx, tuning: PendingTuning) {
    let eos = pipe.target.eos_ids();
    let tokenizer = pipe.target.tokenizer.clone();
    while let Some((job, queued_at)) = rx.recv() {
        if let Some(t) = tuning.lock().unwrap_or_else(|p| p.into_inner()).take() {
            tracing::info!("engine retuned: {t:?}");
            pipe.retune(&t);
        }
        run_job(&mut pipe, &tokenizer, &eos, job, queued_at, rx.counters());
        rx.counters().running.store(0, Ordering::Relaxed);
    }
}

/// Runs one job. Counters are updated before the final event goes out, so whoever receives
/// `Done` or `Error` already sees them (a `Done` nobody receives is re-counted as cancelled).
fn run_job<B: Backend>(
    pipe: &mut Pipeline<B>,
    tokenizer: &Tokenizer,
    eos: &[u32],
    mut job: Job,
    queued_at: Instant,
    counters: &Counters,
) {
    let bump = |c: &AtomicU64| c.fetch_add(1, Ordering::Relaxed);
    counters.running.store(1, Ordering::Relaxed);
    if !(job.on_event)(Event::Started {
        queued_secs: queued_at.elapsed().as_secs_f64(),
    }) {
        bump(&counters.cancelled);
        return;
    }
    let params = GenParams {
        max_new_tokens: job.params.max_new_tokens,
        sampling: std::mem::take(&mut job.params.sampling),
        eos: eos.to_vec(),
    };
    let mut sink = EventSink {
        dec: StreamDecoder::new(tokenizer, true),
        stop: StopFilter::new(std::mem::take(&mut job.params.stop)),
        on_event: &mut job.on_event,
        logprobs: Vec::new(),
        tokenizer,
        gone: false,
        counters,
    };
    let res = pipe.generate(&job.prompt, &params, &mut sink);
    let gone = sink.gone;
    match res {
        Ok(r) if r.finish_reason == FinishReason::Cancelled || gone => {
            bump(&counters.cancelled);
        }
        Ok(r) => {
            let stopped = sink.finish();
            let accept_len = r.mean_accept_len();
            let tokens_per_sec = r.tokens_per_sec();
            let summary = Summary {
                finish_reason: r.finish_reason,
                stopped_by_string: stopped,
                completion_tokens: r.tokens.len(),
                accept_len,
                tokens_per_sec,
                stats: r.stats,
                prefix_cache: pipe.prefix_cache_info(),
            };
            bump(&counters.completed);
            counters.running.store(0, Ordering::Relaxed);
            if !(job.on_event)(Event::Done(summary)) {
                counters.completed.fetch_sub(1, Ordering::Relaxed);
                bump(&counters.cancelled);
            }
        }
        Err(e) => {
            tracing::warn!("generation failed: {e}");
            bump(&counters.failed);
            counters.running.store(0, Ordering::Relaxed);
            (job.on_event)(Event::Error(e));
        }
    }
}

/// Detokenizes each round, applies stop strings, and forwards the text as a `Delta`.
struct EventSink<'a> {
    dec: StreamDecoder<'a>,
    stop: StopFilter,
    on_event: &'a mut EventFn,
    /// Log-probabilities of the tokens of the coming `push`, with their texts.
    logprobs: Vec<Rendered>,
    tokenizer: &'a Tokenizer,
    gone: bool,
    counters: &'a Counters,
}

impl EventSink<'_> {
    /// Flushes held-back text; returns whether a stop string matched.
    fn finish(&mut self) -> bool {
        if !self.stop.stopped() {
            let mut text = String::new();
            if let Ok(rest) = self.dec.flush() {
                text.push_str(&self.stop.push(&rest).emit);
            }
            text.push_str(&self.stop.flush());
            if !text.is_empty() {
                self.gone |= !(self.on_event)(Event::Delta {
                    text,
                    tokens: 0,
                    logprobs: Vec::new(),
                });
            }
        }
        self.stop.stopped()
    }
}

impl TokenSink for EventSink<'_> {
    fn logprobs(&mut self, entries: &[TokenLogprob]) {
        let t = self.tokenizer;
        let text = |id: u32| t.decode(&[id], false).unwrap_or_default();
        self.logprobs = entries.iter().map(|e| e.render(&text)).collect();
    }

    fn push(&mut self, ids: &[u32]) -> Flow {
        self.counters
            .generated_tokens
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let mut text = String::new();
        let mut stopped = false;
        match self.dec.push(ids) {
            Ok(s) => {
                let step = self.stop.push(&s);
                text = step.emit;
                stopped = step.stopped;
            }
            Err(e) => tracing::warn!("detokenization failed: {e}"),
        }
        if !(self.on_event)(Event::Delta {
            text,
            tokens: ids.len(),
            logprobs: std::mem::take(&mut self.logprobs),
        }) {
            self.gone = true;
            return Flow::Cancel;
        }
        if stopped {
            Flow::StopString
        } else {
            Flow::Continue
        }
    }
}
