//! The DFlash/DSpark drafter backbone: target hidden states from tapped layers are fused
//! (`hidden_norm(fc(concat(taps)))`) and injected as extra keys/values into every layer; a
//! block of `[pending, mask, ...]` attends over that context plus itself, bidirectionally.
//!
//! The context K/V cache is append-only and trimmable; block K/V are recomputed every round.
//! A Gemma DSpark drafter runs Gemma 4 layers here ([`DrafterGemma`]): sandwich norms around
//! the attention and the MLP, `layer_scalar`, keys as values.

use serde_json::Value;

use crate::backend::{AttnMask, BResult, Backend, RopeSpec, RopeStyle, StepKey};
use crate::kv::KvCache;
use crate::model::config::Fields;
use crate::model::drafter_gemma::DrafterGemma;
use crate::model::layer::{linear, tensor, DecoderLayer, LayerShape};
use crate::weights::{LoadError, WeightSource};

/// Drafter geometry and the fields shared by DFlash and DSpark configs.
#[derive(Clone, Debug)]
pub struct DrafterConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    pub block_size: usize,
    pub target_layer_ids: Vec<usize>,
    pub mask_token_id: u32,
    pub num_target_layers: Option<usize>,
    /// Per layer: `Some(window)` for sliding-window attention.
    pub sliding: Vec<Option<usize>>,
    pub final_logit_softcapping: Option<f32>,
    pub max_positions: usize,
    /// The Gemma 4 backbone of a Gemma DSpark drafter; `None` for the Qwen3 form (DFlash
    /// drafters always use it). Set by [`DrafterConfig::with_gemma`].
    pub gemma: Option<DrafterGemma>,
}

impl DrafterConfig {
    /// Parses the fields; `target_layer_ids`/`mask_token_id`/`block_size` are read from
    /// `dflash_config` first, then from the top level.
    pub fn from_json(v: &Value, path: &std::path::Path) -> Result<Self, LoadError> {
        let f = Fields { v, path };
        let nested = v.get("dflash_config");
        let pick = |k: &str| nested.and_then(|n| n.get(k)).or_else(|| v.get(k));
        let hidden_size = f.usize("hidden_size")?;
        let num_heads = f.usize("num_attention_heads")?;
        let num_layers = f.usize("num_hidden_layers")?;
        let taps = pick("target_layer_ids")
            .and_then(Value::as_array)
            .ok_or_else(|| LoadError::MissingField {
                path: path.to_path_buf(),
                field: "target_layer_ids".into(),
            })?;
        let target_layer_ids = taps
            .iter()
            .map(|x| x.as_u64().map(|n| n as usize))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| LoadError::InvalidField {
                path: path.to_path_buf(),
                field: "target_layer_ids".into(),
                message: "expected a list of layer indices".into(),
            })?;
        let block_size =
            pick("block_size")
                .and_then(Value::as_u64)
                .ok_or_else(|| LoadError::MissingField {
                    path: path.to_path_buf(),
                    field: "block_size".into(),
                })? as usize;
        let mask_token_id = pick("mask_token_id").and_then(Value::as_u64).unwrap_or(0) as u32;
        let rope_theta = f.opt_f64("rope_theta")?.unwrap_or_else(|| {
            v.get("rope_parameters")
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(1_000_000.0)
        });
        let window = f.opt_usize("sliding_window")?;
        let sliding = (0..num_layers)
            .map(|i| {
                let t = v
                    .get("layer_types")
                    .and_then(|l| l.get(i))
                    .and_then(Value::as_str);
                match (t, window) {
                    (Some("sliding_attention"), Some(w)) => Some(w),
                    _ => None,
                }
            })
            .collect();
        let cfg = DrafterConfig {
            hidden_size,
            intermediate_size: f.usize("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads: f.opt_usize("num_key_value_heads")?.unwrap_or(num_heads),
            head_dim: f
                .opt_usize("head_dim")?
                .unwrap_or(hidden_size / num_heads.max(1)),
            vocab_size: f.usize("vocab_size")?,
            rms_norm_eps: f.opt_f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta,
            block_size,
            target_layer_ids,
            mask_token_id,
            num_target_layers: f.opt_usize("num_target_layers")?,
            sliding,
            final_logit_softcapping: f.opt_f64("final_logit_softcapping")?.map(|x| x as f32),
            max_positions: f.opt_usize("max_position_embeddings")?.unwrap_or(40960),
            gemma: None,
        };
        if cfg.block_size < 2 {
            return Err(LoadError::InvalidField {
                path: path.to_path_buf(),
                field: "block_size".into(),
                message: format!("{} is too small (need >= 2)", cfg.block_size),
            });
        }
        if cfg.target_layer_ids.is_empty() {
            return Err(LoadError::InvalidField {
                path: path.to_path_buf(),
                field: "target_layer_ids".into(),
                message: "is empty".into(),
            });
        }
        Ok(cfg)
    }

