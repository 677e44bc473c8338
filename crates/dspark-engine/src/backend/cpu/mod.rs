//! Our own CPU kernels behind the candle backend, one file per kernel family, wired in as
//! candle custom ops (`ops.rs`) so that the `Backend` seam and candle itself stay unchanged.
//!
//! All kernels are batch-invariant: a row's result never depends on how many rows share the
//! call, so a verify block reproduces one-token decode steps bit for bit.

pub mod affine;
mod amx;
pub mod attention;
mod attention_simd;
#[cfg(target_arch = "x86_64")]
mod bf16_dot;
pub mod bf16_rebuild;
pub mod bf16_tiles;
pub mod contention;
pub mod gemv;
pub mod glu;
pub mod norm;
pub mod ops;
pub mod pool;
pub mod qexact;
#[cfg(target_arch = "x86_64")]
mod qexact_avx2;
#[cfg(target_arch = "x86_64")]
mod qexact_avx512;
pub mod qgemv;
#[cfg(target_arch = "x86_64")]
mod qgemv_avx2;
pub mod qpack;
pub mod qpanel;
#[cfg(target_arch = "x86_64")]
mod qpanel_amx;
#[cfg(target_arch = "x86_64")]
mod qpanel_vnni;
pub mod qrows;
pub mod rope;
pub mod softmax;

/// Whether this x86 CPU has AVX2, FMA and F16C (the level of the `*_avx2` kernels; every CPU
/// with AVX2 has F16C too).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Whether the f32 GEMV family (dense and exact packed) may take its AVX-512 forms:
/// `DSPARK_GEMV_AVX512=0` makes it run what AVX2-only CPUs run (their tiles, their prefill
/// GEMM), for tests and probes on an AVX-512 machine. Read once.
#[cfg(target_arch = "x86_64")]
pub(crate) fn gemv_avx512_allowed() -> bool {
    static ALLOWED: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("DSPARK_GEMV_AVX512").map_or(true, |v| v != "0"));
    *ALLOWED
}

