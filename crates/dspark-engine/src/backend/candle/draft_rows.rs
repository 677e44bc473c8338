//! Rows of a matmul weight for drafts only ([`crate::backend::Backend::draft_rows`]: a
//! drafter's head over its draft vocabulary). On the CPU they become Q8_0 blocks, which the
//! fast draft kernel reads at about a quarter of f32's bytes (bf16 tiles stay tiles); on a GPU
//! a dense weight's rows are gathered in its dtype.

use std::sync::Arc;

use candle_core::{DType as CDType, Tensor};

use super::linear::CandleLinear;
use super::{err, CandleBackend};
use crate::backend::cpu::bf16_tiles::Bf16Tiles;
use crate::backend::cpu::qexact;
use crate::backend::cpu::qpack::{QFormat, QPacked};
use crate::backend::{BResult, DType};

/// GGUF Q8_0 blocks of `rows` (`[n, k]` row-major, `k` a multiple of 32): each block of 32
/// values as its f16 scale `max|x| / 127` and the values divided by it, rounded to i8.
pub(super) fn q8_0_bytes(rows: &[f32], k: usize) -> Vec<u8> {
    debug_assert!(k.is_multiple_of(32));
    let mut out = Vec::with_capacity(rows.len() / 32 * 34);
    for block in rows.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
        let d = half::f16::from_f32(amax / 127.0);
        let inv = if d.to_f32() > 0.0 {
            1.0 / d.to_f32()
        } else {
            0.0
        };
        out.extend_from_slice(&d.to_bits().to_le_bytes());
        out.extend(
            block
                .iter()
                .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8 as u8),
        );
    }
    out
}

impl CandleBackend {
    pub(super) fn rows_for_drafts(
        &self,
        w: &CandleLinear,
        ids: &[u32],
    ) -> BResult<Option<CandleLinear>> {
        let fail = |m: String| err(candle_core::Error::Msg(m));
        let check = |n: usize| match ids.iter().find(|&&i| i as usize >= n) {
            Some(bad) => Err(fail(format!("row {bad} is outside the {n}-row weight"))),
            None => Ok(()),
        };
        let (k, rows) = match w {
            CandleLinear::Dense(t) => {
                let (n, k) = t.dims2().map_err(err)?;
                check(n)?;
                let idx = Tensor::from_slice(ids, ids.len(), t.device()).map_err(err)?;
                let rows = t.index_select(&idx, 0).map_err(err)?;
                if !t.device().is_cpu() {
                    return Ok(Some(CandleLinear::Dense(rows)));
                }
                let rows = rows
                    .to_dtype(CDType::F32)
                    .and_then(|r| r.flatten_all())
                    .and_then(|r| r.to_vec1::<f32>())
                    .map_err(err)?;
                (k, rows)
            }
            other => {
                let Some((n, k, row)) = other.packed_rows() else {
                    return Ok(None);
                };
                check(n)?;
                (k, ids.iter().flat_map(|&j| row(j as usize)).collect())
            }
        };
        let m = ids.len();
        if let CandleLinear::Bf16Tiles(_) = w {
            // bf16 values: the tiles hold them exactly
            return Ok(Some(CandleLinear::Bf16Tiles(Arc::new(
                Bf16Tiles::from_f32(&rows, m, k),
            ))));
        }
        let fast = self.device.is_cpu()
            && self.dtype == DType::F32
            && self.cpu_kernels()
            && qexact::available()
            && k.is_multiple_of(32);
        if fast {
            let p = QPacked::from_gguf(QFormat::Q8_0, &q8_0_bytes(&rows, k), m, k).map_err(fail)?;
            return Ok(Some(CandleLinear::Exact(Arc::new(p))));
        }
        let t = Tensor::from_vec(rows, (m, k), &self.device).map_err(err)?;
        let t = t.to_dtype(super::cdtype(self.dtype)).map_err(err)?;
        Ok(Some(CandleLinear::Dense(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::weights::HostTensor;

    /// Rows taken for drafts give the whole weight's matmul columns (within Q8_0's rounding
    /// on the CPU), for a dense weight and an f16 one; ids past the weight are refused.
    #[test]
    fn draft_rows_give_the_weights_columns() {
        let b = CandleBackend::cpu();
        let (n, k) = (200, 64);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 700.0)
            .collect();
        let x: Vec<f32> = (0..3 * k)
            .map(|i| ((i * 104729 % 97) as f32 - 48.0) / 50.0)
            .collect();
        let xt = b.from_f32(&x, &[3, k]).unwrap();
        let ids = [3u32, 17, 18, 150, 199];
        let f16: Vec<u8> = w
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let f16 = HostTensor::Dense {
            shape: vec![n, k],
            dtype: DType::F16,
            bytes: f16.into(),
        };
        for host in [HostTensor::from_f32(vec![n, k], &w), f16] {
            let full = b.linear(&host).unwrap();
            let want = b.to_f32_vec(&b.matmul(&xt, &full).unwrap()).unwrap();
            let rows = b
                .draft_rows(&full, &ids)
                .unwrap()
                .expect("rows of a CPU weight");
            let got = b.to_f32_vec(&b.draft_matmul(&xt, &rows).unwrap()).unwrap();
            for r in 0..3 {
                for (c, &id) in ids.iter().enumerate() {
                    let (g, e) = (got[r * ids.len() + c], want[r * n + id as usize]);
                    assert!(
                        (g - e).abs() <= 0.05 + 0.02 * e.abs(),
                        "row {r} id {id}: {g} vs {e}"
                    );
                }
            }
            let e = b.draft_rows(&full, &[0, n as u32]).err().unwrap().message;
            assert!(e.contains("outside the 200-row weight"), "{e}");
        }
    }

    #[test]
    fn q8_0_blocks_round_each_value_to_its_scale() {
        let mut rows: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        rows[40..].iter_mut().for_each(|x| *x = 0.0);
        let b = q8_0_bytes(&rows, 32);
        assert_eq!(b.len(), 2 * 34);
        for (blk, vals) in b.chunks_exact(34).zip(rows.chunks_exact(32)) {
            let d = half::f16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32();
            let amax = vals.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (&q, &x) in blk[2..].iter().zip(vals) {
                let back = q as i8 as f32 * d;
                assert!(
                    (back - x).abs() <= d / 2.0 + amax * 1e-3,
                    "{x} -> {back} (d {d})"
                );
            }
        }
    }
}
