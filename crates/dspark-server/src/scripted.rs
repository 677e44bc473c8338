//! A scripted engine for protocol tests and SDK end-to-end tests of parsing (served by the
//! hidden `dspark serve --scripted FILE`): replies come from rules matched against the
//! rendered prompt, released a few characters per "round". No model, no tensors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use dspark_engine::generate::{FinishReason, GenStats};
use dspark_engine::queue::CountersSnapshot;
use dspark_engine::worker::{Event, EventFn, JobParams, ModelInfo, Prepared, Prompt, Summary};
use dspark_engine::EngineError;
use serde::Deserialize;

use crate::engine::Engine;

/// One reply rule: the first rule whose `if_contains` occurs in the prompt (or has none) wins.
#[derive(Clone, Debug, Deserialize)]
pub struct Rule {
    #[serde(default)]
    pub if_contains: Option<String>,
    pub reply: String,
    /// Repeat the reply until `max_tokens` (an endless generation).
    #[serde(default)]
    pub repeat: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Script {
    pub rules: Vec<Rule>,
    /// Characters per round (one "token" per character).
    #[serde(default = "default_round_chars")]
    pub round_chars: usize,
    /// Simulated compute per round.
    #[serde(default)]
    pub round_ms: u64,
    /// Jobs that may wait while one runs.
    #[serde(default = "default_queue")]
    pub queue: usize,
    #[serde(default = "default_ctx")]
    pub context_len: usize,
}

fn default_round_chars() -> usize {
    4
}
fn default_queue() -> usize {
    4
}
fn default_ctx() -> usize {
    4096
}

impl Script {
    pub fn replying(reply: &str) -> Script {
        Script {
            rules: vec![Rule {
                if_contains: None,
                reply: reply.into(),
                repeat: false,
            }],
            round_chars: 4,
            round_ms: 0,
            queue: 4,
            context_len: 4096,
        }
    }
}

#[derive(Default)]
struct Shared {
    in_flight: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    rejected: AtomicU64,
    generated: AtomicU64,
    /// While true, jobs wait before their first round.
    held: Mutex<bool>,
    cv: Condvar,
    /// Serialises jobs like the real single worker.
    worker: Mutex<()>,
}

#[derive(Clone)]
pub struct ScriptedEngine {
    script: Arc<Script>,
    info: ModelInfo,
    shared: Arc<Shared>,
}

impl ScriptedEngine {
    pub fn new(script: Script) -> Self {
        let info = ModelInfo {
            mode: "scripted".into(),
            drafter: None,
            model_path: "scripted".into(),
            context_len: script.context_len,
            has_chat_template: true,
            // every char is a token of the scripted engine
            vocab_size: char::MAX as usize + 1,
            draft_vocab: None,
        };
        ScriptedEngine {
            script: Arc::new(script),
            info,
            shared: Arc::default(),
        }
    }

