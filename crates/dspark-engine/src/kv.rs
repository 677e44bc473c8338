//! Per-layer key/value cache with O(1) rollback. Buffers grow by doubling; `truncate` only
//! moves the length, and the next append overwrites the stale rows.
//!
//! Sliding-window layers (Gemma) hold a bounded span of positions `base..len`: when the buffer
//! is full, an append drops every position older than `window - 1 + ROLLBACK_SLACK` before its
//! first new token. So a rollback to at most `ROLLBACK_SLACK` positions behind the start of the
//! latest forward is exact (every key a later query can see is still held); [`KvCache::floor`]
//! is the shortest exact length, and truncating below it clears the cache (callers re-prefill).

use crate::backend::{BResult, Backend, BackendError};

/// Positions a sliding layer keeps behind a forward's start beyond its window: the draft-model
/// drafter rolls back up to its drafts per round (`MAX_DRAFT_MODEL_BLOCK` = 16) behind its
/// latest forward; the verifier rolls back to the start of its forward at most.
pub const ROLLBACK_SLACK: usize = 32;

pub struct LayerKv<B: Backend> {
    k: Option<B::Tensor>,
    v: Option<B::Tensor>,
    cap: usize,
    /// Sliding window of this layer (`None`: every position is kept).
    window: Option<usize>,
    /// Absolute position of buffer row 0 (non-zero only for sliding layers).
    base: usize,
}

impl<B: Backend> LayerKv<B> {
    fn new(window: Option<usize>) -> Self {
        LayerKv {
            k: None,
            v: None,
            cap: 0,
            window,
            base: 0,
        }
    }

    /// Shortest length this layer can be truncated to exactly.
    fn floor(&self) -> usize {
        match self.window {
            Some(w) if self.base > 0 => self.base + w - 1,
            _ => 0,
        }
    }
}

/// Keys and values for every layer of one sequence, `[1, kv_heads, len, head_dim]` each.
pub struct KvCache<B: Backend> {
    layers: Vec<LayerKv<B>>,
    len: usize,
    max_len: usize,
    /// Which cache this is (unique in the process) and how many times its buffers were
    /// allocated: together they name the buffers a captured device graph writes
    /// ([`KvCache::buffers_id`]).
    uid: u64,
    generation: u64,
}

