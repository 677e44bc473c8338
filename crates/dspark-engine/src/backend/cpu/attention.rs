//! Decode/verify attention on the CPU that reads keys and values in place, with any strides
//! (the KV cache is a `narrow` view of a larger buffer): no copy of the cache, no mask tensor,
//! one pass per query row (scores, max-subtracted softmax, weighted sum of values).
//!
//! Each query row is computed alone with a fixed instruction sequence, so the output of a row
//! is the same whether it comes in a verify block or as a single decode step.

use crate::backend::AttnMask;

/// A strided 4-d view `[b, h, l, d]` into a flat f32 buffer (elements, not bytes).
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub dims: [usize; 4],
    pub strides: [usize; 4],
}

impl View<'_> {
    /// Start of the innermost row `[b, h, l, ..]`; the last axis must have stride 1.
    pub(crate) fn row(&self, b: usize, h: usize, l: usize) -> &[f32] {
        let s = self.offset + b * self.strides[0] + h * self.strides[1] + l * self.strides[2];
        &self.data[s..s + self.dims[3]]
    }
}

/// Keys `0..len` visible to query row `i` (absolute position `offset + i`) under `mask`:
/// always a contiguous range `lo..hi`.
fn visible(mask: AttnMask, i: usize, lk: usize) -> (usize, usize) {
    match mask {
        AttnMask::None => (0, lk),
        AttnMask::Causal { offset } => (0, (offset + i + 1).min(lk)),
        AttnMask::SlidingCausal { offset, window } => {
            let p = offset + i;
            ((p + 1).saturating_sub(window), (p + 1).min(lk))
        }
    }
}

/// Shape problems are reported, never panicked on.
#[derive(thiserror::Error, Debug, PartialEq, Eq)]
pub enum AttnShapeError {
    #[error("attention: q {q:?}, k {k:?}, v {v:?} do not fit (want [b,hq,lq,d], [b,hkv,lk,d] x2, hq % hkv == 0)")]
    Mismatch {
        q: [usize; 4],
        k: [usize; 4],
        v: [usize; 4],
    },
    #[error("attention: the last axis of q, k and v must be contiguous")]
    InnerStride,
}