    /// The DSpark reading of `v`: a `gemma4` config gets the Gemma 4 backbone, its softcap
    /// default (30) and full-attention layers only.
    pub fn with_gemma(mut self, v: &Value, path: &std::path::Path) -> Result<Self, LoadError> {
        self.gemma = DrafterGemma::from_json(v, path)?;
        if self.gemma.is_some() {
            self.final_logit_softcapping = DrafterGemma::softcap(v);
            self.sliding = vec![None; self.num_layers];
        }
        Ok(self)
    }

    pub fn layer_shape(&self) -> LayerShape {
        let base = LayerShape {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            heads: self.num_heads,
            kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            eps: self.rms_norm_eps,
            qk_norm: true,
            qkv_bias: false,
            gemma: None,
        };
        match &self.gemma {
            None => base,
            Some(g) => LayerShape {
                kv_heads: g.attn.global_kv_heads,
                head_dim: g.attn.global_head_dim,
                gemma: Some(g.layer()),
                ..base
            },
        }
    }

    fn rope_spec(&self) -> RopeSpec {
        match &self.gemma {
            Some(g) => g.rope(),
            None => RopeSpec::default_theta(self.rope_theta, self.head_dim, RopeStyle::Half),
        }
    }
}

pub struct KvInjectionNet<B: Backend> {
    pub cfg: DrafterConfig,
    backend: B,
    fc: B::Linear,
    hidden_norm: B::Tensor,
    layers: Vec<DecoderLayer<B>>,
    norm: B::Tensor,
    rope: B::Rope,
    ctx: KvCache<B>,
}

impl<B: Backend> KvInjectionNet<B> {
    /// `target_hidden`: the target's hidden size (the fused input is `taps * target_hidden`).
    pub fn load(
        b: &B,
        src: &dyn WeightSource,
        cfg: DrafterConfig,
        target_hidden: usize,
    ) -> Result<Self, LoadError> {
        let h = cfg.hidden_size;
        let fused = cfg.target_layer_ids.len() * target_hidden;
        let fc = linear(b, src, "fc.weight", &[h, fused])?;
        let hidden_norm = tensor(b, src, "hidden_norm.weight", &[h])?;
        let shape = cfg.layer_shape();
        let layers = (0..cfg.num_layers)
            .map(|i| DecoderLayer::load(b, src, &format!("layers.{i}"), shape, false))
            .collect::<Result<Vec<_>, _>>()?;
        let norm = tensor(b, src, "norm.weight", &[h])?;
        let spec = cfg.rope_spec();
        let rope = b
            .rope_prepare(&spec, cfg.max_positions)
            .map_err(|e| crate::model::layer::load_err(src, "rope", e))?;
        let ctx = KvCache::new(cfg.num_layers, cfg.max_positions);
        Ok(KvInjectionNet {
            cfg,
            backend: b.clone(),
            fc,
            hidden_norm,
            layers,
            norm,
            rope,
            ctx,
        })
    }

    /// Context positions held.
    pub fn ctx_len(&self) -> usize {
        self.ctx.len()
    }

    pub fn truncate(&mut self, len: usize) {
        self.ctx.truncate(len);
    }

