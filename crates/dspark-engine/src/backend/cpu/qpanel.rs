//! Quantized GEMV/GEMM over *panels* of 16 columns: `y[m, n] = x[m, k] · W[n, k]ᵀ` for GGUF
//! Q8_0, Q4_0, Q4_1 and Q4_K weights kept quantized (`--keep-quantized`), on AVX-512 VNNI
//! ([`super::qpanel_vnni`]) and, for calls of [`AMX_ROWS`] rows or more on CPUs with AMX-INT8,
//! on AMX tiles ([`super::qpanel_amx`]). Both give the same bits.
//!
//! The activations are quantized per row to 8-bit blocks of 32 as [`super::qgemv`] does (scale
//! max|x| / 127, ties to even). For each 32-element block and each panel, the kernel forms the
//! exact integer dots `Σ code · xcode` of the 16 columns (one AMX tile multiply for up to 16
//! rows, or eight `vpdpbusd` per row); each row then adds `f32(dot) · (d · dx)` (and, for
//! Q4_1 and Q4_K, `min · (dx · Σ xcode)`) into its 16 column sums, block after block in k order
//! ([`add_dot`]). Every row runs that sequence whatever the number of rows in the call, so a
//! verify block gives the bits of one-row decode steps (batch invariance), and the integer
//! dots are exact, so neither kernel's internal order can show.
//!
//! Why: the pair layout of [`super::qgemv`] spends about 64 vector instructions per row on 512
//! weights (a dot, a scale product, a permute, a convert and an add per column and pair of
//! blocks); a panel takes eight dots and four f32 operations for 16 columns at once. On the
//! 2-core Xeon (Emerald Rapids) one thread's panel-block costs 8 ns at one row against about
//! 15, and 34 (AMX) / 40 (VNNI) ns at 8 rows against about 80.
//!
//! Layout ([`pack`], in [`QPacked::codes`] with `panels` set): for panel `p` and block `b`, at
//! `(p · nb + b) · stride`, the codes in the AMX tile's B layout (`B[r][4c + i]` = code `4r + i`
//! of column `16p + c`; Q4 codes as the nibbles of 256 bytes, rows `2j` and `2j + 1` in the
//! low and high nibbles of bytes `64j‥64j+63`), then the 16 columns' scales, then for Q4_1
//! and Q4_K their mins (f16 where GGUF stores them so, f32 for Q4_K's products of a
//! super-block scale and a 6-bit sub-block scale). One sequential stream per task. Columns
//! past `n` are zero codes with zero scales.

use super::qpack::{decode_block, row_bytes, QFormat, QPacked, QK};

/// Columns per panel (one tile's 16 int32 lanes per row).
pub(super) const PANEL: usize = 16;
/// Rows per pass of the VNNI kernel (its accumulators; the AMX tiles take 16); more rows take
/// more passes.
pub(super) const ROWS: usize = 8;
/// Calls of this many rows or more on Q4 weights take the AMX tiles where the CPU has them
/// (at fewer rows, and on Q8_0 whose 8-row calls are memory-bound, the VNNI kernel was as
/// fast or faster: `qpanel_timing`).
pub(super) const AMX_ROWS: usize = 8;

/// Whether the panel kernels run here: AVX-512 (F, BW, VNNI) and F16C, and `DSPARK_QPANELS`
/// is not `0` (which keeps [`super::qgemv`]'s pair layout, for runs side by side). Read once.
pub fn available() -> bool {
    static ON: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        std::env::var("DSPARK_QPANELS").map_or(true, |v| v != "0") && detect_vnni()
    });
    *ON
}

/// Whether the AMX tiles run here as well: the CPU has AMX-INT8, Linux granted this process
/// the tile state, and `DSPARK_AMX` is not `0` ([`super::amx::granted`]).
pub fn amx_available() -> bool {
    available() && super::amx::granted(super::amx::Unit::Int8)
}

#[cfg(target_arch = "x86_64")]
fn detect_vnni() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vnni")
        && std::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_vnni() -> bool {
    false
}

/// Whether weights of `fmt` take the panel layout when kept quantized.
pub fn takes(fmt: QFormat) -> bool {
    matches!(
        fmt,
        QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K
    ) && available()
}

