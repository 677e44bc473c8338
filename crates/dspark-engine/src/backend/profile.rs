//! Opt-in wall-time profile per backend operation (`DSPARK_PROFILE=1`), for `dspark bench`'s
//! per-op table. The candle CPU backend is eager, so each op's span is its own cost; an
//! asynchronous device (CUDA) installs [`set_sync`], so that a span waits for the device at
//! both ends and charges each op its own kernels' time (the waits slow the run down: a
//! profile, not a speed measurement). `DSPARK_PROFILE=host` skips the waits: each span is then
//! the host's time to enqueue the op, which says whether a step is bound by the host.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn table() -> &'static Mutex<BTreeMap<&'static str, (f64, u64)>> {
    static T: OnceLock<Mutex<BTreeMap<&'static str, (f64, u64)>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// Whether `DSPARK_PROFILE` is set to something other than `0` (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("DSPARK_PROFILE").is_ok_and(|v| v != "0" && !v.is_empty()))
}

/// Whether spans wait for the device (`DSPARK_PROFILE` other than `host`).
fn synced() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var("DSPARK_PROFILE").map_or(true, |v| v != "host"))
}

type SyncFn = Box<dyn Fn() + Send + Sync>;

fn sync_hook() -> &'static OnceLock<SyncFn> {
    static S: OnceLock<SyncFn> = OnceLock::new();
    &S
}

/// Installs the device wait that every span runs before reading the clock (first one wins).
pub fn set_sync(f: SyncFn) {
    let _ = sync_hook().set(f);
}

fn sync() {
    if !synced() {
        return;
    }
    if let Some(f) = sync_hook().get() {
        f();
    }
}

/// Records the time until it is dropped under `name`.
pub struct Span {
    name: &'static str,
    start: Instant,
}

impl Drop for Span {
    fn drop(&mut self) {
        sync();
        let dt = self.start.elapsed().as_secs_f64();
        if let Ok(mut t) = table().lock() {
            let e = t.entry(self.name).or_insert((0.0, 0));
            e.0 += dt;
            e.1 += 1;
        }
    }
}

/// A span when profiling is on.
pub fn span(name: &'static str) -> Option<Span> {
    enabled().then(|| {
        sync();
        Span {
            name,
            start: Instant::now(),
        }
    })
}

/// `(op, seconds, calls)` recorded so far, largest first; clears the table.
pub fn take() -> Vec<(&'static str, f64, u64)> {
    let mut t = match table().lock() {
        Ok(t) => t,
        Err(p) => p.into_inner(),
    };
    let mut v: Vec<_> = std::mem::take(&mut *t)
        .into_iter()
        .map(|(k, (s, n))| (k, s, n))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}