    /// [`KvInjectionNet::append_context`] for a drafter's prefill/commit, where the target
    /// must have supplied its taps (`who` names the drafter in the error).
    pub fn append_taps(
        &mut self,
        taps: Option<&B::Tensor>,
        pos: usize,
        who: &str,
    ) -> Result<(), crate::error::EngineError> {
        let taps = taps.ok_or_else(|| {
            crate::error::EngineError::Invalid(format!("{who} needs target taps"))
        })?;
        Ok(self.append_context(taps, pos)?)
    }

    /// Moves the context cache out, leaving an empty one.
    pub fn take_context(&mut self) -> KvCache<B> {
        std::mem::replace(
            &mut self.ctx,
            KvCache::new(self.cfg.num_layers, self.cfg.max_positions),
        )
    }

    /// Installs a context cache (from [`KvInjectionNet::take_context`]); `None` empties it.
    pub fn put_context(&mut self, ctx: Option<KvCache<B>>) {
        self.ctx = ctx.unwrap_or_else(|| KvCache::new(self.cfg.num_layers, self.cfg.max_positions));
    }

    /// Appends fused tap rows `[n, taps * H_target]` as context positions `pos..pos + n`
    /// (anything at or past `pos` is replaced).
    pub fn append_context(&mut self, fused: &B::Tensor, pos: usize) -> BResult<()> {
        let b = &self.backend;
        self.ctx.truncate(pos);
        let dims = b.dims(fused);
        let n = dims[0];
        let x = b.reshape(fused, &[1, n, dims[1]])?;
        let c = b.rms_norm(
            &b.matmul(&x, &self.fc)?,
            &self.hidden_norm,
            self.cfg.rms_norm_eps,
        )?;
        for (i, layer) in self.layers.iter().enumerate() {
            layer.store_keys_values(b, &c, &self.rope, pos, &mut self.ctx, i)?;
        }
        self.ctx.advance(n);
        Ok(())
    }

    /// Runs `forward` (a block forward over this context: the block `block` at positions
    /// `ctx_len()..`, through [`Self::block`]) as a fixed-shape step where the backend has them
    /// ([`Backend::run_step`]: a replayed graph on a GPU) and the context cache has room for the
    /// block, else directly. `who` and `shape` complete the step's key.
    pub fn block_step(
        &mut self,
        who: &'static str,
        block: &[u32],
        shape: Vec<usize>,
        forward: &mut dyn FnMut(&mut Self) -> BResult<Vec<B::Tensor>>,
    ) -> BResult<Vec<B::Tensor>> {
        let b = self.backend.clone();
        let pos = self.ctx.len();
        if block.len() > b.step_graph_rows() || !self.ctx.reserve(&b, pos + block.len())? {
            return forward(self);
        }
        let key = StepKey {
            who,
            cache: self.ctx.buffers_id(),
            rows: block.len(),
            shape,
        };
        b.run_step(&key, block, pos, &mut || forward(self))
    }

    /// Runs a block of embeddings `x [1, L, H]` at positions `ctx_len()..` over the context;
    /// returns the final-normed hidden states `[1, L, H]`. The block's keys and values go into
    /// the context cache's rows past its length, uncommitted (the next
    /// [`KvInjectionNet::append_context`] writes over them), so each layer attends over the
    /// cache in place instead of a copy of the whole context joined with the block.
    pub fn block(&mut self, x: &B::Tensor) -> BResult<B::Tensor> {
        let b = &self.backend;
        let pos = self.ctx.len();
        let mut x = x.clone();
        let mut xn_next = None;
        for (i, layer) in self.layers.iter().enumerate() {
            let xn = match xn_next.take() {
                Some(xn) => xn,
                None => layer.input_norm(b, &x)?,
            };
            let (q, k, v) = layer.attention_inputs(b, &xn, &self.rope, pos, &mut self.ctx, i)?;
            let mask = match self.cfg.sliding[i] {
                Some(window) => AttnMask::SlidingCausal {
                    offset: pos,
                    window,
                },
                None => AttnMask::None,
            };
            let a = layer.attend(b, &q, &k, &v, mask)?;
            let (h, hn) = layer.attn_residual(b, &x, &a)?;
            (x, xn_next) = layer.mlp_residual(b, &h, &hn, self.layers.get(i + 1))?;
        }
        b.rms_norm(&x, &self.norm, self.cfg.rms_norm_eps)
    }
}