/// Code bytes of one panel-block: 8-bit codes in the B layout, or their nibbles.
pub(super) fn code_bytes(fmt: QFormat) -> usize {
    if fmt.nibbles() {
        256
    } else {
        512
    }
}

/// Bytes of one of a panel-block's scales and mins: f16 where GGUF stores them, else f32.
pub(super) fn param_bytes(fmt: QFormat) -> usize {
    if fmt.f16_params() {
        2
    } else {
        4
    }
}

/// Bytes of one panel-block: codes, 16 scales, 16 mins for Q4_1 and Q4_K.
pub(super) fn stride(fmt: QFormat) -> usize {
    code_bytes(fmt) + 16 * param_bytes(fmt) * if fmt.has_min() { 2 } else { 1 }
}

/// Byte of code `e` (0‥31) of column `c` (0‥15) in a panel-block's codes, and for nibble
/// formats whether it is the high nibble.
fn code_at(fmt: QFormat, c: usize, e: usize) -> (usize, bool) {
    let (r, i) = (e / 4, e % 4);
    if fmt.nibbles() {
        (64 * (r / 2) + 4 * c + i, r % 2 == 1)
    } else {
        (64 * r + 4 * c + i, false)
    }
}

/// Repacks `n` rows of `k` elements stored as GGUF blocks of `fmt` (Q8_0, Q4_0, Q4_1 or
/// Q4_K) into the panel layout.
pub fn pack(fmt: QFormat, bytes: &[u8], n: usize, k: usize) -> Result<QPacked, String> {
    assert!(matches!(
        fmt,
        QFormat::Q8_0 | QFormat::Q4_0 | QFormat::Q4_1 | QFormat::Q4K
    ));
    let (bb, row_bytes) = (fmt.gguf_block().0, row_bytes(fmt, bytes.len(), n, k)?);
    let nb = k / QK;
    let n_pad = n.div_ceil(PANEL) * PANEL;
    let (st, cb) = (stride(fmt), code_bytes(fmt));
    let mut codes = vec![0u8; n_pad / PANEL * nb * st];
    let mut blocks = Vec::with_capacity(nb);
    for j in 0..n {
        blocks.clear();
        for gb in bytes[j * row_bytes..(j + 1) * row_bytes].chunks_exact(bb) {
            decode_block(fmt, gb, &mut blocks);
        }
        let (p, c) = (j / PANEL, j % PANEL);
        for (b, blk) in blocks.iter().enumerate() {
            let at = (p * nb + b) * st;
            let pb = &mut codes[at..at + st];
            for e in 0..QK {
                let (i, high) = code_at(fmt, c, e);
                let code = blk.codes[e];
                if fmt.nibbles() {
                    pb[i] |= if high { code << 4 } else { code };
                } else {
                    // the signed code (qpack stores it offset by its zero point, 128)
                    pb[i] = (code as i16 - 128) as i8 as u8;
                }
            }
            let pw = param_bytes(fmt);
            let put = |pb: &mut [u8], off: usize, v: f32| {
                let at = off + pw * c;
                if pw == 2 {
                    let h = half::f16::from_f32(v);
                    debug_assert!(h.to_f32() == v || v.is_nan(), "{v}: not an f16 value");
                    pb[at..at + 2].copy_from_slice(&h.to_le_bytes());
                } else {
                    pb[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            };
            put(pb, cb, blk.scale[0]);
            if fmt.has_min() {
                put(pb, cb + 16 * pw, blk.min);
            }
        }
    }
    Ok(QPacked::panels(fmt, n, k, n_pad, codes))
}

/// Code `e` (0‥31) of column `j`'s block `b` as stored (unsigned for Q4, signed for Q8_0),
/// and that block's scale and min.
fn code(w: &QPacked, j: usize, b: usize, e: usize) -> (i32, f32, f32) {
    let (fmt, nb) = (w.fmt, w.k / QK);
    let (st, cb) = (stride(fmt), code_bytes(fmt));
    let (p, c) = (j / PANEL, j % PANEL);
    let pb = &w.codes[(p * nb + b) * st..(p * nb + b + 1) * st];
    let pw = param_bytes(fmt);
    let param = |i: usize| {
        let at = i + pw * c;
        if pw == 2 {
            half::f16::from_le_bytes([pb[at], pb[at + 1]]).to_f32()
        } else {
            f32::from_le_bytes([pb[at], pb[at + 1], pb[at + 2], pb[at + 3]])
        }
    };
    let (i, high) = code_at(fmt, c, e);
    let code = if fmt.nibbles() {
        (if high { pb[i] >> 4 } else { pb[i] & 15 }) as i32
    } else {
        pb[i] as i8 as i32
    };
    let min = if fmt.has_min() {
        param(cb + 16 * pw)
    } else {
        0.0
    };
    (code, param(cb), min)
}

/// Row `j` of a panel-layout weight dequantized to f32, as GGUF defines it.
pub fn dequantize_row(w: &QPacked, j: usize) -> Vec<f32> {
    let zp = if w.fmt.nibbles() {
        w.fmt.zero_point()
    } else {
        0
    };
    (0..w.k)
        .map(|e| {
            let (q, d, min) = code(w, j, e / QK, e % QK);
            d * (q - zp) as f32 + min
        })
        .collect()
}

/// Activation rows quantized in k order: codes, and per block the scale `dx`, the code sum
/// and `dx · Σ codes` (for Q4_1's mins).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) struct Rows {
    pub(super) codes: Vec<i8>,
    pub(super) dx: Vec<f32>,
    pub(super) sum: Vec<i32>,
    pub(super) dsum: Vec<f32>,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) fn quantize(x: &[f32], m: usize, k: usize) -> Rows {
    let mut q = Rows {
        codes: Vec::new(),
        dx: Vec::new(),
        sum: Vec::new(),
        dsum: Vec::new(),
    };
    quantize_into(x, m, k, &mut q);
    q
}

/// [`quantize`] into `q`'s buffers (every element is written).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn quantize_into(x: &[f32], m: usize, k: usize, q: &mut Rows) {
    let nb = k / QK;
    q.codes.resize(m * k, 0);
    q.dx.resize(m * nb, 0.0);
    q.sum.resize(m * nb, 0);
    q.dsum.resize(m * nb, 0.0);
    for (i, blk) in x.chunks_exact(QK).enumerate() {
        let codes = &mut q.codes[i * QK..(i + 1) * QK];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this module runs only where `available` found AVX-512.
        let (d, s) = unsafe { quantize_block_avx512(blk, codes) };
        #[cfg(not(target_arch = "x86_64"))]
        let (d, s) = quantize_block(blk, codes);
        q.dx[i] = d;
        q.sum[i] = s;
        q.dsum[i] = d * s as f32;
    }
}

