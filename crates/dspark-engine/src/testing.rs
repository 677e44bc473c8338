//! Deterministic random checkpoints for tests and benchmarks: tiny (or full-size, for
//! throughput runs) Qwen3-shaped targets and drafters, built in memory from a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::RopeStyle;
use crate::model::config::{Arch, TransformerConfig};
use crate::weights::{HostTensor, MemorySource};

/// Shape and scale of a random target.
#[derive(Clone, Debug)]
pub struct RandomSpec {
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies every projection's init; small values make the model close to a bigram.
    pub layer_scale: f32,
    pub tie: bool,
    pub max_positions: usize,
    /// Init scale of the LM head: larger makes next-token distributions peakier.
    pub head_scale: f32,
}

impl RandomSpec {
    pub fn tiny(vocab: usize) -> Self {
        RandomSpec {
            vocab,
            hidden: 32,
            intermediate: 64,
            layers: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            layer_scale: 0.5,
            tie: false,
            max_positions: 1024,
            head_scale: 3.0,
        }
    }

    pub fn config(&self) -> TransformerConfig {
        TransformerConfig {
            arch: Arch::Qwen3,
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_layers: self.layers,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_style: RopeStyle::Half,
            max_position_embeddings: self.max_positions,
            tie_word_embeddings: self.tie,
            qk_norm: true,
            qkv_bias: false,
            quantization: None,
            eos_token_ids: vec![],
            bos_token_id: None,
            gemma: None,
        }
    }
}

/// Seeded normal samples.
pub struct Gen(ChaCha8Rng);

impl Gen {
    pub fn new(seed: u64, salt: &str) -> Self {
        let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
        for b in salt.bytes() {
            s = s.rotate_left(7) ^ b as u64;
        }
        Gen(ChaCha8Rng::seed_from_u64(s))
    }
    pub fn normal(&mut self) -> f32 {
        let u1: f64 = self.0.random::<f64>().max(1e-12);
        let u2: f64 = self.0.random::<f64>();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    pub fn matrix(&mut self, rows: usize, cols: usize, scale: f32) -> Vec<f32> {
        let s = scale / (cols as f32).sqrt();
        (0..rows * cols).map(|_| self.normal() * s).collect()
    }
    pub fn norm_weight(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| 1.0 + 0.1 * self.normal()).collect()
    }
}

pub fn put(src: &mut MemorySource, name: &str, shape: &[usize], data: Vec<f32>) {
    src.tensors.insert(
        name.to_string(),
        HostTensor::from_f32(shape.to_vec(), &data),
    );
}

/// Adds one decoder layer's weights under `prefix`.
pub fn add_layer(src: &mut MemorySource, g: &mut Gen, prefix: &str, s: &RandomSpec) {
    let (h, i, qd, kd) = (
        s.hidden,
        s.intermediate,
        s.heads * s.head_dim,
        s.kv_heads * s.head_dim,
    );
    let ls = s.layer_scale;
    put(
        src,
        &format!("{prefix}.self_attn.q_proj.weight"),
        &[qd, h],
        g.matrix(qd, h, 1.0),
    );
    put(
        src,
        &format!("{prefix}.self_attn.k_proj.weight"),
        &[kd, h],
        g.matrix(kd, h, 1.0),
    );
    put(
        src,
        &format!("{prefix}.self_attn.v_proj.weight"),
        &[kd, h],
        g.matrix(kd, h, 1.0),
    );
    put(
        src,
        &format!("{prefix}.self_attn.o_proj.weight"),
        &[h, qd],
        g.matrix(h, qd, ls),
    );
    put(
        src,
        &format!("{prefix}.self_attn.q_norm.weight"),
        &[s.head_dim],
        g.norm_weight(s.head_dim),
    );
    put(
        src,
        &format!("{prefix}.self_attn.k_norm.weight"),
        &[s.head_dim],
        g.norm_weight(s.head_dim),
    );
    put(
        src,
        &format!("{prefix}.mlp.gate_proj.weight"),
        &[i, h],
        g.matrix(i, h, 1.0),
    );
    put(
        src,
        &format!("{prefix}.mlp.up_proj.weight"),
        &[i, h],
        g.matrix(i, h, 1.0),
    );
    put(
        src,
        &format!("{prefix}.mlp.down_proj.weight"),
        &[h, i],
        g.matrix(h, i, ls),
    );
    put(
        src,
        &format!("{prefix}.input_layernorm.weight"),
        &[h],
        g.norm_weight(h),
    );
    put(
        src,
        &format!("{prefix}.post_attention_layernorm.weight"),
        &[h],
        g.norm_weight(h),
    );
}

