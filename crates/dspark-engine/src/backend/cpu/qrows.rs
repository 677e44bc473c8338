//! Activation rows quantized for [`super::qgemv`]: 8-bit blocks of 32 (scale = max|x| / 127,
//! codes rounded half to even, as llama.cpp's Q8 activations), laid out in the weights' pair
//! order, with the per-group start values and scales the integer dot needs.
//!
//! A decode step quantizes one short row per matrix call, a few hundred times per token, so
//! the buffers are reused per thread ([`with_quantized`]) and the AVX-512 and AVX2 paths
//! quantize a block in a handful of instructions. All paths give the same bytes for finite
//! inputs.

use std::cell::RefCell;

use super::qpack::{QPacked, QK};

/// Activation rows quantized in the pair layout of a [`QPacked`] weight.
pub struct QRows {
    pub(super) np: usize,
    pub(super) nm: usize,
    /// `m · np · 64` codes `[A0‥15, B0‥15, A16‥31, B16‥31]`
    pub(super) codes: Vec<i8>,
    /// `m · np · 16`: `−zp · Σ` of each group of four codes (the integer dot's start value)
    pub(super) start: Vec<i32>,
    /// `m · np · 16`: the block scale of each group of four codes
    pub(super) scale: Vec<f32>,
    /// `m · nm`: `d · Σ codes` per block (for the weight's per-block min)
    pub(super) dsum: Vec<f32>,
    /// `m · np · 4`: each pair's scales `[A, B, A', B']` for the lanes 0-7 and 8-15 of
    /// [`Self::scale`], where `'` is `/ 16` for 4-bit weights (see [`Self::start16`]); this
    /// and `start16` are empty unless [`super::qgemv::reads_compact`]
    pub(super) scale4: Vec<f32>,
    /// `m · np · 16`: [`Self::start`] with lanes 8-15 times 16 for 4-bit weights. The AVX-512
    /// tile multiplies a pair's high nibbles in place (`code · 16`) instead of shifting them
    /// down, so those lanes' integer dots are 16 times larger, and `d / 16` scales them back:
    /// both are exact in powers of two, so every product and sum has the bits of the shifted
    /// form (unless `d / 16` is subnormal: a block whose largest |x| is under ~1e-35). Every
    /// row count takes the same tile arithmetic either way.
    pub(super) start16: Vec<i32>,
}

impl QRows {
    fn empty() -> Self {
        QRows {
            np: 0,
            nm: 0,
            codes: Vec::new(),
            start: Vec::new(),
            scale: Vec::new(),
            dsum: Vec::new(),
            scale4: Vec::new(),
            start16: Vec::new(),
        }
    }

    /// Sizes the buffers for `m` rows of `w`, all zero (an odd last block's partner and the
    /// padding mins stay zero).
    fn reset(&mut self, m: usize, w: &QPacked) {
        fn zeroed<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
            v.clear();
            v.resize(n, T::default());
        }
        self.np = w.np;
        self.nm = w.nm;
        zeroed(&mut self.codes, m * w.np * 64);
        zeroed(&mut self.start, m * w.np * 16);
        zeroed(&mut self.scale, m * w.np * 16);
        zeroed(&mut self.dsum, m * w.nm);
        let compact = super::qgemv::reads_compact(w);
        zeroed(&mut self.scale4, if compact { m * w.np * 4 } else { 0 });
        zeroed(&mut self.start16, if compact { m * w.np * 16 } else { 0 });
    }

    /// Fills [`Self::scale4`] and [`Self::start16`] from the per-lane values (nothing when the
    /// tile does not read them: [`Self::reset`] left them empty).
    fn compact(&mut self, nibbles: bool) {
        let (hi_mul, hi_div) = if nibbles { (16, 16.0) } else { (1, 1.0) };
        for (pair, (s4, st16)) in self
            .scale4
            .chunks_exact_mut(4)
            .zip(self.start16.chunks_exact_mut(16))
            .enumerate()
        {
            let lanes = pair * 16;
            let sc = &self.scale[lanes..lanes + 16];
            s4.copy_from_slice(&[sc[0], sc[4], sc[8] / hi_div, sc[12] / hi_div]);
            for (l, (o, v)) in st16
                .iter_mut()
                .zip(&self.start[lanes..lanes + 16])
                .enumerate()
            {
                *o = if l < 8 { *v } else { *v * hi_mul };
            }
        }
    }
}

/// Quantizes `m` rows of `x` (`m · k`) for `w` into a new buffer.
pub fn quantize_rows(x: &[f32], m: usize, w: &QPacked) -> QRows {
    let mut q = QRows::empty();
    quantize_into(x, m, w, &mut q);
    q
}

/// Runs `f` on `x` quantized for `w`, in a buffer this thread reuses from call to call.
pub fn with_quantized<R>(x: &[f32], m: usize, w: &QPacked, f: impl FnOnce(&QRows) -> R) -> R {
    thread_local! {
        static SCRATCH: RefCell<QRows> = RefCell::new(QRows::empty());
    }
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut q) => {
            quantize_into(x, m, w, &mut q);
            f(&q)
        }
        // a nested call on this thread (none today) gets a buffer of its own
        Err(_) => f(&quantize_rows(x, m, w)),
    })
}

