//! GEMV for MLX affine-quantized weights (4- and 8-bit codes, groups of 32/64/128 along the
//! input axis, `w = scale · q + bias` per group), with f32 activations: the weights stay packed
//! as MLX stores them and are widened in registers, so results match the dequantized f32
//! matmul up to f32 rounding (no activation quantization).
//!
//! Per output: Σ_groups [scale_g · Σ_i q_i x_i + bias_g · Σ_i x_i], groups in order, each
//! inner sum in 8 f32 lanes: the same sequence for every row count (batch invariance).

/// Scales/biases as MLX stores them (one value per group, row-major `[out, in / group]`).
#[derive(Clone, Copy)]
pub enum GroupParams<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    Bf16(&'a [half::bf16]),
}

impl GroupParams<'_> {
    fn get(&self, i: usize) -> f32 {
        match self {
            GroupParams::F32(v) => v[i],
            GroupParams::F16(v) => v[i].to_f32(),
            GroupParams::Bf16(v) => v[i].to_f32(),
        }
    }
    fn len(&self) -> usize {
        match self {
            GroupParams::F32(v) => v.len(),
            GroupParams::F16(v) => v.len(),
            GroupParams::Bf16(v) => v.len(),
        }
    }
}

/// One packed affine matrix `[n, k]`: `codes` are the MLX words as little-endian bytes.
#[derive(Clone, Copy)]
pub struct Affine<'a> {
    pub codes: &'a [u8],
    pub bits: usize,
    pub group: usize,
    pub scales: GroupParams<'a>,
    pub biases: GroupParams<'a>,
}

/// Whether the kernel takes this layout (else the caller dequantizes).
pub fn supported(bits: usize, group: usize, k: usize) -> bool {
    matches!(bits, 4 | 8) && group > 0 && group.is_multiple_of(32) && k.is_multiple_of(group)
}

/// `y[m * n] = x[m * k] · wᵀ`. Panics on inconsistent sizes (callers check [`supported`]).
pub fn affine_gemv(x: &[f32], m: usize, k: usize, w: Affine<'_>, n: usize, y: &mut [f32]) {
    assert!(supported(w.bits, w.group, k), "affine: unsupported layout");
    assert_eq!(x.len(), m * k, "affine: x is not m*k");
    assert_eq!(y.len(), m * n, "affine: y is not m*n");
    let row_bytes = k * w.bits / 8;
    let gpr = k / w.group;
    assert_eq!(w.codes.len(), n * row_bytes, "affine: codes are not n rows");
    assert!(
        w.scales.len() == n * gpr && w.biases.len() == n * gpr,
        "affine: group params"
    );
    // 4-bit: byte j holds elements 2j (low nibble) and 2j+1 (high nibble); reorder x once per
    // 32-element chunk as [even | odd] so nibble planes meet their activations
    let xs: std::borrow::Cow<[f32]> = if w.bits == 4 {
        x.chunks_exact(32)
            .flat_map(|c| {
                (0..16)
                    .map(move |i| c[2 * i])
                    .chain((0..16).map(move |i| c[2 * i + 1]))
            })
            .collect::<Vec<f32>>()
            .into()
    } else {
        x.into() // 8-bit codes are in element order: no copy
    };
    // per row and group: Σ x (for the bias term)
    let xsum: Vec<f32> = x.chunks_exact(w.group).map(|g| g.iter().sum()).collect();
    let kern = kernel(w.bits);
    super::column_tasks(y, n, n * k * m, |cols| {
        for j in cols.j0..cols.j1 {
            let codes = &w.codes[j * row_bytes..(j + 1) * row_bytes];
            for r in 0..m {
                let xr = &xs[r * k..(r + 1) * k];
                let mut acc = 0f32;
                let mut bias = 0f32;
                let mut lanes = [0f32; 8];
                for g in 0..gpr {
                    let gb = w.group * w.bits / 8;
                    // SAFETY: `kern` fits this CPU; the slices hold one whole group.
                    let p = unsafe {
                        kern(
                            &codes[g * gb..(g + 1) * gb],
                            &xr[g * w.group..(g + 1) * w.group],
                        )
                    };
                    let s = w.scales.get(j * gpr + g);
                    for (l, v) in lanes.iter_mut().zip(p) {
                        *l += s * v;
                    }
                    bias += w.biases.get(j * gpr + g) * xsum[r * gpr + g];
                }
                for v in lanes {
                    acc += v;
                }
                cols.set(r, j, acc + bias);
            }
        }
    });
}

/// Σ q_i x_i of one group as 8 lane sums.
type GroupDot = unsafe fn(&[u8], &[f32]) -> [f32; 8];

fn kernel(bits: usize) -> GroupDot {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return if bits == 4 { x86::dot4 } else { x86::dot8 };
    }
    if bits == 4 {
        portable::dot4
    } else {
        portable::dot8
    }
}

mod portable {
    /// x is [even | odd] per 32-chunk; lane l sums elements ≡ l (mod 8) of each plane.
    pub unsafe fn dot4(codes: &[u8], x: &[f32]) -> [f32; 8] {
        let mut l = [0f32; 8];
        for (c, xc) in codes.chunks_exact(16).zip(x.chunks_exact(32)) {
            for i in 0..16 {
                l[i % 8] += (c[i] & 0x0f) as f32 * xc[i];
            }
            for i in 0..16 {
                l[i % 8] += (c[i] >> 4) as f32 * xc[16 + i];
            }
        }
        l
    }

