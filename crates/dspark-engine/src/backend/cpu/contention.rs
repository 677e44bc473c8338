//! Whether our kernels should fan out across threads right now.
//!
//! A decode step is hundreds of kernel calls of a few microseconds each, and every parallel
//! call ends in a barrier. When other processes keep the cores busy, the scheduler parks one
//! of our workers for a whole time slice (milliseconds) while the others wait at the barrier,
//! so fanning out makes each call slower than running it on the calling thread. Every
//! [`PERIOD_MS`] this module reads how much CPU the rest of the machine used (Linux
//! `/proc/stat` minus `/proc/self/stat`) and answers "inline" while others used more than
//! [`BUSY_CORES`] cores. Elsewhere, or when `/proc` cannot be read, it always fans out.
//!
//! `DSPARK_FAN_OUT=always|never|auto` (default auto) overrides the measurement. The answer
//! only changes scheduling: every kernel gives the same bits inline or fanned out.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// How often the machine's load is sampled.
const PERIOD_MS: u64 = 250;
/// Cores' worth of CPU used by other processes above which kernels run inline.
const BUSY_CORES: f64 = 0.5;

const UNKNOWN: u8 = 0;
const FAN_OUT: u8 = 1;
const INLINE: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static NEXT_CHECK_MS: AtomicU64 = AtomicU64::new(0);
static LAST: Mutex<Option<Sample>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Sample {
    /// jiffies over all CPUs: total and busy (not idle/iowait)
    total: u64,
    busy: u64,
    /// this process's user + system jiffies
    ours: u64,
}

fn start() -> &'static Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now)
}

fn mode() -> Option<bool> {
    static MODE: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("DSPARK_FAN_OUT").as_deref() {
        Ok("always") => Some(true),
        Ok("never") => Some(false),
        _ => None,
    })
}

fn sample() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    if cpu.len() < 5 {
        return None;
    }
    let total: u64 = cpu.iter().sum();
    let idle = cpu[3] + cpu[4];
    let ours = process_cpu_ticks()?;
    Some(Sample {
        total,
        busy: total - idle,
        ours,
    })
}

/// User + system clock ticks (1/100 s on Linux) this process has run so far, from
/// `/proc/self/stat`; `None` where that cannot be read.
pub fn process_cpu_ticks() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the parenthesised command name; utime and stime are fields 14 and 15
    let f: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Cores' worth of CPU the rest of the machine used between two samples.
fn others_cores(a: Sample, b: Sample, cpus: usize) -> Option<f64> {
    let dt = b.total.checked_sub(a.total)?;
    if dt == 0 {
        return None;
    }
    let others = b.busy.saturating_sub(a.busy) as f64 - b.ours.saturating_sub(a.ours) as f64;
    Some((others.max(0.0) / dt as f64) * cpus as f64)
}

/// True when a kernel call should fan out across threads (see the module doc).
pub fn fan_out() -> bool {
    if let Some(m) = mode() {
        return m;
    }
    let now = start().elapsed().as_millis() as u64;
    let state = STATE.load(Ordering::Relaxed);
    if state != UNKNOWN && now < NEXT_CHECK_MS.load(Ordering::Relaxed) {
        return state != INLINE;
    }
    NEXT_CHECK_MS.store(now + PERIOD_MS, Ordering::Relaxed);
    let Ok(mut last) = LAST.try_lock() else {
        return state != INLINE;
    };
    let Some(s) = sample() else {
        STATE.store(FAN_OUT, Ordering::Relaxed);
        NEXT_CHECK_MS.store(u64::MAX, Ordering::Relaxed);
        return true;
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = match last.and_then(|a| others_cores(a, s, cpus)) {
        Some(c) if c > BUSY_CORES => INLINE,
        Some(_) => FAN_OUT,
        None => {
            if state == UNKNOWN {
                FAN_OUT
            } else {
                state
            }
        }
    };
    *last = Some(s);
    if next != state {
        tracing::debug!(inline = next == INLINE, "cpu kernels: fan-out changed");
    }
    STATE.store(next, Ordering::Relaxed);
    next != INLINE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_load_is_busy_minus_ours() {
        let a = Sample {
            total: 1000,
            busy: 500,
            ours: 200,
        };
        // 200 jiffies over 2 cpus; 150 busy, 50 of them ours: others used 100/200 of 2 cores
        let b = Sample {
            total: 1200,
            busy: 650,
            ours: 250,
        };
        assert_eq!(others_cores(a, b, 2), Some(1.0));
        assert_eq!(others_cores(a, a, 2), None);
        // our own threads never count as others
        let c = Sample {
            total: 1200,
            busy: 700,
            ours: 400,
        };
        assert_eq!(others_cores(a, c, 2), Some(0.0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn samples_read_on_linux() {
        let s = sample().expect("/proc readable");
        assert!(s.total >= s.busy && s.busy >= 1);
    }
}
