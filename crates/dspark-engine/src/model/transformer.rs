//! The target model: Qwen3 / Qwen2 / Llama / Gemma 3 / Gemma 4 decoder written once over the
//! backend seam. Gemma adds scaled embeddings, sliding-window layers with their own RoPE base
//! and a final logit softcap (model/gemma.rs holds its config); Gemma 4's full-attention
//! layers have their own head size, kv heads and proportional RoPE (model/gemma4.rs).
//! A forward over L new tokens returns logits for every position (or only the last) and the
//! concatenated outputs of tapped layers (layer i's output = HF `hidden_states[i + 1]`).

use crate::backend::{AttnMask, BResult, Backend, RopeSpec, StepKey};
use crate::kv::KvCache;
use crate::model::config::TransformerConfig;
use crate::model::gemma::GemmaSpec;
use crate::model::layer::{linear, norm_weight, DecoderLayer, GemmaLayer, LayerShape};
use crate::weights::{LoadError, WeightSource};

/// Which positions of a forward need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    All,
    Last,
    None,
}

/// Prefill chunk length: bounds the `[heads, L, L]` attention scores of long prompts.
pub const PREFILL_CHUNK: usize = 512;

pub struct ForwardOut<B: Backend> {
    /// `[rows, vocab]`: all L rows, the last row, or zero rows.
    pub logits: Option<B::Tensor>,
    /// `[L, taps.len() * hidden]`, when taps were asked for.
    pub taps: Option<B::Tensor>,
}

pub struct Transformer<B: Backend> {
    pub cfg: TransformerConfig,
    backend: B,
    /// The dense token table; `None` when rows are read from the (packed) tied LM head.
    embed: Option<B::Tensor>,
    layers: Vec<DecoderLayer<B>>,
    norm: B::Tensor,
    lm_head: B::Linear,
    rope: B::Rope,
    /// Gemma's sliding layers rotate with their own base.
    rope_local: Option<B::Rope>,
}