/// A random Qwen3-shaped target.
pub fn random_target(spec: &RandomSpec, seed: u64) -> (TransformerConfig, MemorySource) {
    let mut g = Gen::new(seed, "target");
    let mut src = MemorySource {
        label: format!("random-target-{seed}").into(),
        ..Default::default()
    };
    let (v, h) = (spec.vocab, spec.hidden);
    put(
        &mut src,
        "model.embed_tokens.weight",
        &[v, h],
        (0..v * h).map(|_| g.normal()).collect(),
    );
    for l in 0..spec.layers {
        add_layer(&mut src, &mut g, &format!("model.layers.{l}"), spec);
    }
    put(&mut src, "model.norm.weight", &[h], g.norm_weight(h));
    if !spec.tie {
        put(
            &mut src,
            "lm_head.weight",
            &[v, h],
            g.matrix(v, h, spec.head_scale),
        );
    }
    (spec.config(), src)
}

/// A random Gemma-3-shaped target: the Qwen3-shaped weights plus the feed-forward sandwich
/// norms, with sliding-window attention of `window` on every layer but each third (the third,
/// sixth, ... attend globally), RoPE 10k local / 1M global, a final logit softcap of 30 and HF
/// `(1 + w)` norm weights.
pub fn random_gemma_target(
    spec: &RandomSpec,
    window: usize,
    seed: u64,
) -> (TransformerConfig, MemorySource) {
    let (_, mut src) = random_target(spec, seed);
    let mut g = Gen::new(seed, "gemma-norms");
    let h = spec.hidden;
    // stored as w of (1 + w): small values around 0
    let small = |g: &mut Gen| (0..h).map(|_| 0.1 * g.normal()).collect::<Vec<f32>>();
    for l in 0..spec.layers {
        for n in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            let w = small(&mut g);
            put(&mut src, &format!("model.layers.{l}.{n}.weight"), &[h], w);
        }
    }
    let mut cfg = spec.config();
    cfg.arch = Arch::Gemma3;
    cfg.gemma = Some(crate::model::gemma::GemmaSpec {
        sliding_window: window,
        sliding: (0..spec.layers).map(|i| (i + 1) % 3 != 0).collect(),
        rope_local_theta: 10_000.0,
        query_pre_attn_scalar: spec.head_dim as f64,
        final_logit_softcap: Some(30.0),
        norm_offset: 1.0,
        v4: None,
    });
    (cfg, src)
}

/// `src` with every tensor perturbed by relative noise `eps` (a drafter that mostly agrees).
pub fn perturbed(src: &MemorySource, eps: f32, seed: u64) -> MemorySource {
    let mut g = Gen::new(seed, "perturb");
    let mut names: Vec<&String> = src.tensors.keys().collect();
    names.sort();
    let mut out = MemorySource {
        label: format!("{}-perturbed", src.label.display()).into(),
        ..Default::default()
    };
    for name in names {
        let t = &src.tensors[name];
        let data: Vec<f32> = t
            .to_f32()
            .unwrap()
            .iter()
            .map(|x| x * (1.0 + eps * g.normal()))
            .collect();
        out.tensors
            .insert(name.clone(), HostTensor::from_f32(t.shape(), &data));
    }
    out
}

/// Shape of a random KV-injection drafter (DFlash or DSpark) for a target `RandomSpec`.
#[derive(Clone, Debug)]
pub struct DrafterSpec {
    pub layers: usize,
    pub block: usize,
    pub taps: Vec<usize>,
    pub layer_scale: f32,
    pub mask_token_id: u32,
}

fn drafter_config_json(t: &RandomSpec, d: &DrafterSpec) -> serde_json::Value {
    serde_json::json!({
        "model_type": "qwen3", "hidden_size": t.hidden, "intermediate_size": t.intermediate,
        "num_hidden_layers": d.layers, "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads, "head_dim": t.head_dim, "vocab_size": t.vocab,
        "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "max_position_embeddings": t.max_positions,
        "block_size": d.block, "num_target_layers": t.layers,
        "dflash_config": {"mask_token_id": d.mask_token_id, "target_layer_ids": d.taps, "block_size": d.block},
    })
}

