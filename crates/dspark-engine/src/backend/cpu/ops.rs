//! candle custom ops around the kernels of this folder. They read candle's CPU storage through
//! its layouts, so weights and the KV cache are used where they lie (no copies).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape};

use super::affine::{affine_gemv, Affine};
use super::attention::{attention, View};
use super::bf16_tiles::{self, TileSource};
use super::gemv::{gemv_f32, gemv_narrow};
use super::glu::{glu, Rows};
use super::norm::rms_norm_rows;
use super::qgemv::{qgemv, QPacked};
use super::rope::rope;
use crate::backend::{AttnMask, RopeStyle};

fn msg(m: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(m.to_string())
}

/// `x[.., k] · w[n, k]ᵀ -> [.., n]` for few rows, x f32 (contiguous), w f32, bf16 or f16.
pub struct Gemv;

impl CustomOp2 for Gemv {
    fn name(&self) -> &'static str {
        "dspark-gemv"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x0, x1) = xl
            .contiguous_offsets()
            .ok_or_else(|| msg("gemv: x not contiguous"))?;
        let (w0, w1) = wl
            .contiguous_offsets()
            .ok_or_else(|| msg("gemv: w not contiguous"))?;
        let (xd, wd) = (xl.dims(), wl.dims());
        let (&k, lead) = xd.split_last().ok_or_else(|| msg("gemv: x is a scalar"))?;
        if wd.len() != 2 || wd[1] != k {
            return Err(msg(format!("gemv: x {xd:?} does not fit w {wd:?}")));
        }
        let (m, n) = (lead.iter().product::<usize>(), wd[0]);
        let x = match xs {
            CpuStorage::F32(v) => &v[x0..x1],
            _ => return Err(msg("gemv: x must be f32")),
        };
        let mut y = vec![0f32; m * n];
        match ws {
            CpuStorage::F32(w) => gemv_f32(x, m, k, &w[w0..w1], n, &mut y),
            CpuStorage::BF16(w) => gemv_narrow(x, m, k, &w[w0..w1], n, &mut y),
            CpuStorage::F16(w) => gemv_narrow(x, m, k, &w[w0..w1], n, &mut y),
            _ => return Err(msg("gemv: w must be f32, bf16 or f16")),
        }
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = n;
        Ok((CpuStorage::F32(y), Shape::from(od)))
    }
}

/// `x[.., k] · wᵀ -> [.., n]` on bf16 tiles (AMX or AVX-512 BF16), x f32 (contiguous).
pub struct Bf16Gemm<'a, W> {
    pub w: &'a W,
}

impl<W: TileSource> CustomOp1 for Bf16Gemm<'_, W> {
    fn name(&self) -> &'static str {
        "dspark-bf16-tiles"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x0, x1) = xl
            .contiguous_offsets()
            .ok_or_else(|| msg("bf16 tiles: x not contiguous"))?;
        let xd = xl.dims();
        let (&k, lead) = xd
            .split_last()
            .ok_or_else(|| msg("bf16 tiles: x is a scalar"))?;
        let (n, wk, _) = self.w.dims();
        if k != wk {
            return Err(msg(format!("bf16 tiles: x {xd:?} does not fit k {wk}")));
        }
        let x = match xs {
            CpuStorage::F32(v) => &v[x0..x1],
            _ => return Err(msg("bf16 tiles: x must be f32")),
        };
        let m = lead.iter().product::<usize>();
        let mut y = vec![0f32; m * n];
        bf16_tiles::gemm(x, m, self.w, &mut y);
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = n;
        Ok((CpuStorage::F32(y), Shape::from(od)))
    }
}

/// Grouped-query attention over strided f32 `q [b,hq,lq,d]`, `k`/`v [b,hkv,lk,d]`.
pub struct Attention {
    pub mask: AttnMask,
    pub scale: f32,
}

fn view<'a>(s: &'a CpuStorage, l: &Layout) -> Result<View<'a>> {
    let data = match s {
        CpuStorage::F32(v) => v.as_slice(),
        _ => return Err(msg("attention: tensors must be f32")),
    };
    let (d, st) = (l.dims(), l.stride());
    if d.len() != 4 {
        return Err(msg(format!("attention: want 4-d tensors, got {d:?}")));
    }
    Ok(View {
        data,
        offset: l.start_offset(),
        dims: [d[0], d[1], d[2], d[3]],
        strides: [st[0], st[1], st[2], st[3]],
    })
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "dspark-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (q, k, v) = (view(qs, ql)?, view(ks, kl)?, view(vs, vl)?);
        let out = attention(q, k, v, self.mask, self.scale).map_err(msg)?;
        Ok((CpuStorage::F32(out), Shape::from(ql.dims().to_vec())))
    }
}

