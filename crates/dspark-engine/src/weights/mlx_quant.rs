//! MLX affine quantization (the mlx-community layout): `weight` holds `bits`-wide codes packed
//! little-end-first into u32 words along the input axis, with per-group `scales` and `biases`.

use super::dense_to_f32;
use crate::backend::DType;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct MlxQuantized {
    pub out_features: usize,
    pub in_features: usize,
    pub bits: usize,
    pub group_size: usize,
    /// `[out, in * bits / 32]` packed codes.
    pub packed: Arc<[u32]>,
    /// `[out, in / group_size]`, as stored (f32, f16 or bf16).
    pub scales: (DType, Arc<[u8]>),
    pub biases: (DType, Arc<[u8]>),
}

impl MlxQuantized {
    /// Checks the packed and per-group shapes; `Err` describes the mismatch.
    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.bits, 2 | 3 | 4 | 5 | 6 | 8) {
            return Err(format!("unsupported bits {}", self.bits));
        }
        if self.group_size == 0 || !self.in_features.is_multiple_of(self.group_size) {
            return Err(format!(
                "input size {} is not a multiple of group_size {}",
                self.in_features, self.group_size
            ));
        }
        let words = self.in_features * self.bits / 32;
        if self.packed.len() != self.out_features * words {
            return Err(format!(
                "packed weight has {} words, expected {} x {}",
                self.packed.len(),
                self.out_features,
                words
            ));
        }
        let groups = self.out_features * self.in_features / self.group_size;
        for (what, (dt, b)) in [("scales", &self.scales), ("biases", &self.biases)] {
            if b.len() != groups * dt.size_in_bytes() {
                return Err(format!(
                    "{what} has {} bytes, expected {groups} values",
                    b.len()
                ));
            }
        }
        Ok(())
    }

    pub fn nbytes(&self) -> usize {
        self.packed.len() * 4 + self.scales.1.len() + self.biases.1.len()
    }

    /// Row-major `[out, in]` f32 weights.
    pub fn dequantize(&self) -> Vec<f32> {
        let scales = dense_to_f32(self.scales.0, &self.scales.1);
        let biases = dense_to_f32(self.biases.0, &self.biases.1);
        let (bits, n_in) = (self.bits, self.in_features);
        let words_per_row = n_in * bits / 32;
        let groups_per_row = n_in / self.group_size;
        let mask = (1u64 << bits) - 1;
        let mut out = Vec::with_capacity(self.out_features * n_in);
        for r in 0..self.out_features {
            let row = &self.packed[r * words_per_row..(r + 1) * words_per_row];
            for i in 0..n_in {
                // codes may straddle words for 3/5/6 bits: read a 64-bit window
                let bit = i * bits;
                let w = bit / 32;
                let lo = row[w] as u64;
                let hi = if w + 1 < row.len() {
                    row[w + 1] as u64
                } else {
                    0
                };
                let q = (((hi << 32) | lo) >> (bit % 32)) & mask;
                let g = r * groups_per_row + i / self.group_size;
                out.push(scales[g] * q as f32 + biases[g]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Arc<[u8]> {
        v.iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn four_bit_codes_unpack_low_nibble_first() {
        // one row, 8 inputs, one group: codes 0..7 packed into one word
        let word: u32 = (0..8u32).map(|j| j << (4 * j)).sum();
        let q = MlxQuantized {
            out_features: 1,
            in_features: 8,
            bits: 4,
            group_size: 8,
            packed: vec![word].into(),
            scales: (DType::F32, f32_bytes(&[0.5])),
            biases: (DType::F32, f32_bytes(&[-1.0])),
        };
        q.validate().unwrap();
        let w = q.dequantize();
        let want: Vec<f32> = (0..8).map(|j| 0.5 * j as f32 - 1.0).collect();
        assert_eq!(w, want);
    }

    #[test]
    fn eight_bit_uses_four_codes_per_word() {
        let word: u32 = 1 | (2 << 8) | (3 << 16) | (255 << 24);
        let q = MlxQuantized {
            out_features: 1,
            in_features: 4,
            bits: 8,
            group_size: 4,
            packed: vec![word].into(),
            scales: (DType::F32, f32_bytes(&[1.0])),
            biases: (DType::F32, f32_bytes(&[0.0])),
        };
        assert_eq!(q.dequantize(), vec![1.0, 2.0, 3.0, 255.0]);
    }

    #[test]
    fn wrong_packed_length_is_reported() {
        let q = MlxQuantized {
            out_features: 2,
            in_features: 8,
            bits: 4,
            group_size: 8,
            packed: vec![0u32].into(),
            scales: (DType::F32, f32_bytes(&[1.0, 1.0])),
            biases: (DType::F32, f32_bytes(&[0.0, 0.0])),
        };
        assert!(q.validate().unwrap_err().contains("packed weight"));
    }
}