impl<B: Backend> Transformer<B> {
    pub fn load(
        backend: &B,
        cfg: TransformerConfig,
        src: &dyn WeightSource,
    ) -> Result<Self, LoadError> {
        let b = backend;
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let embed_host = src.get_shaped("model.embed_tokens.weight", &[v, h])?;
        let tied = cfg.tie_word_embeddings || !src.contains("lm_head.weight");
        let lm_head = if tied {
            b.linear(&embed_host)
                .map_err(|e| crate::model::layer::load_err(src, "model.embed_tokens.weight", e))?
        } else {
            linear(b, src, "lm_head.weight", &[v, h])?
        };
        // a tied table is held once: packed rows serve the embedding, or the dense LM head is
        // the embedding table
        let embed =
            if tied && b.has_rows(&lm_head) {
                None
            } else if let Some(t) = tied.then(|| b.linear_dense(&lm_head)).flatten() {
                Some(t)
            } else {
                Some(b.tensor(&embed_host).map_err(|e| {
                    crate::model::layer::load_err(src, "model.embed_tokens.weight", e)
                })?)
            };
        let shape = LayerShape {
            hidden: h,
            intermediate: cfg.intermediate_size,
            heads: cfg.num_heads,
            kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            eps: cfg.rms_norm_eps,
            qk_norm: cfg.qk_norm,
            qkv_bias: cfg.qkv_bias,
            gemma: cfg.gemma.as_ref().map(|g| GemmaLayer {
                attn_scale: g.attn_scale(),
                norm_offset: g.norm_offset,
                k_eq_v: false,
                v4: g.v4.is_some(),
            }),
        };
        let layer_shape = |i: usize| match cfg.gemma.as_ref().map(|g| (g, &g.v4)) {
            // Gemma 4 full-attention layers: their own head size and kv heads
            Some((g, Some(v4))) if !g.sliding[i] => LayerShape {
                head_dim: v4.global_head_dim,
                kv_heads: v4.global_kv_heads,
                gemma: shape.gemma.map(|l| GemmaLayer {
                    k_eq_v: v4.k_eq_v,
                    ..l
                }),
                ..shape
            },
            _ => shape,
        };
        let layers = (0..cfg.num_layers)
            .map(|i| DecoderLayer::load(b, src, &format!("model.layers.{i}"), layer_shape(i), true))
            .collect::<Result<Vec<_>, _>>()?;
        let offset = cfg.gemma.as_ref().map_or(0.0, |g| g.norm_offset);
        let norm = norm_weight(b, src, "model.norm.weight", h, offset)?;
        let global_spec = match cfg.gemma.as_ref().and_then(|g| g.v4.as_ref()) {
            Some(v4) => v4.global_rope(cfg.rope_theta, cfg.rope_style),
            None => cfg.rope_spec(),
        };
        let rope = b
            .rope_prepare(&global_spec, cfg.max_position_embeddings)
            .map_err(|e| crate::model::layer::load_err(src, "rope", e))?;
        let rope_local = match &cfg.gemma {
            Some(g) => {
                let spec =
                    RopeSpec::default_theta(g.rope_local_theta, cfg.head_dim, cfg.rope_style);
                Some(
                    b.rope_prepare(&spec, cfg.max_position_embeddings)
                        .map_err(|e| crate::model::layer::load_err(src, "rope (local)", e))?,
                )
            }
            None => None,
        };
        Ok(Transformer {
            cfg,
            backend: b.clone(),
            embed,
            layers,
            norm,
            lm_head,
            rope,
            rope_local,
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn new_cache(&self) -> KvCache<B> {
        let windows: Vec<Option<usize>> = match &self.cfg.gemma {
            Some(g) => g
                .sliding
                .iter()
                .map(|&s| s.then_some(g.sliding_window))
                .collect(),
            None => vec![None; self.cfg.num_layers],
        };
        KvCache::with_windows(&windows, self.cfg.max_position_embeddings)
    }

    /// Token embeddings `[1, L, H]` (shared with DFlash drafters); Gemma scales them by
    /// `sqrt(hidden)`.
    pub fn embed(&self, ids: &[u32]) -> BResult<B::Tensor> {
        let b = &self.backend;
        let x = match &self.embed {
            None => b.gather_rows(&self.lm_head, ids)?,
            Some(table) => b.embedding_ids(table, ids, &[1, ids.len()])?,
        };
        match &self.cfg.gemma {
            Some(_) => b.scale(&x, GemmaSpec::embed_scale(self.cfg.hidden_size)),
            None => Ok(x),
        }
    }

    /// Raw hidden states `[.., H]` -> logits through the final norm and the LM head.
    pub fn head(&self, h: &B::Tensor) -> BResult<B::Tensor> {
        let b = &self.backend;
        let hn = b.rms_norm(h, &self.norm, self.cfg.rms_norm_eps)?;
        let logits = b.matmul(&hn, &self.lm_head)?;
        match self.cfg.gemma.as_ref().and_then(|g| g.final_logit_softcap) {
            Some(cap) => b.softcap(&logits, cap),
            None => Ok(logits),
        }
    }

    /// Applies the LM head alone (no final norm), for drafters that norm with their own weights.
    pub fn lm_head(&self, hn: &B::Tensor) -> BResult<B::Tensor> {
        self.backend.matmul(hn, &self.lm_head)
    }

    /// The LM head for drafts only ([`Backend::draft_matmul`]: possibly faster, inexact
    /// arithmetic; every draft is verified by [`Transformer::lm_head`]'s exact logits), or
    /// `rows` of it ([`Transformer::draft_head_rows`]: logits of a draft vocabulary only).
    pub fn draft_lm_head(&self, hn: &B::Tensor, rows: Option<&B::Linear>) -> BResult<B::Tensor> {
        self.backend.draft_matmul(hn, rows.unwrap_or(&self.lm_head))
    }

    /// Rows `ids` of the LM head for [`Transformer::draft_lm_head`] ([`Backend::draft_rows`]);
    /// `None` where the head's form has no rows to take.
    pub fn draft_head_rows(&self, ids: &[u32]) -> BResult<Option<B::Linear>> {
        self.backend.draft_rows(&self.lm_head, ids)
    }

    /// The LM head (or `rows` of it) and the final logit softcap (no final norm) for drafts
    /// only: the target's whole output projection as DSpark drafters that bind it use it, its
    /// head by [`Transformer::draft_lm_head`].
    pub fn draft_project(&self, hn: &B::Tensor, rows: Option<&B::Linear>) -> BResult<B::Tensor> {
        let logits = self.draft_lm_head(hn, rows)?;
        match self.cfg.gemma.as_ref().and_then(|g| g.final_logit_softcap) {
            Some(cap) => self.backend.softcap(&logits, cap),
            None => Ok(logits),
        }
    }

    /// Runs `ids` at positions `cache.len()..` and commits them to the cache. Long inputs are
    /// processed in chunks of [`PREFILL_CHUNK`] tokens, which bounds the attention scratch
    /// memory; results are identical to one pass.
    pub fn forward(
        &self,
        ids: &[u32],
        cache: &mut KvCache<B>,
        taps: &[usize],
        want: LogitsWanted,
    ) -> BResult<ForwardOut<B>> {
        if ids.len() <= PREFILL_CHUNK {
            return self.forward_chunk(ids, cache, taps, want);
        }
        let b = &self.backend;
        let (mut logits, mut tapped) = (vec![], vec![]);
        let chunks: Vec<&[u32]> = ids.chunks(PREFILL_CHUNK).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let w = match want {
                LogitsWanted::All => LogitsWanted::All,
                LogitsWanted::Last if last => LogitsWanted::Last,
                _ => LogitsWanted::None,
            };
            let out = self.forward_chunk(chunk, cache, taps, w)?;
            logits.extend(out.logits);
            tapped.extend(out.taps);
        }
        let cat = |v: Vec<B::Tensor>| -> BResult<Option<B::Tensor>> {
            match v.len() {
                0 => Ok(None),
                1 => Ok(v.into_iter().next()),
                _ => b.concat(&v.iter().collect::<Vec<_>>(), 0).map(Some),
            }
        };
        Ok(ForwardOut {
            logits: cat(logits)?,
            taps: cat(tapped)?,
        })
    }

    /// Layer `i`'s rotary table: Gemma's sliding layers use the local base.
    fn layer_rope(&self, i: usize) -> &B::Rope {
        match (&self.cfg.gemma, &self.rope_local) {
            (Some(g), Some(local)) if g.sliding[i] => local,
            _ => &self.rope,
        }
    }

    /// Layer `i`'s mask for queries at key index `offset..`: Gemma's sliding layers see the
    /// last `sliding_window` positions.
    fn layer_mask(&self, i: usize, offset: usize) -> AttnMask {
        match &self.cfg.gemma {
            Some(g) if g.sliding[i] => AttnMask::SlidingCausal {
                offset,
                window: g.sliding_window,
            },
            _ => AttnMask::Causal { offset },
        }
    }

    fn forward_chunk(
        &self,
        ids: &[u32],
        cache: &mut KvCache<B>,
        taps: &[usize],
        want: LogitsWanted,
    ) -> BResult<ForwardOut<B>> {
        let b = &self.backend;
        let l = ids.len();
        if l == 0 {
            return Err(crate::backend::BackendError {
                backend: b.name(),
                message: "forward called with no tokens".into(),
            });
        }
        let start = cache.len();
        // a short forward over a cache with room for it is a fixed-shape step, which a backend
        // with device graphs replays (Gemma's sliding windows move their buffers' base)
        let graph =
            l <= b.step_graph_rows() && self.cfg.gemma.is_none() && cache.reserve(b, start + l)?;
        let out = if graph {
            let wanted = match want {
                LogitsWanted::None => 0,
                LogitsWanted::Last => 1,
                LogitsWanted::All => 2,
            };
            let key = StepKey {
                who: "transformer",
                cache: cache.buffers_id(),
                rows: l,
                shape: std::iter::once(wanted)
                    .chain(taps.iter().copied())
                    .collect(),
            };
            let mut step = || -> BResult<Vec<B::Tensor>> {
                let out = self.layers_and_head(ids, cache, taps, want)?;
                Ok(out.logits.into_iter().chain(out.taps).collect())
            };
            let mut outs = b.run_step(&key, ids, start, &mut step)?.into_iter();
            let logits = match want {
                LogitsWanted::None => None,
                _ => outs.next(),
            };
            ForwardOut {
                logits,
                taps: outs.next(),
            }
        } else {
            self.layers_and_head(ids, cache, taps, want)?
        };
        cache.advance(l);
        Ok(out)
    }

    /// The layers and the head over `ids` at the cache's length, writing their keys and values
    /// (the length does not move).
    fn layers_and_head(
        &self,
        ids: &[u32],
        cache: &mut KvCache<B>,
        taps: &[usize],
        want: LogitsWanted,
    ) -> BResult<ForwardOut<B>> {
        let b = &self.backend;
        let l = ids.len();
        let start = cache.len();
        let mut x = self.embed(ids)?;
        let mut tapped = Vec::with_capacity(taps.len());
        // the next layer's input norm, when the previous layer fused it with its residual add
        let mut xn_next = None;
        for (i, layer) in self.layers.iter().enumerate() {
            let xn = match xn_next.take() {
                Some(xn) => xn,
                None => layer.input_norm(b, &x)?,
            };
            let rope = self.layer_rope(i);
            let (q, ka, va) = layer.attention_inputs(b, &xn, rope, start, cache, i)?;
            // the keys start at the layer's base (sliding layers drop old positions)
            let mask = self.layer_mask(i, start - cache.layer_base(i));
            let a = layer.attend(b, &q, &ka, &va, mask)?;
            let (h, hn) = layer.attn_residual(b, &x, &a)?;
            (x, xn_next) = layer.mlp_residual(b, &h, &hn, self.layers.get(i + 1))?;
            if taps.contains(&i) {
                tapped.push((i, x.clone()));
            }
        }
        let taps_out = if taps.is_empty() {
            None
        } else {
            // concatenate in the order the caller listed the taps
            let ordered: Vec<&B::Tensor> = taps
                .iter()
                .filter_map(|t| tapped.iter().find(|(i, _)| i == t).map(|(_, x)| x))
                .collect();
            let cat = b.concat(&ordered, 2)?;
            Some(b.reshape(&cat, &[l, ordered.len() * self.cfg.hidden_size])?)
        };
        let logits = match want {
            LogitsWanted::None => None,
            LogitsWanted::All => {
                let lg = self.head(&x)?;
                Some(b.reshape(&lg, &[l, self.cfg.vocab_size])?)
            }
            LogitsWanted::Last => {
                let last = b.narrow(&x, 1, l - 1, 1)?;
                let lg = self.head(&last)?;
                Some(b.reshape(&lg, &[1, self.cfg.vocab_size])?)
            }
        };
        Ok(ForwardOut {
            logits,
            taps: taps_out,
        })
    }
}