/// One block of 32: codes `round_ties_even(x / d)` with `d = max|x| / 127`; returns `d` and
/// the codes' sum.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn quantize_block(blk: &[f32], codes: &mut [i8]) -> (f32, i32) {
    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut s = 0i32;
    for (c, v) in codes.iter_mut().zip(blk) {
        *c = (v * id).round_ties_even() as i8;
        s += *c as i32;
    }
    (d, s)
}

/// [`quantize_block`] in AVX-512 (the conversion rounds to nearest even, MXCSR's default).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_block_avx512(blk: &[f32], codes: &mut [i8]) -> (f32, i32) {
    use std::arch::x86_64::*;
    assert!(blk.len() == QK && codes.len() == QK);
    let lo = _mm512_loadu_ps(blk.as_ptr());
    let hi = _mm512_loadu_ps(blk.as_ptr().add(16));
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    let d = amax / 127.0;
    let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
    let cl = _mm512_cvtps_epi32(_mm512_mul_ps(lo, id));
    let ch = _mm512_cvtps_epi32(_mm512_mul_ps(hi, id));
    _mm_storeu_si128(codes.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(cl));
    _mm_storeu_si128(
        codes.as_mut_ptr().add(16) as *mut __m128i,
        _mm512_cvtepi32_epi8(ch),
    );
    (d, _mm512_reduce_add_epi32(_mm512_add_epi32(cl, ch)))
}

/// `y[m · n]` from `x[m · k]` and `w` in the panel layout (the caller checked [`available`]).
pub fn gemv(x: &[f32], m: usize, w: &QPacked, y: &mut [f32]) {
    let amx = m >= AMX_ROWS && w.fmt.nibbles() && amx_available();
    gemv_by(x, m, w, y, amx);
}

