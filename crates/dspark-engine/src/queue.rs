//! Admission for the engine worker: a bounded FIFO of jobs (full → `QueueFull` at once, never
//! blocking the caller) plus the shared counters that `/metrics` reads. Holds no tensors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use crate::error::EngineError;
use crate::worker::Job;

/// Worker counters, updated with relaxed atomics.
#[derive(Default, Debug)]
pub struct Counters {
    pub queued: AtomicU64,
    pub running: AtomicU64,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    pub rejected: AtomicU64,
    pub generated_tokens: AtomicU64,
}

/// A copy of [`Counters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CountersSnapshot {
    pub queued: u64,
    pub running: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub failed: u64,
    pub rejected: u64,
    pub generated_tokens: u64,
}

impl Counters {
    pub fn snapshot(&self) -> CountersSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            queued: l(&self.queued),
            running: l(&self.running),
            completed: l(&self.completed),
            cancelled: l(&self.cancelled),
            failed: l(&self.failed),
            rejected: l(&self.rejected),
            generated_tokens: l(&self.generated_tokens),
        }
    }
}

/// The sending side: clonable, never blocks.
#[derive(Clone)]
pub(crate) struct JobQueue {
    tx: SyncSender<(Job, Instant)>,
    counters: Arc<Counters>,
}

/// The worker's side.
pub(crate) struct JobRx {
    rx: Receiver<(Job, Instant)>,
    counters: Arc<Counters>,
}

impl JobQueue {
    /// `cap` jobs may wait while one runs (0: accepted only while the worker is idle).
    pub fn new(cap: usize) -> (JobQueue, JobRx) {
        let (tx, rx) = sync_channel(cap);
        let counters = Arc::new(Counters::default());
        (
            JobQueue {
                tx,
                counters: counters.clone(),
            },
            JobRx { rx, counters },
        )
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn push(&self, job: Job) -> Result<(), EngineError> {
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        let res = self.tx.try_send((job, Instant::now()));
        if res.is_err() {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
        }
        match res {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                Err(EngineError::QueueFull)
            }
            Err(TrySendError::Disconnected(_)) => Err(EngineError::WorkerGone),
        }
    }
}

impl JobRx {
    /// The next job and when it was queued; `None` once every handle is dropped.
    pub fn recv(&self) -> Option<(Job, Instant)> {
        let j = self.rx.recv().ok()?;
        self.counters.queued.fetch_sub(1, Ordering::Relaxed);
        Some(j)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplingParams;
    use crate::worker::JobParams;

    fn job() -> Job {
        Job {
            prompt: vec![1],
            params: JobParams {
                max_new_tokens: 1,
                sampling: SamplingParams::greedy(),
                stop: vec![],
            },
            on_event: Box::new(|_| true),
        }
    }

    #[test]
    fn full_queue_rejects_without_blocking() {
        let (q, rx) = JobQueue::new(2);
        q.push(job()).unwrap();
        q.push(job()).unwrap();
        assert!(matches!(q.push(job()), Err(EngineError::QueueFull)));
        let c = q.counters().snapshot();
        assert_eq!((c.queued, c.rejected), (2, 1));
        assert!(rx.recv().is_some());
        assert_eq!(q.counters().snapshot().queued, 1);
        q.push(job()).unwrap();
    }

    #[test]
    fn zero_capacity_rejects_when_worker_not_waiting() {
        let (q, _rx) = JobQueue::new(0);
        assert!(matches!(q.push(job()), Err(EngineError::QueueFull)));
    }

    #[test]
    fn dropped_worker_is_worker_gone() {
        let (q, rx) = JobQueue::new(1);
        drop(rx);
        assert!(matches!(q.push(job()), Err(EngineError::WorkerGone)));
        assert_eq!(q.counters().snapshot().queued, 0);
    }
}