    pub unsafe fn dot8(codes: &[u8], x: &[f32]) -> [f32; 8] {
        let mut l = [0f32; 8];
        for (i, (c, xv)) in codes.iter().zip(x).enumerate() {
            l[i % 8] += *c as f32 * xv;
        }
        l
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn widen8(p: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot4(codes: &[u8], x: &[f32]) -> [f32; 8] {
        let mut acc = _mm256_setzero_ps();
        let mask = _mm_set1_epi8(0x0f);
        let xp = x.as_ptr();
        for (c, chunk) in codes.chunks_exact(16).enumerate() {
            let b = _mm_loadu_si128(chunk.as_ptr() as *const __m128i);
            let lo = _mm_and_si128(b, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
            let o = xp.add(32 * c);
            acc = _mm256_fmadd_ps(widen8(lo), _mm256_loadu_ps(o), acc);
            acc = _mm256_fmadd_ps(
                widen8(_mm_srli_si128(lo, 8)),
                _mm256_loadu_ps(o.add(8)),
                acc,
            );
            acc = _mm256_fmadd_ps(widen8(hi), _mm256_loadu_ps(o.add(16)), acc);
            acc = _mm256_fmadd_ps(
                widen8(_mm_srli_si128(hi, 8)),
                _mm256_loadu_ps(o.add(24)),
                acc,
            );
        }
        std::mem::transmute::<__m256, [f32; 8]>(acc)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot8(codes: &[u8], x: &[f32]) -> [f32; 8] {
        let mut acc = _mm256_setzero_ps();
        let xp = x.as_ptr();
        for (c, chunk) in codes.chunks_exact(16).enumerate() {
            let b = _mm_loadu_si128(chunk.as_ptr() as *const __m128i);
            let o = xp.add(16 * c);
            acc = _mm256_fmadd_ps(widen8(b), _mm256_loadu_ps(o), acc);
            acc = _mm256_fmadd_ps(widen8(_mm_srli_si128(b, 8)), _mm256_loadu_ps(o.add(8)), acc);
        }
        std::mem::transmute::<__m256, [f32; 8]>(acc)
    }
}

/// Group scales or biases owned by a loaded weight.
#[derive(Clone, Debug)]
pub enum OwnedParams {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
}

impl OwnedParams {
    pub fn view(&self) -> GroupParams<'_> {
        match self {
            OwnedParams::F32(v) => GroupParams::F32(v),
            OwnedParams::F16(v) => GroupParams::F16(v),
            OwnedParams::Bf16(v) => GroupParams::Bf16(v),
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            OwnedParams::F32(v) => v.len() * 4,
            OwnedParams::F16(v) => v.len() * 2,
            OwnedParams::Bf16(v) => v.len() * 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Against the f64 matmul of weights dequantized by MLX's definition (code of element e at
    /// bit e·bits of the row's little-endian words), for 4/8 bits and groups 32/64/128.
    #[test]
    fn matches_dequantized_definition_and_rows_are_invariant() {
        let mut seed = 9;
        for bits in [4usize, 8] {
            for group in [32usize, 64, 128] {
                for &(m, k, n) in &[(1usize, 256usize, 70usize), (5, 512, 33), (3, 128, 1)] {
                    let codes: Vec<u8> = (0..n * k * bits / 8)
                        .map(|_| rng(&mut seed) as u8)
                        .collect();
                    let g = n * k / group;
                    let sc: Vec<half::f16> = (0..g)
                        .map(|_| half::f16::from_f32((rng(&mut seed) % 100) as f32 * 1e-3))
                        .collect();
                    let bi: Vec<half::bf16> = (0..g)
                        .map(|_| half::bf16::from_f32(-((rng(&mut seed) % 100) as f32) * 1e-2))
                        .collect();
                    let mut deq = vec![0f32; n * k];
                    for j in 0..n {
                        for e in 0..k {
                            let bit = e * bits;
                            let byte = codes[j * k * bits / 8 + bit / 8];
                            let q = if bits == 8 {
                                byte
                            } else {
                                (byte >> (bit % 8)) & 15
                            };
                            let gi = j * (k / group) + e / group;
                            deq[j * k + e] = sc[gi].to_f32() * q as f32 + bi[gi].to_f32();
                        }
                    }
                    let x: Vec<f32> = (0..m * k)
                        .map(|_| (rng(&mut seed) % 2000) as f32 / 1000.0 - 1.0)
                        .collect();
                    let w = Affine {
                        codes: &codes,
                        bits,
                        group,
                        scales: GroupParams::F16(&sc),
                        biases: GroupParams::Bf16(&bi),
                    };
                    let mut y = vec![0f32; m * n];
                    affine_gemv(&x, m, k, w, n, &mut y);
                    for r in 0..m {
                        let mut alone = vec![0f32; n];
                        affine_gemv(&x[r * k..(r + 1) * k], 1, k, w, n, &mut alone);
                        assert_eq!(alone[..], y[r * n..(r + 1) * n], "row {r} not invariant");
                        for j in 0..n {
                            let (xr, wj) = (&x[r * k..(r + 1) * k], &deq[j * k..(j + 1) * k]);
                            let exact: f64 =
                                xr.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
                            // f32 rounding of k products of magnitude <= Σ|x·w|
                            let mag: f64 = xr
                                .iter()
                                .zip(wj)
                                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                                .sum();
                            let got = y[r * n + j] as f64;
                            assert!(!got.is_nan());
                            assert!(
                                (got - exact).abs() <= 1e-6 * mag + 1e-6,
                                "bits {bits} g{group}: {got} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }
}