fn quantize_into(x: &[f32], m: usize, w: &QPacked, q: &mut QRows) {
    let k = w.k;
    assert_eq!(x.len(), m * k, "quantize_rows: x is not m*k");
    q.reset(m, w);
    let zp = w.fmt.zero_point();
    let block = block_kernel();
    for r in 0..m {
        for (b, blk) in x[r * k..(r + 1) * k].chunks_exact(QK).enumerate() {
            let at = Slot::new(q, r, b);
            // SAFETY: the kernel was chosen for this CPU; `at` is in bounds of q.
            unsafe { block(blk, zp, q, &at) };
        }
    }
    q.compact(w.fmt.nibbles());
}

/// Quantizes one block of 32 into its slot.
type BlockKernel = unsafe fn(&[f32], i32, &mut QRows, &Slot);

fn block_kernel() -> BlockKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::available() {
            return avx512::block;
        }
        if super::avx2_fma() {
            return avx2::block;
        }
    }
    block_portable_unsafe
}

unsafe fn block_portable_unsafe(blk: &[f32], zp: i32, q: &mut QRows, at: &Slot) {
    block_portable(blk, zp, q, at)
}

/// Where block `b` of row `r` goes.
struct Slot {
    /// first code byte of its pair, and its half within the pair (A = 0, B = 1)
    codes: usize,
    second: usize,
    /// first of its pair's 16 group lanes
    lanes: usize,
    dsum: usize,
}

impl Slot {
    fn new(q: &QRows, r: usize, b: usize) -> Self {
        let pair = r * q.np + b / 2;
        Slot {
            codes: pair * 64,
            second: b % 2,
            lanes: pair * 16,
            dsum: r * q.nm + b,
        }
    }

    /// Index of code `i` (0‥31) of the block.
    fn code(&self, i: usize) -> usize {
        self.codes + 32 * (i / 16) + 16 * self.second + i % 16
    }

    /// Lane of group `g` (0‥7: codes 4g‥4g+3) of the block.
    fn lane(&self, g: usize) -> usize {
        self.lanes + (g / 4) * 8 + self.second * 4 + g % 4
    }
}

fn block_portable(blk: &[f32], zp: i32, q: &mut QRows, at: &Slot) {
    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let codes: [i8; QK] = std::array::from_fn(|i| (blk[i] * id).round_ties_even() as i8);
    for (i, c) in codes.iter().enumerate() {
        q.codes[at.code(i)] = *c;
    }
    let sum: i32 = codes.iter().map(|&c| c as i32).sum();
    q.dsum[at.dsum] = d * sum as f32;
    for (g, four) in codes.chunks_exact(4).enumerate() {
        q.start[at.lane(g)] = -zp * four.iter().map(|&c| c as i32).sum::<i32>();
        q.scale[at.lane(g)] = d;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{QRows, Slot};

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// One block: the portable arithmetic (max of |x|, the same `d` and `1/d`, `x · (1/d)`
    /// rounded half to even by the default MXCSR mode), so the same bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn block(blk: &[f32], zp: i32, q: &mut QRows, at: &Slot) {
        debug_assert_eq!(blk.len(), 32);
        let (v0, v1) = (
            _mm512_loadu_ps(blk.as_ptr()),
            _mm512_loadu_ps(blk.as_ptr().add(16)),
        );
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let (i0, i1) = (
            _mm512_cvtps_epi32(_mm512_mul_ps(v0, id)),
            _mm512_cvtps_epi32(_mm512_mul_ps(v1, id)),
        );
        let (c0, c1) = (_mm512_cvtsepi32_epi8(i0), _mm512_cvtsepi32_epi8(i1));
        let codes = q.codes.as_mut_ptr();
        _mm_storeu_si128(codes.add(at.code(0)) as *mut __m128i, c0);
        _mm_storeu_si128(codes.add(at.code(16)) as *mut __m128i, c1);
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        q.dsum[at.dsum] = d * sum as f32;
        // sums of each four consecutive codes: u8 ones · i8 codes, four products per lane
        let ones = _mm_set1_epi8(1);
        let nzp = _mm_set1_epi32(-zp);
        let g0 = _mm_mullo_epi32(_mm_dpbusd_epi32(_mm_setzero_si128(), ones, c0), nzp);
        let g1 = _mm_mullo_epi32(_mm_dpbusd_epi32(_mm_setzero_si128(), ones, c1), nzp);
        _mm_storeu_si128(q.start.as_mut_ptr().add(at.lane(0)) as *mut __m128i, g0);
        _mm_storeu_si128(q.start.as_mut_ptr().add(at.lane(4)) as *mut __m128i, g1);
        let dv = _mm_set1_ps(d);
        _mm_storeu_ps(q.scale.as_mut_ptr().add(at.lane(0)), dv);
        _mm_storeu_ps(q.scale.as_mut_ptr().add(at.lane(4)), dv);
    }
}

