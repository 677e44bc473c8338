//! Per-layer key/value cache with O(1) rollback. Buffers grow by doubling; `truncate` only
//! moves the length, and the next append overwrites the stale rows.

use crate::backend::{BResult, Backend};

pub struct LayerKv<B: Backend> {
    k: Option<B::Tensor>,
    v: Option<B::Tensor>,
    cap: usize,
}

/// Keys and values for every layer of one sequence, `[1, kv_heads, len, head_dim]` each.
pub struct KvCache<B: Backend> {
    layers: Vec<LayerKv<B>>,
    len: usize,
    max_len: usize,
}

impl<B: Backend> KvCache<B> {
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        let layers = (0..num_layers)
            .map(|_| LayerKv {
                k: None,
                v: None,
                cap: 0,
            })
            .collect();
        KvCache {
            layers,
            len: 0,
            max_len,
        }
    }

    /// Committed positions.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Rolls back to `len` positions (no-op when `len >= self.len()`). O(1).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Drops everything, keeping allocations.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Marks `n` more positions as committed after every layer appended them.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Writes `k`/`v` (`[1, h, n, d]`) for `layer` at the committed length and returns views
    /// of all `len + n` positions. The length moves only on [`KvCache::advance`].
    pub fn append(
        &mut self,
        b: &B,
        layer: usize,
        k: &B::Tensor,
        v: &B::Tensor,
    ) -> BResult<(B::Tensor, B::Tensor)> {
        let dims = b.dims(k);
        let (h, n, d) = (dims[1], dims[2], dims[3]);
        let need = self.len + n;
        let slot = &mut self.layers[layer];
        if need > slot.cap || slot.k.is_none() {
            let mut cap = slot.cap.max(64);
            while cap < need {
                cap *= 2;
            }
            let cap = cap.min(self.max_len.max(need));
            let nk = b.zeros(&[1, h, cap, d])?;
            let nv = b.zeros(&[1, h, cap, d])?;
            let (nk, nv) = match (&slot.k, &slot.v) {
                (Some(ok), Some(ov)) if self.len > 0 => {
                    let ok = b.narrow(ok, 2, 0, self.len)?;
                    let ov = b.narrow(ov, 2, 0, self.len)?;
                    (
                        b.slice_update(&nk, &ok, 2, 0)?,
                        b.slice_update(&nv, &ov, 2, 0)?,
                    )
                }
                _ => (nk, nv),
            };
            slot.k = Some(nk);
            slot.v = Some(nv);
            slot.cap = cap;
        }
        let kb = b.slice_update(slot.k.as_ref().unwrap(), k, 2, self.len)?;
        let vb = b.slice_update(slot.v.as_ref().unwrap(), v, 2, self.len)?;
        let out = (b.narrow(&kb, 2, 0, need)?, b.narrow(&vb, 2, 0, need)?);
        slot.k = Some(kb);
        slot.v = Some(vb);
        Ok(out)
    }

    /// Views of the committed keys/values of one layer (`None` when empty).
    pub fn layer_view(&self, b: &B, layer: usize) -> BResult<Option<(B::Tensor, B::Tensor)>> {
        let slot = &self.layers[layer];
        match (&slot.k, &slot.v) {
            (Some(k), Some(v)) if self.len > 0 => Ok(Some((
                b.narrow(k, 2, 0, self.len)?,
                b.narrow(v, 2, 0, self.len)?,
            ))),
            _ => Ok(None),
        }
    }
}

/// One layer's committed keys and values on the host: `([1, h, len, d], k, v)`.
pub type HostLayer = (Vec<usize>, Vec<f32>, Vec<f32>);

impl<B: Backend> KvCache<B> {
    /// A deep copy of the first `len` positions (independent storage, so later in-place
    /// writes to either cache never show in the other).
    pub fn deep_prefix(&self, b: &B, len: usize) -> BResult<Self> {
        let len = len.min(self.len);
        let mut out = KvCache::new(self.layers.len(), self.max_len);
        for i in 0..self.layers.len() {
            if let Some((k, v)) = self.layer_view(b, i)? {
                let (k, v) = (b.narrow(&k, 2, 0, len)?, b.narrow(&v, 2, 0, len)?);
                out.append(b, i, &k, &v)?;
            }
        }
        out.len = len;
        Ok(out)
    }

    /// Bytes held by the committed positions (`elem` bytes per element).
    pub fn nbytes(&self, b: &B, elem: usize) -> usize {
        self.layers
            .iter()
            .filter_map(|l| l.k.as_ref())
            .map(|k| {
                let d = b.dims(k);
                2 * d[1] * self.len * d[3] * elem
            })
            .sum()
    }

    /// Committed positions of every layer, copied to the host.
    pub fn export(&self, b: &B) -> BResult<Vec<HostLayer>> {
        let mut out = Vec::with_capacity(self.layers.len());
        for i in 0..self.layers.len() {
            match self.layer_view(b, i)? {
                Some((k, v)) => out.push((b.dims(&k), b.to_f32_vec(&k)?, b.to_f32_vec(&v)?)),
                None => out.push((vec![1, 0, 0, 0], vec![], vec![])),
            }
        }
        Ok(out)
    }

    /// Rebuilds a cache from [`KvCache::export`] output.
    pub fn import(b: &B, layers: &[HostLayer], max_len: usize) -> BResult<Self> {
        let mut out = KvCache::new(layers.len(), max_len);
        let mut len = 0;
        for (i, (shape, k, v)) in layers.iter().enumerate() {
            if shape.iter().product::<usize>() == 0 {
                continue;
            }
            let (kt, vt) = (b.from_f32(k, shape)?, b.from_f32(v, shape)?);
            out.append(b, i, &kt, &vt)?;
            len = shape[2];
        }
        out.len = len;
        Ok(out)
    }
}
