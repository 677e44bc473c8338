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
                        for i in 0..half {
                            d1[i] = x1[i] * c[i] - x2[i] * s[i];
                            d2[i] = x1[i] * s[i] + x2[i] * c[i];
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