fn backbone(t: &RandomSpec, d: &DrafterSpec, g: &mut Gen, label: &str) -> MemorySource {
    let mut src = MemorySource {
        label: label.into(),
        ..Default::default()
    };
    let h = t.hidden;
    put(
        &mut src,
        "fc.weight",
        &[h, d.taps.len() * h],
        g.matrix(h, d.taps.len() * h, 1.0),
    );
    put(&mut src, "hidden_norm.weight", &[h], g.norm_weight(h));
    let ls = RandomSpec {
        layer_scale: d.layer_scale,
        ..t.clone()
    };
    for l in 0..d.layers {
        add_layer(&mut src, g, &format!("layers.{l}"), &ls);
    }
    put(&mut src, "norm.weight", &[h], g.norm_weight(h));
    src
}

/// A random DFlash drafter (shares the target's embedding and head).
pub fn random_dflash(
    t: &RandomSpec,
    d: &DrafterSpec,
    seed: u64,
) -> (serde_json::Value, MemorySource) {
    let mut g = Gen::new(seed, "dflash");
    (
        drafter_config_json(t, d),
        backbone(t, d, &mut g, &format!("random-dflash-{seed}")),
    )
}

/// A random DSpark drafter with its own embedding/head, a rank-`hidden` Markov head and a
/// confidence head. With `align = Some(a)`, the Markov bias is `a` times the target's
/// zero-layer bigram logits (`w1 = a * finalnorm(E)`, `w2 = target head`), so drafts follow the
/// target when its layers are weak and acceptance is partial-to-high.
pub fn random_dspark(
    t: &RandomSpec,
    target: &MemorySource,
    d: &DrafterSpec,
    align: Option<f32>,
    seed: u64,
) -> (serde_json::Value, MemorySource) {
    let mut g = Gen::new(seed, "dspark");
    let (v, h) = (t.vocab, t.hidden);
    let mut cfg = drafter_config_json(t, d);
    let o = cfg.as_object_mut().unwrap();
    o.remove("dflash_config");
    o.insert("target_layer_ids".into(), serde_json::json!(d.taps));
    o.insert("mask_token_id".into(), serde_json::json!(d.mask_token_id));
    o.insert("markov_rank".into(), serde_json::json!(h));
    o.insert("enable_confidence_head".into(), serde_json::json!(true));
    o.insert(
        "confidence_head_with_markov".into(),
        serde_json::json!(true),
    );
    let mut src = backbone(t, d, &mut g, &format!("random-dspark-{seed}"));
    put(
        &mut src,
        "embed_tokens.weight",
        &[v, h],
        (0..v * h).map(|_| g.normal()).collect(),
    );
    put(&mut src, "lm_head.weight", &[v, h], g.matrix(v, h, 1.0));
    let (w1, w2) = match align {
        Some(a) => {
            let e = target.tensors["model.embed_tokens.weight"]
                .to_f32()
                .unwrap();
            let gn = target.tensors["model.norm.weight"].to_f32().unwrap();
            let mut w1 = Vec::with_capacity(v * h);
            for row in e.chunks_exact(h) {
                let rms = (row.iter().map(|x| x * x).sum::<f32>() / h as f32 + 1e-6).sqrt();
                w1.extend(row.iter().zip(&gn).map(|(x, w)| a * x / rms * w));
            }
            let head = target
                .tensors
                .get("lm_head.weight")
                .unwrap_or(&target.tensors["model.embed_tokens.weight"]);
            (w1, head.to_f32().unwrap())
        }
        None => (g.matrix(v, h, 1.0), g.matrix(v, h, 1.0)),
    };
    put(&mut src, "markov_head.markov_w1.weight", &[v, h], w1);
    put(&mut src, "markov_head.markov_w2.weight", &[v, h], w2);
    put(
        &mut src,
        "confidence_head.proj.weight",
        &[1, 2 * h],
        g.matrix(1, 2 * h, 1.0),
    );
    put(&mut src, "confidence_head.proj.bias", &[1], vec![1.0]);
    (cfg, src)
}
