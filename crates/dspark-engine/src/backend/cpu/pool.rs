//! A small spinning thread pool for the decode step's kernel calls.
//!
//! A decode step of the demo model is ~250 kernel calls of 5-50 µs each. Handing each one to
//! rayon costs a wake-up and a join of several microseconds, which ate the whole gain of the
//! second core (one thread decoded Q4_1 faster than two). Here the calling thread takes part
//! in the work, and `threads - 1` workers spin on an atomic for a short while after each job
//! before they sleep, so back-to-back calls hand off in well under a microsecond.
//!
//! Tasks are claimed one at a time from a counter packed with the job's generation into one
//! atomic word, so a worker that wakes late can never run a task of a job that has ended: it
//! must win a compare-and-swap on the live generation first, and the caller does not return
//! until every claimed task has reported done. Which thread runs a task never changes what
//! the task computes, so results stay bit-identical to inline runs.
//!
//! One job runs at a time; a call made while another thread's job is in flight runs inline.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Tasks per job at most (the counter's field width).
pub const MAX_TASKS: usize = (1 << 16) - 1;
/// How long an idle worker spins on the core before it starts yielding it.
const HOT_SPIN: Duration = Duration::from_micros(30);
/// How long an idle worker polls (spinning, then yielding to other runnable threads such as
/// candle's rayon workers during a prefill) before it sleeps.
const SPIN: Duration = Duration::from_micros(300);

type Task<'a> = &'a (dyn Fn(usize) + Sync);

/// The job slot: generation (32 bits) | task count (16) | next task (16).
struct Shared {
    state: AtomicU64,
    done: AtomicUsize,
    /// The running job's closure; written only by the job's owner while no task is claimable.
    task: UnsafeCell<Option<Task<'static>>>,
    /// Held by the thread that owns the slot for the length of its job.
    owner: Mutex<()>,
    sleepers: AtomicUsize,
    /// Set by a worker whose task panicked; the job's owner re-raises it.
    worker_panicked: AtomicBool,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `task` is written only by the slot owner between jobs (no task claimable) and read
// only by a thread that has claimed a task of the live job (see `claim`).
unsafe impl Sync for Shared {}

fn pack(gen: u64, tasks: usize, next: usize) -> u64 {
    (gen << 32) | ((tasks as u64) << 16) | next as u64
}

fn unpack(s: u64) -> (u64, usize, usize) {
    (
        s >> 32,
        ((s >> 16) & 0xffff) as usize,
        (s & 0xffff) as usize,
    )
}

struct Pool {
    shared: &'static Shared,
    workers: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            state: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            task: UnsafeCell::new(None),
            owner: Mutex::new(()),
            sleepers: AtomicUsize::new(0),
            worker_panicked: AtomicBool::new(false),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        let mut workers = 0;
        for i in 1..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("dspark-cpu-{i}"))
                .spawn(move || worker(shared));
            if spawned.is_ok() {
                workers += 1;
            }
        }
        Pool { shared, workers }
    })
}

/// Threads that take part in a job (the caller included).
pub fn threads() -> usize {
    pool().workers + 1
}

/// Runs `f(0) .. f(tasks - 1)` across the caller and the pool's workers and returns when all
/// are done. Runs inline when there is one task, no worker, or another job is in flight.
pub fn run(tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let p = pool();
    if tasks <= 1 || p.workers == 0 || tasks > MAX_TASKS {
        run_inline(tasks, f);
        return;
    }
    let Ok(_slot) = p.shared.owner.try_lock() else {
        run_inline(tasks, f);
        return;
    };
    let s = p.shared;
    // SAFETY: the lifetime is erased only for the length of this call: every task claimed
    // under this generation has finished (`done == tasks`) before we return, and no task can
    // be claimed after that because `next == tasks`.
    let erased: Task<'static> = unsafe { std::mem::transmute::<Task<'_>, Task<'static>>(f) };
    let gen = (unpack(s.state.load(Ordering::Acquire)).0 + 1) & 0xffff_ffff;
    // SAFETY: no task of any job is claimable now (the previous job's counter is exhausted),
    // so no other thread reads the slot.
    unsafe { *s.task.get() = Some(erased) };
    s.done.store(0, Ordering::Relaxed);
    s.state.store(pack(gen, tasks, 0), Ordering::SeqCst);
    if s.sleepers.load(Ordering::SeqCst) > 0 {
        let _g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    // A panicking task must not unwind past this frame while workers still run tasks that
    // borrow from it: finish the job first, then re-raise.
    let mut panic = None;
    while let Some(t) = claim(s, gen) {
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))) {
            panic.get_or_insert(e);
        }
        s.done.fetch_add(1, Ordering::Release);
    }
    while s.done.load(Ordering::Acquire) < tasks {
        std::hint::spin_loop();
    }
    // SAFETY: as above; clearing keeps no dangling closure in the slot.
    unsafe { *s.task.get() = None };
    if let Some(e) = panic {
        std::panic::resume_unwind(e);
    }
    if s.worker_panicked.swap(false, Ordering::AcqRel) {
        panic!("a CPU kernel task panicked on a pool worker");
    }
}