/// Rotary embedding of `x [b, h, l, d]` (any strides, contiguous last axis) at positions
/// `start..start + l`, tables `[max, d / 2]` read in place.
pub struct Rope<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    pub start: usize,
    pub style: RopeStyle,
}

impl CustomOp1 for Rope<'_> {
    fn name(&self) -> &'static str {
        "dspark-rope"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = view(xs, xl)?;
        let half = x.dims[3] / 2;
        if x.strides[3] != 1 || x.dims[3] % 2 != 0 {
            return Err(msg("rope: the last axis must be contiguous and even"));
        }
        if self.cos.len() < (self.start + x.dims[2]) * half || self.sin.len() != self.cos.len() {
            return Err(msg("rope: position past the table"));
        }
        let out = rope(x, self.cos, self.sin, self.start, self.style);
        Ok((CpuStorage::F32(out), Shape::from(xl.dims().to_vec())))
    }
}

/// `x[.., k] · W[n, k]ᵀ` with W GGUF-quantized, packed by `qpack.rs`.
pub struct QGemv<'a> {
    pub w: &'a QPacked,
    /// The dequantized weights' f32 arithmetic ([`super::qexact`]) instead of 8-bit
    /// activations ([`qgemv`]).
    pub exact: bool,
}

impl CustomOp1 for QGemv<'_> {
    fn name(&self) -> &'static str {
        "dspark-qgemv"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x0, x1) = xl
            .contiguous_offsets()
            .ok_or_else(|| msg("qgemv: x not contiguous"))?;
        let xd = xl.dims();
        let (&k, lead) = xd.split_last().ok_or_else(|| msg("qgemv: x is a scalar"))?;
        if k != self.w.k {
            return Err(msg(format!(
                "qgemv: x {xd:?} does not fit a [{}, {}] {:?} weight",
                self.w.n, self.w.k, self.w.fmt
            )));
        }
        let x = match xs {
            CpuStorage::F32(v) => &v[x0..x1],
            _ => return Err(msg("qgemv: x must be f32")),
        };
        let m = lead.iter().product::<usize>();
        let mut y = vec![0f32; m * self.w.n];
        if self.exact {
            super::qexact::gemv(x, m, self.w, &mut y);
        } else {
            qgemv(x, m, self.w, &mut y);
        }
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = self.w.n;
        Ok((CpuStorage::F32(y), Shape::from(od)))
    }
}

/// `x[.., k] · W[n, k]ᵀ` with W MLX affine-quantized (codes, scales and biases as stored).
pub struct AffineGemv<'a> {
    pub w: Affine<'a>,
    pub n: usize,
}

impl CustomOp1 for AffineGemv<'_> {
    fn name(&self) -> &'static str {
        "dspark-affine-gemv"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x0, x1) = xl
            .contiguous_offsets()
            .ok_or_else(|| msg("affine: x not contiguous"))?;
        let xd = xl.dims();
        let (&k, lead) = xd
            .split_last()
            .ok_or_else(|| msg("affine: x is a scalar"))?;
        if !super::affine::supported(self.w.bits, self.w.group, k)
            || self.w.codes.len() != self.n * k * self.w.bits / 8
        {
            return Err(msg(format!(
                "affine: x {xd:?} does not fit the {}-bit weight",
                self.w.bits
            )));
        }
        let x = match xs {
            CpuStorage::F32(v) => &v[x0..x1],
            _ => return Err(msg("affine: x must be f32")),
        };
        let m = lead.iter().product::<usize>();
        let mut y = vec![0f32; m * self.n];
        affine_gemv(x, m, k, self.w, self.n, &mut y);
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = self.n;
        Ok((CpuStorage::F32(y), Shape::from(od)))
    }
}

/// `silu(gate) · up`, or with `gelu` `gelu_tanh(gate) · up` (Gemma's MLP), over two f32 views
/// with the same shape (last axis contiguous).
pub struct Glu {
    pub gelu: bool,
}

