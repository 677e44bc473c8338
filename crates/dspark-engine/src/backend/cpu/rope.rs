//! Rotary position embedding on the CPU, on the calling thread: one pass over a strided
//! `[b, h, l, d]` view into a contiguous output, with the cos/sin tables read in place. A decode
//! step rotates a few hundred numbers per layer, far less than a thread hand-off costs.
//!
//! The arithmetic is candle's (`x1·cos − x2·sin`, `x1·sin + x2·cos`, no fused multiply-add), so
//! results are the same bits as `candle_nn::rotary_emb`.

use super::attention::View;
use crate::backend::RopeStyle;

/// Rotates `x` at positions `start..start + l`; `cos`/`sin` are `[max_positions, d / 2]`.
/// Panics if the tables are too short or the last axis is strided (callers check).
pub fn rope(x: View<'_>, cos: &[f32], sin: &[f32], start: usize, style: RopeStyle) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected.
        return unsafe { rope_avx512(x, cos, sin, start, style) };
    }
    rope_body(x, cos, sin, start, style)
}

/// [`rope_body`] compiled for AVX-512: the same multiplies and adds on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rope_avx512(
    x: View<'_>,
    cos: &[f32],
    sin: &[f32],
    start: usize,
    style: RopeStyle,
) -> Vec<f32> {
    rope_body(x, cos, sin, start, style)
}

#[inline(always)]
fn rope_body(x: View<'_>, cos: &[f32], sin: &[f32], start: usize, style: RopeStyle) -> Vec<f32> {
    let [b, h, l, d] = x.dims;
    let half = d / 2;
    assert!(
        cos.len() >= (start + l) * half && sin.len() == cos.len(),
        "rope: tables too short"
    );
    let mut out = vec![0f32; b * h * l * d];
    let mut o = 0;
    for bi in 0..b {
        for hi in 0..h {
            for li in 0..l {
                let src = x.row(bi, hi, li);
                let (c, s) = (
                    &cos[(start + li) * half..(start + li + 1) * half],
                    &sin[(start + li) * half..(start + li + 1) * half],
                );
                let dst = &mut out[o..o + d];
                match style {
                    RopeStyle::Half => {
                        let (x1, x2) = src.split_at(half);
                        let (d1, d2) = dst.split_at_mut(half);
                        let it = d1.iter_mut().zip(d2.iter_mut()).zip(x1.iter().zip(x2));
                        for (((o1, o2), (&a, &bb)), (&ci, &si)) in it.zip(c.iter().zip(s)) {
                            *o1 = a * ci - bb * si;
                            *o2 = a * si + bb * ci;
                        }
                    }
                    RopeStyle::Interleaved => {
                        for i in 0..half {
                            let (a, bb) = (src[2 * i], src[2 * i + 1]);
                            dst[2 * i] = a * c[i] - bb * s[i];
                            dst[2 * i + 1] = a * s[i] + bb * c[i];
                        }
                    }
                }
                o += d;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Both styles give `candle_nn::rotary_emb`'s bits, on a strided view (heads transposed,
    /// as the layers pass them) at an offset into the tables.
    #[test]
    fn rotations_give_candles_bits() {
        let (b, h, l, d, max, start) = (1, 3, 5, 64, 40, 7);
        let mut seed = 9u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        };
        let data: Vec<f32> = (0..b * l * h * d).map(|_| next()).collect();
        let cos: Vec<f32> = (0..max * d / 2).map(|_| next()).collect();
        let sin: Vec<f32> = (0..max * d / 2).map(|_| next()).collect();
        // stored [b, l, h, d], viewed as [b, h, l, d]
        let x = View {
            data: &data,
            offset: 0,
            dims: [b, h, l, d],
            strides: [l * h * d, d, h * d, 1],
        };
        let dev = Device::Cpu;
        let xt = Tensor::from_slice(&data, (b, l, h, d), &dev)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap();
        let table = |v: &[f32]| {
            Tensor::from_slice(v, (max, d / 2), &dev)
                .unwrap()
                .narrow(0, start, l)
                .unwrap()
        };
        let (ct, st) = (table(&cos), table(&sin));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for style in [RopeStyle::Half, RopeStyle::Interleaved] {
            let got = rope(x, &cos, &sin, start, style);
            let want = match style {
                RopeStyle::Half => candle_nn::rotary_emb::rope(&xt, &ct, &st),
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&xt, &ct, &st),
            }
            .unwrap();
            let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(bits(&got), bits(&want), "{style:?}");
        }
    }
}