/// [`gemv`] on the AMX tiles (`amx`) or the VNNI kernel, whatever the row count (tests).
fn gemv_by(x: &[f32], m: usize, w: &QPacked, y: &mut [f32], amx: bool) {
    assert!(
        w.panels && available(),
        "qpanel::gemv: not a panel weight on an AVX-512 VNNI CPU"
    );
    assert!(!amx || amx_available(), "qpanel::gemv: no AMX tiles here");
    assert_eq!(x.len(), m * w.k, "qpanel: x is not m*k");
    assert_eq!(y.len(), m * w.n, "qpanel: y is not m*n");
    #[cfg(target_arch = "x86_64")]
    {
        // the rows' buffers are reused per calling thread, as qrows does for the pair layout
        thread_local! {
            static SCRATCH: std::cell::RefCell<Option<Rows>> = const { std::cell::RefCell::new(None) };
        }
        let mut run = |q: &Rows| {
            super::column_tasks(y, w.n, w.n * w.k * m, |cols| {
                // SAFETY: `available` checked the CPU (AVX-512 with VNNI), and `amx_available` the
                // AMX tiles and their state where they run; task windows start at multiples of 16
                // columns (TASK_ALIGN), so every panel is whole inside one task.
                unsafe {
                    if amx {
                        super::qpanel_amx::task(w, q, m, cols)
                    } else {
                        super::qpanel_vnni::task(w, q, m, cols)
                    }
                }
            });
        };
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut slot) => {
                let q = slot.get_or_insert_with(|| quantize(&[], 0, w.k));
                quantize_into(x, m, w.k, q);
                run(q)
            }
            // a nested call on this thread (none today) quantizes into buffers of its own
            Err(_) => run(&quantize(x, m, w.k)),
        });
    }
}

/// Writes rows `r0..r0 + rows` of panel `p`'s sums (`acc`) into this task's window.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn store_panel<const N: usize>(
    cols: &super::Columns,
    p: usize,
    r0: usize,
    rows: usize,
    acc: &[std::arch::x86_64::__m512; N],
) {
    let mut row = [0f32; PANEL];
    for (i, a) in acc.iter().enumerate().take(rows) {
        std::arch::x86_64::_mm512_storeu_ps(row.as_mut_ptr(), *a);
        for (c, v) in row.iter().enumerate() {
            let j = p * PANEL + c;
            if j < cols.j1 {
                cols.set(r0 + i, j, *v);
            }
        }
    }
}

/// A panel-block's 16 scales and (Q4_1, Q4_K) mins as f32: f16 widened, or f32 (`F32`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn params<const NIB: bool, const MIN: bool, const F32: bool>(
    pb: *const u8,
) -> (std::arch::x86_64::__m512, std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let cb = if NIB { 256 } else { 512 };
    let load = |at: usize| {
        if F32 {
            _mm512_loadu_ps(pb.add(at) as *const f32)
        } else {
            _mm512_cvtph_ps(_mm256_loadu_si256(pb.add(at) as *const __m256i))
        }
    };
    let d = load(cb);
    let mins = if MIN {
        load(cb + if F32 { 64 } else { 32 })
    } else {
        _mm512_setzero_ps()
    };
    (d, mins)
}

/// The one f32 step both kernels take per row, block and panel, on the block's exact integer
/// dots `dot − zp · Σ xcodes` (16 columns): `acc = fma(f32(dot), d · dx, acc)`, then for Q4_1
/// `acc = fma(min, dx · Σ xcodes, acc)`. Its order is what makes the two kernels' bits equal.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn add_dot<const MIN: bool>(
    acc: &mut std::arch::x86_64::__m512,
    dot: std::arch::x86_64::__m512i,
    d: std::arch::x86_64::__m512,
    mins: std::arch::x86_64::__m512,
    q: &Rows,
    x: usize,
) {
    use std::arch::x86_64::*;
    let s = _mm512_mul_ps(d, _mm512_set1_ps(q.dx[x]));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, *acc);
    if MIN {
        *acc = _mm512_fmadd_ps(mins, _mm512_set1_ps(q.dsum[x]), *acc);
    }
}

#[cfg(test)]
#[path = "qpanel_tests.rs"]
mod tests;