/// Runs every task on the calling thread. A panicking task is re-raised only after the
/// others have run, as on the pool, so a caller sees the same job whichever path it took.
fn run_inline(tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let mut panic = None;
    for t in 0..tasks {
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))) {
            panic.get_or_insert(e);
        }
    }
    if let Some(e) = panic {
        std::panic::resume_unwind(e);
    }
}

/// Claims the next task of generation `gen`, or `None` when that job has none left.
fn claim(s: &Shared, gen: u64) -> Option<usize> {
    let mut cur = s.state.load(Ordering::Acquire);
    loop {
        let (g, tasks, next) = unpack(cur);
        if g != gen || next >= tasks {
            return None;
        }
        match s.state.compare_exchange_weak(
            cur,
            pack(g, tasks, next + 1),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some(next),
            Err(now) => cur = now,
        }
    }
}

fn worker(s: &'static Shared) {
    let mut seen = 0u64;
    loop {
        let gen = wait_for_job(s, seen);
        seen = gen;
        while let Some(t) = claim(s, gen) {
            // SAFETY: a claimed task keeps the job alive (its owner waits for `done`), and
            // the slot was written before the generation was published (Release/Acquire).
            let f = unsafe { (*s.task.get()).expect("a claimed job has a task") };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))).is_err() {
                s.worker_panicked.store(true, Ordering::Release);
            }
            s.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Spins, then sleeps, until a generation other than `seen` is published.
fn wait_for_job(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let (g, _, _) = unpack(s.state.load(Ordering::Acquire));
        if g != seen {
            return g;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            let waited = start.elapsed();
            if waited > SPIN {
                break;
            }
            if waited > HOT_SPIN {
                std::thread::yield_now();
                continue;
            }
        }
        std::hint::spin_loop();
    }
    let mut guard = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        s.sleepers.fetch_add(1, Ordering::SeqCst);
        let (g, _, _) = unpack(s.state.load(Ordering::SeqCst));
        if g != seen {
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            return g;
        }
        guard = s
            .wake
            .wait_timeout(guard, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
        s.sleepers.fetch_sub(1, Ordering::SeqCst);
        let (g, _, _) = unpack(s.state.load(Ordering::Acquire));
        if g != seen {
            return g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once() {
        for tasks in [0usize, 1, 2, 3, 17, 1000, 4097] {
            let hits: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
            run(tasks, &|t| {
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{tasks}"
            );
        }
    }

    #[test]
    fn back_to_back_jobs_and_sleeping_workers() {
        let total = AtomicUsize::new(0);
        for round in 0..2000 {
            if round % 500 == 499 {
                // let the workers fall asleep so the wake-up path runs too
                std::thread::sleep(SPIN * 3);
            }
            run(8, &|t| {
                total.fetch_add(t + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 2000 * 36);
    }

    #[test]
    fn concurrent_callers_each_get_their_own_job_done() {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let sum = AtomicUsize::new(0);
                    for _ in 0..300 {
                        run(16, &|t| {
                            sum.fetch_add(t, Ordering::Relaxed);
                        });
                    }
                    sum.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 300 * 120);
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_after_the_job_ends() {
        let ran = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(64, &|t| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(t != 40, "task 40 fails");
            })
        }));
        assert!(r.is_err());
        assert_eq!(
            ran.load(Ordering::Relaxed),
            64,
            "the job ran to its end first"
        );
        // the pool still works afterwards
        let sum = AtomicUsize::new(0);
        run(10, &|t| {
            sum.fetch_add(t, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 45);
    }

    #[test]
    fn an_inline_job_also_runs_to_its_end_before_the_panic() {
        // The path taken when another thread's job holds the pool (CI ran the test above
        // while a concurrent test owned the slot, and it saw 41 of 64 tasks).
        let ran = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_inline(64, &|t| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(t != 40, "task 40 fails");
            })
        }));
        assert!(r.is_err());
        assert_eq!(ran.load(Ordering::Relaxed), 64);
    }

    #[test]
    fn packing_round_trips() {
        let s = pack(0xdead_beef, 65535, 1234);
        assert_eq!(unpack(s), (0xdead_beef, 65535, 1234));
    }
}