    /// Jobs block before their first round until [`release`](Self::release).
    pub fn hold(&self) {
        *self.shared.held.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    pub fn release(&self) {
        *self.shared.held.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.shared.cv.notify_all();
    }

    fn rule_for(&self, prompt: &str) -> Option<&Rule> {
        self.script
            .rules
            .iter()
            .find(|r| r.if_contains.as_deref().is_none_or(|s| prompt.contains(s)))
    }

    fn run(&self, prompt: &str, params: JobParams, mut on_event: EventFn) {
        let sh = &self.shared;
        let _turn = sh.worker.lock().unwrap_or_else(|e| e.into_inner());
        {
            let held = sh.held.lock().unwrap_or_else(|e| e.into_inner());
            let _unused = sh
                .cv
                .wait_timeout_while(held, Duration::from_secs(60), |h| *h);
        }
        let t0 = Instant::now();
        let outcome = self.rounds(prompt, &params, &mut on_event);
        // counters move before the final event, so its receiver already sees them
        sh.in_flight.fetch_sub(1, Ordering::SeqCst);
        let Ok((n, stopped, finish)) = outcome else {
            sh.cancelled.fetch_add(1, Ordering::SeqCst);
            return;
        };
        let secs = t0.elapsed().as_secs_f64();
        let summary = Summary {
            finish_reason: finish,
            stopped_by_string: stopped,
            completion_tokens: n,
            accept_len: 1.0,
            tokens_per_sec: if secs > 0.0 { n as f64 / secs } else { 0.0 },
            stats: GenStats {
                accept_lengths: vec![1; n],
                target_forwards: n,
                prompt_tokens: prompt.chars().count(),
                decode_secs: secs,
                ..Default::default()
            },
            prefix_cache: Default::default(),
        };
        sh.completed.fetch_add(1, Ordering::SeqCst);
        if !on_event(Event::Done(summary)) {
            sh.completed.fetch_sub(1, Ordering::SeqCst);
            sh.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Emits the reply (cycled up to `max_new_tokens` chars); Err(()) when cancelled.
    fn rounds(
        &self,
        prompt: &str,
        p: &JobParams,
        on_event: &mut EventFn,
    ) -> Result<(usize, bool, FinishReason), ()> {
        if !on_event(Event::Started { queued_secs: 0.0 }) {
            return Err(());
        }
        let (reply, repeat) = self
            .rule_for(prompt)
            .map_or((String::new(), false), |r| (r.reply.clone(), r.repeat));
        let len = reply.chars().count();
        let n = if repeat {
            p.max_new_tokens
        } else {
            p.max_new_tokens.min(len)
        };
        let mut text: String = reply.chars().cycle().take(n).collect();
        let mut stopped = false;
        if let Some(i) = p
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()))
            .min()
        {
            text.truncate(i);
            stopped = true;
        }
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(self.script.round_chars.max(1)) {
            if self.script.round_ms > 0 {
                std::thread::sleep(Duration::from_millis(self.script.round_ms));
            }
            self.shared
                .generated
                .fetch_add(chunk.len() as u64, Ordering::SeqCst);
            if !on_event(Event::Delta {
                text: chunk.iter().collect(),
                tokens: chunk.len(),
                logprobs: Vec::new(),
            }) {
                return Err(());
            }
        }
        let finish = if !stopped && (repeat || len > p.max_new_tokens) {
            FinishReason::Length
        } else {
            FinishReason::Stop
        };
        Ok((chars.len(), stopped, finish))
    }
}

impl Engine for ScriptedEngine {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// No tokenizer: structured output is refused with a 400.
    fn tokenizer(&self) -> Option<std::sync::Arc<dspark_engine::tokenizer::Tokenizer>> {
        None
    }

    fn prepare(&self, prompt: &Prompt, max_new: usize) -> Result<Prepared, EngineError> {
        let text = match prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Chat { messages, options } => {
                format!(
                    "{messages}{}",
                    options
                        .tools
                        .as_ref()
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                )
            }
        };
        let ids: Vec<u32> = text.chars().map(u32::from).collect();
        if ids.len().saturating_add(max_new) > self.info.context_len {
            return Err(EngineError::ContextOverflow {
                prompt: ids.len(),
                max_new,
                max: self.info.context_len,
            });
        }
        Ok(Prepared { ids, text })
    }

    fn submit(
        &self,
        prompt: Vec<u32>,
        params: JobParams,
        on_event: EventFn,
    ) -> Result<(), EngineError> {
        let cap = 1 + self.script.queue as u64;
        let sh = &self.shared;
        if sh.in_flight.fetch_add(1, Ordering::SeqCst) >= cap {
            sh.in_flight.fetch_sub(1, Ordering::SeqCst);
            sh.rejected.fetch_add(1, Ordering::SeqCst);
            return Err(EngineError::QueueFull);
        }
        let me = self.clone();
        let text: String = prompt.iter().filter_map(|&c| char::from_u32(c)).collect();
        std::thread::spawn(move || me.run(&text, params, on_event));
        Ok(())
    }

    fn counters(&self) -> CountersSnapshot {
        let sh = &self.shared;
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        let in_flight = l(&sh.in_flight);
        CountersSnapshot {
            queued: in_flight.saturating_sub(1),
            running: in_flight.min(1),
            completed: l(&sh.completed),
            cancelled: l(&sh.cancelled),
            failed: 0,
            rejected: l(&sh.rejected),
            generated_tokens: l(&sh.generated),
        }
    }
}