/// `out[b, hq, lq, d]` (contiguous) = softmax(scale · q kᵀ + mask) v with grouped-query heads.
pub fn attention(
    q: View<'_>,
    k: View<'_>,
    v: View<'_>,
    mask: AttnMask,
    scale: f32,
) -> Result<Vec<f32>, AttnShapeError> {
    let [b, hq, lq, d] = q.dims;
    let [bk, hkv, lk, dk] = k.dims;
    if k.dims != v.dims || bk != b || dk != d || hkv == 0 || hq % hkv != 0 {
        return Err(AttnShapeError::Mismatch {
            q: q.dims,
            k: k.dims,
            v: v.dims,
        });
    }
    if [q.strides[3], k.strides[3], v.strides[3]]
        .iter()
        .any(|&s| s != 1 && d > 1)
    {
        return Err(AttnShapeError::InnerStride);
    }
    let rep = hq / hkv;
    let mut out = vec![0f32; b * hq * lq * d];
    if out.is_empty() {
        return Ok(out);
    }
    let row = |task: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        let (bh, i) = (task / lq, task % lq);
        let (bi, h) = (bh / hq, bh % hq);
        let kh = h / rep;
        let qr = q.row(bi, h, i);
        let (lo, hi) = visible(mask, i, lk);
        o.fill(0.0);
        if lo >= hi {
            return; // a row that sees no key (cannot happen for causal masks)
        }
        let simd = super::attention_simd::Row {
            q: qr.as_ptr(),
            k: k.row(bi, kh, lo).as_ptr(),
            ks: k.strides[2],
            v: v.row(bi, kh, lo).as_ptr(),
            vs: v.strides[2],
            n: hi - lo,
            d,
            scale,
        };
        // the last visible rows exist (bounds-checked here) before raw reads up to them
        let _ = (k.row(bi, kh, hi - 1), v.row(bi, kh, hi - 1));
        // SAFETY: q holds d floats; key and value rows lo..hi are in bounds (checked above).
        if unsafe { super::attention_simd::row(&simd, scores, o) } {
            return;
        }
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for j in lo..hi {
            let s = super::gemv::dot(qr, k.row(bi, kh, j)) * scale;
            max = max.max(s);
            scores.push(s);
        }
        let sum = super::softmax::exp_shifted(scores, max);
        let inv = 1.0 / sum;
        for (j, s) in (lo..hi).zip(scores.iter()) {
            super::gemv::axpy(s * inv, v.row(bi, kh, j), o);
        }
    };
    let tasks = b * hq * lq;
    // a decode step over a short context is cheaper than a thread hand-off
    let fan_out = tasks * lk * d >= 1 << 16 && super::contention::fan_out();
    super::row_runs(&mut out, d, fan_out, |t0, o| {
        let mut scores = Vec::with_capacity(lk);
        for (i, o) in o.chunks_mut(d).enumerate() {
            row(t0 + i, o, &mut scores);
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contiguous(data: &[f32], dims: [usize; 4]) -> View<'_> {
        let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
        View {
            data,
            offset: 0,
            dims,
            strides,
        }
    }

    /// Straightforward f64 reference from the definition.
    fn reference(q: &View, k: &View, v: &View, mask: AttnMask, scale: f32) -> Vec<f32> {
        let [b, hq, lq, d] = q.dims;
        let (hkv, lk) = (k.dims[1], k.dims[2]);
        let mut out = vec![];
        for bi in 0..b {
            for h in 0..hq {
                let kh = h / (hq / hkv);
                for i in 0..lq {
                    let (lo, hi) = visible(mask, i, lk);
                    let s: Vec<f64> = (lo..hi)
                        .map(|j| {
                            let (qr, kr) = (q.row(bi, h, i), k.row(bi, kh, j));
                            qr.iter()
                                .zip(kr)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum::<f64>()
                                * scale as f64
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..d {
                        let acc: f64 = (lo..hi)
                            .zip(&e)
                            .map(|(j, w)| w / z * v.row(bi, kh, j)[c] as f64)
                            .sum();
                        out.push(acc as f32);
                    }
                }
            }
        }
        out
    }

    fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn matches_the_definition_and_is_row_invariant() {
        let mut seed = 7;
        for &(hq, hkv, lq, lk, d) in &[
            (4, 2, 5, 9, 8),
            (3, 3, 1, 70, 64),
            (9, 3, 17, 40, 64),
            (8, 2, 3, 13, 128),
            (2, 1, 2, 9, 256),
            (2, 2, 4, 21, 32),
        ] {
            // keys/values live in a bigger cache buffer (capacity 96), read through a view
            let cap = 96;
            let kbuf = rand_vec(hkv * cap * d, &mut seed);
            let vbuf = rand_vec(hkv * cap * d, &mut seed);
            let qd = rand_vec(hq * lq * d, &mut seed);
            let strided = |data| View {
                data,
                offset: 0,
                dims: [1, hkv, lk, d],
                strides: [hkv * cap * d, cap * d, d, 1],
            };
            let q = contiguous(&qd, [1, hq, lq, d]);
            for mask in [
                AttnMask::None,
                AttnMask::Causal { offset: lk - lq },
                AttnMask::SlidingCausal {
                    offset: lk - lq,
                    window: 6,
                },
            ] {
                let got = attention(q, strided(&kbuf), strided(&vbuf), mask, 0.3).unwrap();
                let want = reference(&q, &strided(&kbuf), &strided(&vbuf), mask, 0.3);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, |m, e| {
                        assert!(!e.is_nan(), "NaN in attention output");
                        m.max(e)
                    });
                assert!(err < 1e-5, "{mask:?}: max error {err}");
                if let AttnMask::Causal { offset } = mask {
                    // the last query row alone (a decode step) gives the same bits
                    let qs = View {
                        offset: (lq - 1) * d,
                        dims: [1, hq, 1, d],
                        ..q
                    };
                    let one = attention(
                        qs,
                        strided(&kbuf),
                        strided(&vbuf),
                        AttnMask::Causal {
                            offset: offset + lq - 1,
                        },
                        0.3,
                    )
                    .unwrap();
                    for h in 0..hq {
                        let blk = &got[(h * lq + lq - 1) * d..(h * lq + lq) * d];
                        assert_eq!(blk, &one[h * d..(h + 1) * d], "row invariance, head {h}");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let z = vec![0f32; 64];
        let q = contiguous(&z, [1, 3, 1, 4]);
        let k = contiguous(&z, [1, 2, 2, 4]);
        assert!(matches!(
            attention(q, k, k, AttnMask::None, 1.0),
            Err(AttnShapeError::Mismatch { .. })
        ));
    }
}