/// Source of [`KvCache`] uids.
static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<B: Backend> KvCache<B> {
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        Self::with_windows(&vec![None; num_layers], max_len)
    }

    /// A cache whose layer i keeps only what a sliding window of `windows[i]` needs.
    pub fn with_windows(windows: &[Option<usize>], max_len: usize) -> Self {
        KvCache {
            layers: windows.iter().map(|&w| LayerKv::new(w)).collect(),
            len: 0,
            max_len,
            uid: NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            generation: 0,
        }
    }

    /// Names this cache's buffers as they are now: it changes whenever a layer's buffers are
    /// replaced (growth), and no other cache ever has it. A device graph captured over these
    /// buffers may be replayed while it is unchanged.
    pub fn buffers_id(&self) -> (u64, u64) {
        (self.uid, self.generation)
    }

    /// Grows every layer's buffers to hold `n` positions (the same doubling as appends), so
    /// that a forward up to `n` writes in place. `false` (nothing done) where that cannot be
    /// promised: a layer with no buffer yet or a sliding window, or `n` past the maximum.
    pub fn reserve(&mut self, b: &B, n: usize) -> BResult<bool> {
        if n > self.max_len
            || self
                .layers
                .iter()
                .any(|l| l.window.is_some() || l.k.is_none())
        {
            return Ok(false);
        }
        let len = self.len;
        for i in 0..self.layers.len() {
            if n > self.layers[i].cap {
                let d = b.dims(self.layers[i].k.as_ref().expect("checked above"));
                let hnd = [d[1], n - len, d[3]];
                // grows without writing: the closure hands the buffers back untouched
                self.append_with(b, i, hnd, |k, v, _| Ok((k.clone(), v.clone())))?;
            }
        }
        Ok(true)
    }

    fn windows(&self) -> Vec<Option<usize>> {
        self.layers.iter().map(|l| l.window).collect()
    }

    /// Shortest length [`KvCache::truncate`] keeps exactly (0 while nothing was dropped).
    pub fn floor(&self) -> usize {
        self.layers.iter().map(LayerKv::floor).max().unwrap_or(0)
    }

    /// Absolute position of the first key [`KvCache::append`] returned for `layer`: attention
    /// masks take query offsets relative to it.
    pub fn layer_base(&self, layer: usize) -> usize {
        self.layers[layer].base
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

    /// Rolls back to `len` positions (no-op when `len >= self.len()`). O(1). Below
    /// [`KvCache::floor`] the positions a later query would see are gone: the cache is cleared.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        if len < self.floor() {
            self.clear();
        } else {
            self.len = len;
        }
    }

    /// Drops everything, keeping allocations.
    pub fn clear(&mut self) {
        self.len = 0;
        for l in &mut self.layers {
            l.base = 0;
        }
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
        self.append_with(b, layer, [dims[1], dims[2], dims[3]], |kb, vb, at| {
            Ok((b.slice_update(kb, k, 2, at)?, b.slice_update(vb, v, 2, at)?))
        })
    }

    /// [`KvCache::append`] where `write` puts the `[1, h, n, d]` rows (`hnd`) into the layer's
    /// buffers itself: it gets the key and value buffers (`[1, h, cap, d]`, room for the rows
    /// guaranteed) and the first row to write, and returns the buffers as updated (the same
    /// tensors, for a backend that writes in place).
    pub fn append_with(
        &mut self,
        b: &B,
        layer: usize,
        hnd: [usize; 3],
        write: impl FnOnce(&B::Tensor, &B::Tensor, usize) -> BResult<(B::Tensor, B::Tensor)>,
    ) -> BResult<(B::Tensor, B::Tensor)> {
        let [h, n, d] = hnd;
        let len = self.len;
        let mut grown = false;
        let slot = &mut self.layers[layer];
        let need = len - slot.base + n;
        if need > slot.cap || slot.k.is_none() {
            // a sliding layer drops what no query from `len` on (nor a rollback) can see
            let (new_base, cap) = match slot.window {
                Some(w) => {
                    let keep_from = len.saturating_sub(w - 1 + ROLLBACK_SLACK).max(slot.base);
                    let held = len - keep_from + n;
                    let target = w - 1 + ROLLBACK_SLACK + w.max(16);
                    (keep_from, held.max(target))
                }
                None => {
                    let mut cap = slot.cap.max(64);
                    while cap < need {
                        cap *= 2;
                    }
                    (slot.base, cap.min(self.max_len.max(need)))
                }
            };
            let nk = b.zeros(&[1, h, cap, d])?;
            let nv = b.zeros(&[1, h, cap, d])?;
            let kept = len - new_base;
            let (nk, nv) = match (&slot.k, &slot.v) {
                (Some(ok), Some(ov)) if kept > 0 => {
                    let from = new_base - slot.base;
                    let ok = b.narrow(ok, 2, from, kept)?;
                    let ov = b.narrow(ov, 2, from, kept)?;
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
            slot.base = new_base;
            grown = true;
        }
        let at = len - slot.base;
        let need = at + n;
        let (kb, vb) = write(slot.k.as_ref().unwrap(), slot.v.as_ref().unwrap(), at)?;
        let out = (b.narrow(&kb, 2, 0, need)?, b.narrow(&vb, 2, 0, need)?);
        slot.k = Some(kb);
        slot.v = Some(vb);
        self.generation += u64::from(grown);
        Ok(out)
    }

    /// Views of the committed keys/values of one layer, positions
    /// [`KvCache::layer_base`]`..len` (`None` when empty).
    pub fn layer_view(&self, b: &B, layer: usize) -> BResult<Option<(B::Tensor, B::Tensor)>> {
        let slot = &self.layers[layer];
        let held = self.len - slot.base;
        match (&slot.k, &slot.v) {
            (Some(k), Some(v)) if held > 0 => {
                Ok(Some((b.narrow(k, 2, 0, held)?, b.narrow(v, 2, 0, held)?)))
            }
            _ => Ok(None),
        }
    }
}

/// One layer's committed keys and values on the host: `([1, h, len, d], k, v)`.
pub type HostLayer = (Vec<usize>, Vec<f32>, Vec<f32>);

impl<B: Backend> KvCache<B> {
    /// A deep copy of the first `len` positions (independent storage, so later in-place
    /// writes to either cache never show in the other). Below [`KvCache::floor`] the copy is
    /// empty (a sliding layer no longer holds what `len` would need).
    pub fn deep_prefix(&self, b: &B, len: usize) -> BResult<Self> {
        let len = len.min(self.len);
        let mut out = KvCache::with_windows(&self.windows(), self.max_len);
        if len < self.floor() {
            return Ok(out);
        }
        for i in 0..self.layers.len() {
            let base = self.layers[i].base;
            if let Some((k, v)) = self.layer_view(b, i)? {
                let held = len - base;
                if held == 0 {
                    continue;
                }
                let (k, v) = (b.narrow(&k, 2, 0, held)?, b.narrow(&v, 2, 0, held)?);
                out.layers[i].base = base;
                out.len = base;
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
            .filter_map(|l| l.k.as_ref().map(|k| (k, self.len - l.base)))
            .map(|(k, held)| {
                let d = b.dims(k);
                2 * d[1] * held * d[3] * elem
            })
            .sum()
    }

    /// Committed positions of every layer, copied to the host. A cache whose sliding layers
    /// dropped positions cannot be exported (an error; the prefix cache then keeps it in RAM
    /// or drops it).
    pub fn export(&self, b: &B) -> BResult<Vec<HostLayer>> {
        if self.layers.iter().any(|l| l.base > 0) {
            return Err(BackendError {
                backend: b.name(),
                message: "a sliding-window cache that dropped old positions cannot be spilled"
                    .into(),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::candle::CandleBackend;

    type CandleTensor = <CandleBackend as Backend>::Tensor;

    fn rows(b: &CandleBackend, n: usize) -> CandleTensor {
        b.zeros(&[1, 2, n, 4]).unwrap()
    }

    /// `reserve` grows every layer before a forward (never during one), and the buffers' id
    /// changes exactly when a buffer is replaced.
    #[test]
    fn reserve_grows_ahead_and_buffers_id_follows_replacements() {
        let b = CandleBackend::cpu();
        let mut c: KvCache<CandleBackend> = KvCache::new(2, 1000);
        assert!(
            !c.reserve(&b, 10).unwrap(),
            "no buffers yet: nothing to promise"
        );
        for l in 0..2 {
            c.append(&b, l, &rows(&b, 5), &rows(&b, 5)).unwrap();
        }
        c.advance(5);
        let id = c.buffers_id();
        assert!(c.reserve(&b, 60).unwrap());
        assert_eq!(c.buffers_id(), id, "64 rows were there already");
        assert!(c.reserve(&b, 65).unwrap());
        let grown = c.buffers_id();
        assert_ne!(grown, id);
        // appends inside the reserved room keep the buffers
        for l in 0..2 {
            c.append(&b, l, &rows(&b, 60), &rows(&b, 60)).unwrap();
        }
        c.advance(60);
        assert_eq!(c.buffers_id(), grown);
        assert!(!c.reserve(&b, 1001).unwrap(), "past the maximum");
        // another cache never shares the id, nor does a copy
        let other: KvCache<CandleBackend> = KvCache::new(2, 1000);
        assert_ne!(other.buffers_id().0, c.buffers_id().0);
        let copy = c.deep_prefix(&b, 10).unwrap();
        assert_ne!(copy.buffers_id().0, c.buffers_id().0);
        // sliding layers move their base: never reserved
        let mut w: KvCache<CandleBackend> = KvCache::with_windows(&[Some(8), None], 1000);
        for l in 0..2 {
            w.append(&b, l, &rows(&b, 5), &rows(&b, 5)).unwrap();
        }
        w.advance(5);
        assert!(!w.reserve(&b, 6).unwrap());
    }
}