fn rows<'a>(s: &'a CpuStorage, l: &'a Layout) -> Result<Rows<'a>> {
    let data = match s {
        CpuStorage::F32(v) => v.as_slice(),
        _ => return Err(msg("glu: tensors must be f32")),
    };
    let (d, st) = (l.dims(), l.stride());
    let (&len, lead) = d.split_last().ok_or_else(|| msg("glu: scalar"))?;
    if len > 1 && st[d.len() - 1] != 1 {
        return Err(msg("glu: the last axis must be contiguous"));
    }
    Ok(Rows {
        data,
        offset: l.start_offset(),
        lead_dims: lead,
        lead_strides: &st[..lead.len()],
        len,
    })
}

impl CustomOp2 for Glu {
    fn name(&self) -> &'static str {
        if self.gelu {
            "dspark-geglu"
        } else {
            "dspark-swiglu"
        }
    }

    fn cpu_fwd(
        &self,
        gs: &CpuStorage,
        gl: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        if gl.dims() != ul.dims() {
            return Err(msg(format!("glu: {:?} vs {:?}", gl.dims(), ul.dims())));
        }
        let out = glu(rows(gs, gl)?, rows(us, ul)?, self.gelu);
        Ok((CpuStorage::F32(out), Shape::from(gl.dims().to_vec())))
    }
}

fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<&'a [f32]> {
    let data = match s {
        CpuStorage::F32(v) => v.as_slice(),
        _ => return Err(msg(format!("{what}: tensors must be f32"))),
    };
    let (a, b) = l
        .contiguous_offsets()
        .ok_or_else(|| msg(format!("{what}: not contiguous")))?;
    Ok(&data[a..b])
}

/// RMSNorm over the last axis of a contiguous f32 `x` with weight `w` (`norm.rs`: candle's
/// bits, rows' chains side by side).
pub struct RmsNorm {
    pub eps: f32,
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "dspark-rms-norm"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (
            contiguous_f32(xs, xl, "rms_norm")?,
            contiguous_f32(ws, wl, "rms_norm")?,
        );
        if xl.dims().last() != Some(&w.len()) || w.is_empty() {
            return Err(msg(format!(
                "rms_norm: x {:?}, w {:?}",
                xl.dims(),
                wl.dims()
            )));
        }
        let mut out = vec![0f32; x.len()];
        rms_norm_rows(x, None, w, self.eps, &mut out);
        Ok((CpuStorage::F32(out), Shape::from(xl.dims().to_vec())))
    }
}

/// `s = x + a`, then RMSNorm of `s` with weight `w`, in one pass: the output `[2, ..x]` holds
/// `s` then the norm (each half contiguous).
pub struct AddRmsNorm {
    pub eps: f32,
}

impl CustomOp3 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "dspark-add-rms-norm"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        as_: &CpuStorage,
        al: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(xs, xl, "add_rms_norm")?;
        let a = contiguous_f32(as_, al, "add_rms_norm")?;
        let w = contiguous_f32(ws, wl, "add_rms_norm")?;
        if xl.dims() != al.dims() || xl.dims().last() != Some(&w.len()) || w.is_empty() {
            return Err(msg(format!(
                "add_rms_norm: x {:?}, a {:?}, w {:?}",
                xl.dims(),
                al.dims(),
                wl.dims()
            )));
        }
        let mut both = vec![0f32; 2 * x.len()];
        let (sum, out) = both.split_at_mut(x.len());
        rms_norm_rows(x, Some((a, sum)), w, self.eps, out);
        let mut dims = vec![2];
        dims.extend_from_slice(xl.dims());
        Ok((CpuStorage::F32(both), Shape::from(dims)))
    }
}

/// Each row's argmax over the last axis of a contiguous f32 tensor, read in place
/// (`sampling::argmax`'s rule), as u32 ids of the leading shape.
pub struct ArgmaxRows;

impl CustomOp1 for ArgmaxRows {
    fn name(&self) -> &'static str {
        "dspark-argmax-rows"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(xs, xl, "argmax")?;
        let (&n, lead) = xl
            .dims()
            .split_last()
            .ok_or_else(|| msg("argmax: scalar"))?;
        if n == 0 {
            return Err(msg("argmax: empty rows"));
        }
        let ids: Vec<u32> = x.chunks_exact(n).map(crate::sampling::argmax).collect();
        Ok((CpuStorage::U32(ids), Shape::from(lead.to_vec())))
    }
}
