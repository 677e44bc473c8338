//! SwiGLU on the CPU: `silu(gate) · up` in one pass over strided views (the two halves of the
//! fused gate/up projection), instead of two elementwise ops on non-contiguous narrows.

use rayon::prelude::*;

/// A strided view whose last axis is contiguous: `rows` rows of `len` elements, row `r`
/// starting at `offset + Σ_d idx_d(r) · strides[d]` over the leading axes.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub lead_dims: &'a [usize],
    pub lead_strides: &'a [usize],
    pub len: usize,
}

impl Rows<'_> {
    fn count(&self) -> usize {
        self.lead_dims.iter().product()
    }

    fn row(&self, mut r: usize) -> &[f32] {
        let mut start = self.offset;
        for (d, s) in self.lead_dims.iter().zip(self.lead_strides).rev() {
            start += (r % d) * s;
            r /= d;
        }
        &self.data[start..start + self.len]
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Contiguous `silu(gate) · up`, row-major over the leading axes.
pub fn swiglu(gate: Rows<'_>, up: Rows<'_>) -> Vec<f32> {
    assert_eq!(gate.count(), up.count(), "swiglu: row counts differ");
    assert_eq!(gate.len, up.len, "swiglu: row lengths differ");
    let mut out = vec![0f32; gate.count() * gate.len];
    let row = |(r, o): (usize, &mut [f32])| {
        for ((y, g), u) in o.iter_mut().zip(gate.row(r)).zip(up.row(r)) {
            *y = silu(*g) * u;
        }
    };
    if out.len() < 1 << 16 || !super::contention::fan_out() {
        out.chunks_mut(gate.len.max(1)).enumerate().for_each(row);
    } else {
        out.par_chunks_mut(gate.len.max(1))
            .enumerate()
            .for_each(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_of_a_fused_row_match_the_two_op_definition() {
        // [2 rows, 2 * 5]: gate = first 5, up = last 5 of each row
        let data: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
        let view = |offset| Rows {
            data: &data,
            offset,
            lead_dims: &[2],
            lead_strides: &[10],
            len: 5,
        };
        let got = swiglu(view(0), view(5));
        for r in 0..2 {
            for i in 0..5 {
                let (g, u) = (data[r * 10 + i], data[r * 10 + 5 + i]);
                let want = g / (1.0 + (-g).exp()) * u;
                assert_eq!(got[r * 5 + i].to_bits(), want.to_bits());
            }
        }
    }
}