/// One line on the kernel families this CPU runs (`dspark doctor`): the vector level, whether
/// a dequantized GGUF stays packed under the exact kernel, and the forms kept-quantized
/// weights take.
pub fn describe() -> String {
    #[cfg(target_arch = "x86_64")]
    let level = if std::is_x86_feature_detected!("avx512f") && gemv_avx512_allowed() {
        "AVX-512"
    } else if avx2_fma() {
        "AVX2 + FMA"
    } else {
        "plain Rust (no AVX2)"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let level = "plain Rust";
    let exact = if qexact::available() {
        "dequantized GGUF held packed (exact)"
    } else {
        "dequantized GGUF held dense"
    };
    let kept = match (qpanel::available(), qpanel::amx_available()) {
        (true, true) => "kept-quantized Q8_0/Q4: VNNI panels + AMX-INT8 tiles",
        (true, false) => "kept-quantized Q8_0/Q4: VNNI panels",
        _ => "kept-quantized: pair tiles",
    };
    let bf16 = if bf16_tiles::amx() {
        "--matmul bf16: AMX-BF16 tiles"
    } else if bf16_tiles::available() {
        "--matmul bf16: AVX-512 BF16 dot products"
    } else {
        "--matmul bf16: not here (no AMX-BF16; f32 instead)"
    };
    format!("{level}; {exact}; {kept}; {bf16}")
}

/// Below this many multiply-adds a call runs inline: a thread hand-off costs more.
const PARALLEL_WORK: usize = 1 << 15;

/// Column alignment of parallel tasks: 16 f32 outputs fill one 64-byte cache line, so two
/// tasks never write the same line of a row.
pub(crate) const TASK_ALIGN: usize = 16;

/// One task's window on a row-major `[rows, n]` output: it may write columns `j0..j1` of every
/// row and nothing else, which is what makes concurrent tasks sound.
pub(crate) struct Columns {
    ptr: *mut f32,
    rows: usize,
    n: usize,
    pub j0: usize,
    pub j1: usize,
}

impl Columns {
    /// `y[r, j] = v`; panics outside this task's window.
    #[inline]
    pub fn set(&self, r: usize, j: usize, v: f32) {
        assert!(
            r < self.rows && (self.j0..self.j1).contains(&j),
            "column task out of its window"
        );
        // SAFETY: in bounds (checked above) and no other task owns column j.
        unsafe { *self.ptr.add(r * self.n + j) = v };
    }

    /// `y[r, j..j + v.len()] = v`, cut at the window's end; panics where `r` or `j` is
    /// outside the window.
    #[inline]
    pub fn set_run(&self, r: usize, j: usize, v: &[f32]) {
        assert!(
            r < self.rows && (self.j0..self.j1).contains(&j),
            "column task out of its window"
        );
        let len = v.len().min(self.j1 - j);
        // SAFETY: columns j..j + len lie in this task's window (checked above), which no other
        // task writes.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr.add(r * self.n + j), len) };
    }
}

#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: only dereferenced through `Columns::set`, whose windows are disjoint, and by
// `row_runs` over disjoint runs of rows.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Splits the `n` output columns of `y` (`[y.len() / n, n]`) into tasks and runs `task` on
/// each: inline when `work` (multiply-adds) is small or the machine is busy ([`contention`]),
/// else on the spinning [`pool`]. Task windows start at multiples of [`TASK_ALIGN`] columns,
/// so kernels whose column tiles divide it (4 for the quantized tiles, 2 for the f32 tile)
/// never see a tile split between tasks.
///
/// Fanned out, each thread gets one contiguous run of columns: a weight matrix is then read
/// as one long sequential stream per thread, which the hardware prefetchers follow. Small
/// interleaved tasks (32 columns each, tried first) made two threads read the demo's LM head
/// at 28 GB/s, slower than one thread's stream; contiguous halves read it at 53 GB/s.
pub(crate) fn column_tasks(y: &mut [f32], n: usize, work: usize, task: impl Fn(&Columns) + Sync) {
    if n == 0 {
        return;
    }
    let rows = y.len() / n;
    let ptr = SendPtr(y.as_mut_ptr());
    let fan_out = work >= PARALLEL_WORK && contention::fan_out();
    let per_task = if fan_out {
        n.div_ceil(pool::threads()).div_ceil(TASK_ALIGN) * TASK_ALIGN
    } else {
        n
    };
    let run = |t: usize| {
        let p = ptr;
        let j0 = t * per_task;
        task(&Columns {
            ptr: p.0,
            rows,
            n,
            j0,
            j1: (j0 + per_task).min(n),
        })
    };
    pool::run(n.div_ceil(per_task), &run);
}

/// Runs `run(first_row, rows)` over `out` (rows of `len` values): inline on the whole buffer
/// unless `fan_out`, else one contiguous run of rows per thread of the spinning [`pool`], so
/// that each thread keeps one scratch buffer and reads its inputs in order.
pub(crate) fn row_runs(
    out: &mut [f32],
    len: usize,
    fan_out: bool,
    run: impl Fn(usize, &mut [f32]) + Sync,
) {
    let len = len.max(1);
    let rows = out.len() / len;
    if !fan_out || rows < 2 {
        return run(0, out);
    }
    let per = rows.div_ceil(pool::threads());
    let base = SendPtr(out.as_mut_ptr());
    pool::run(rows.div_ceil(per), &|c: usize| {
        let p = base;
        let (r0, r1) = (c * per, ((c + 1) * per).min(rows));
        // SAFETY: rows r0..r1 are out[r0*len..r1*len]; the runs of rows are disjoint and
        // `out` outlives the pool job.
        let o = unsafe { std::slice::from_raw_parts_mut(p.0.add(r0 * len), (r1 - r0) * len) };
        run(r0, o)
    });
}

/// On-CPU nanoseconds of this thread, unaffected by time spent descheduled (Linux; for the
/// ignored timing tests of the kernels).
#[cfg(test)]
pub(crate) fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}