/// The same bytes on AVX2: the portable arithmetic eight lanes at a time (`x · (1/d)` rounded
/// half to even by the default MXCSR mode, saturating packs to i8).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{QRows, Slot};

    /// The low and high 128 bits of `v` to `lo` and `hi` (unaligned).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn halves<T>(lo: *mut T, hi: *mut T, v: __m256i) {
        _mm_storeu_si128(lo as *mut __m128i, _mm256_castsi256_si128(v));
        _mm_storeu_si128(hi as *mut __m128i, _mm256_extracti128_si256(v, 1));
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn block(blk: &[f32], zp: i32, q: &mut QRows, at: &Slot) {
        debug_assert_eq!(blk.len(), 32);
        let p = blk.as_ptr();
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let m = _mm256_max_ps(
            _mm256_max_ps(_mm256_and_ps(v[0], abs), _mm256_and_ps(v[1], abs)),
            _mm256_max_ps(_mm256_and_ps(v[2], abs), _mm256_and_ps(v[3], abs)),
        );
        let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        let amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let i = v.map(|vk| _mm256_cvtps_epi32(_mm256_mul_ps(vk, id)));
        // packs interleave 128-bit lanes; the permute restores code order
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(
                _mm256_packs_epi32(i[0], i[1]),
                _mm256_packs_epi32(i[2], i[3]),
            ),
            order,
        );
        let codes = q.codes.as_mut_ptr();
        halves(codes.add(at.code(0)), codes.add(at.code(16)), bytes);
        // sums of each four consecutive codes (groups 0..8), in order after the permute
        let g = _mm256_permutevar8x32_epi32(
            _mm256_hadd_epi32(_mm256_hadd_epi32(i[0], i[1]), _mm256_hadd_epi32(i[2], i[3])),
            order,
        );
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
        let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0b10_11_00_01)));
        q.dsum[at.dsum] = d * sum as f32;
        let st = _mm256_mullo_epi32(g, _mm256_set1_epi32(-zp));
        let start = q.start.as_mut_ptr();
        halves(start.add(at.lane(0)), start.add(at.lane(4)), st);
        let dv = _mm_set1_ps(d);
        _mm_storeu_ps(q.scale.as_mut_ptr().add(at.lane(0)), dv);
        _mm_storeu_ps(q.scale.as_mut_ptr().add(at.lane(4)), dv);
    }
}

#[cfg(test)]
mod tests {
    use super::super::qpack::QFormat;
    use super::*;

    #[test]
    fn both_paths_give_the_same_bytes() {
        let mut seed = 7u64;
        let mut r = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        };
        for (fmt, k, m) in [
            (QFormat::Q8_0, 96, 3),
            (QFormat::Q4_1, 576, 1),
            (QFormat::Q4_0, 64, 2),
            (QFormat::Q4K, 512, 2),
            (QFormat::Q6K, 256, 3),
        ] {
            let (bb, be) = fmt.gguf_block();
            let w = QPacked::from_gguf(fmt, &vec![0u8; 4 * k / be * bb], 4, k).unwrap();
            let mut x: Vec<f32> = (0..m * k).map(|_| r()).collect();
            x[5] = 0.0;
            x[..32].iter_mut().for_each(|v| *v = 0.0); // an all-zero block: d = 0
            x[40] = 127.5 / 127.0 * x[41].abs().max(1e-3); // a near-tie in the rounding
            let mut portable = QRows::empty();
            portable.reset(m, &w);
            let mut kernels: Vec<(&str, BlockKernel)> = vec![("dispatched", block_kernel())];
            #[cfg(target_arch = "x86_64")]
            if super::super::avx2_fma() {
                kernels.push(("avx2", avx2::block));
            }
            for row in 0..m {
                for (b, blk) in x[row * k..(row + 1) * k].chunks_exact(QK).enumerate() {
                    let at = Slot::new(&portable, row, b);
                    block_portable(blk, fmt.zero_point(), &mut portable, &at);
                }
            }
            for (name, kernel) in kernels {
                let mut simd = QRows::empty();
                simd.reset(m, &w);
                for row in 0..m {
                    for (b, blk) in x[row * k..(row + 1) * k].chunks_exact(QK).enumerate() {
                        let at = Slot::new(&simd, row, b);
                        // SAFETY: the kernel's features are present; `at` is in bounds.
                        unsafe { kernel(blk, fmt.zero_point(), &mut simd, &at) };
                    }
                }
                assert_eq!(simd.codes, portable.codes, "{name} {fmt:?}");
                assert_eq!(simd.start, portable.start, "{name} {fmt:?}");
                assert_eq!(simd.scale, portable.scale, "{name} {fmt:?}");
                assert_eq!(simd.dsum, portable.dsum, "{name} {fmt:?}");
            }
            // and through the public entry point
            let simd = quantize_rows(&x, m, &w);
            assert_eq!(simd.codes, portable.codes, "{fmt:?}");
            assert_eq!(simd.start, portable.start, "{fmt:?}");
            assert_eq!(simd.scale, portable.scale, "{fmt:?}");
            assert_eq!(simd.dsum, portable.dsum, "{fmt:?}");
        }
    }
}
