#!/usr/bin/env python3
"""Tiny Gemma 4 checkpoints for the Gemma DSpark / DFlash round-by-round goldens
(tests/fixtures/spec/gemma/, read by scripts/oracles/run_mlx_gemma.py and
tests/tests/gemma_spec_golden.rs).

  target/        gemma4_text, vocab 512, H 64, I 128, 4 layers (sliding, full, sliding, full),
                 4 heads; sliding layers head_dim 16 / 2 kv heads / RoPE 10k / window 128 (longer
                 than any golden run, so mlx-vlm's rotating cache never drops a row); full layers
                 global_head_dim 32 / 1 kv head / keys as values (attention_k_eq_v) / proportional
                 RoPE (factor 0.25, theta 1M). Tied sqrt(H)-scaled embeddings, final softcap 30,
                 GELU-tanh, sandwich norms with plain w, random layer_scalar. Weak layers (the
                 post-attention / post-feedforward norm weights are ~0.15), so the next token is
                 close to a bigram function of the current one; the final norm weight has random
                 signs so that bigram is not "repeat the token".
  dspark/        Gemma DSpark drafter (model_type gemma4_text): own embed_tokens and lm_head,
                 2 layers of Gemma 4 full attention (global_head_dim 32, 1 kv head, k_eq_v,
                 proportional RoPE from rope_parameters.full_attention, SDPA scale 1.0), sandwich
                 norms + layer_scalar, GELU-tanh, softcap 30, block 7, mask 4, taps [0, 1, 2],
                 markov_rank 64 with the Markov bias aligned to the target's zero-layer bigram
                 (partial acceptance), confidence head.
  dspark-bound/  the same drafter without embed_tokens / lm_head: it binds the target's
                 embedding (x sqrt(H)) and head, as mlx-dspark does for heads that ship neither.
  dflash/        z-lab DFlash drafter for the Gemma target: Qwen3-style layers (head_dim 16,
                 2 kv heads, q/k norms, separate v_proj, SiLU), block 8, taps [1, 3], mask 4,
                 RoPE theta given only as the nested rope_parameters.rope_theta (10000, not the
                 1e6 default), final_logit_softcapping 30 at the top level; embedding and head
                 are the target's.

Deterministic (numpy only + the safetensors writer of scripts/fixtures/make_tiny.py).
Usage: python scripts/oracles/make_gemma_spec_tiny.py [--out tests/fixtures/spec/gemma]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
import make_tiny as mt  # noqa: E402

V, H, I, NH = 512, 64, 128, 4
HD, KV = 16, 2            # sliding layers
GHD, GKV = 32, 1          # full-attention layers
MASK = 4
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
WINDOW = 128
SOFTCAP = 30.0
ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                       "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}
WEAK = 0.7               # post-attention / post-feedforward norm weights of the target
ALPHA = 1.0               # DSpark Markov alignment strength
LOUD = 40.0               # DFlash o_proj/down_proj scale: the layers outweigh the sqrt(H)-scaled
                          # embedding, else every slot drafts the mask token back


def rms_rows(x, g, eps=1e-6):
    x = x.astype(np.float64)
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g).astype(np.float32)


def small_norm(r, n, level):
    return (level * (1.0 + 0.2 * r.standard_normal(n))).astype(np.float32)


def target_config():
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "vocab_size": V, "vocab_size_per_layer_input": V, "hidden_size": H,
        "intermediate_size": I, "num_hidden_layers": 4, "num_attention_heads": NH,
        "num_key_value_heads": KV, "head_dim": HD, "global_head_dim": GHD,
        "num_global_key_value_heads": GKV, "attention_k_eq_v": True,
        "layer_types": LAYER_TYPES, "sliding_window": WINDOW, "rope_parameters": ROPE,
        "final_logit_softcapping": SOFTCAP, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
        "use_double_wide_mlp": False, "enable_moe_block": False,
        "use_bidirectional_attention": None, "attention_bias": False,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32",
    }


def make_target(seed):
    r = mt.stream(seed, "gemma-spec-target")
    w = {"model.embed_tokens.weight": r.standard_normal((V, H)).astype(np.float32)}
    for i, t in enumerate(LAYER_TYPES):
        p = f"model.layers.{i}"
        full = t == "full_attention"
        hd, kv = (GHD, GKV) if full else (HD, KV)
        w[f"{p}.self_attn.q_proj.weight"] = mt.linear(r, NH * hd, H, 1.0)
        w[f"{p}.self_attn.k_proj.weight"] = mt.linear(r, kv * hd, H, 1.0)
        if not full:
            w[f"{p}.self_attn.v_proj.weight"] = mt.linear(r, kv * hd, H, 1.0)
        w[f"{p}.self_attn.o_proj.weight"] = mt.linear(r, H, NH * hd, 1.0)
        w[f"{p}.self_attn.q_norm.weight"] = mt.norm_weight(r, hd)
        w[f"{p}.self_attn.k_norm.weight"] = mt.norm_weight(r, hd)
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.down_proj.weight"] = mt.linear(r, H, I, 1.0)
        w[f"{p}.input_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_attention_layernorm.weight"] = small_norm(r, H, WEAK)
        w[f"{p}.pre_feedforward_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_feedforward_layernorm.weight"] = small_norm(r, H, WEAK)
        w[f"{p}.layer_scalar"] = np.array([0.8 + 0.4 * r.random()], np.float32)
    # random signs: the zero-layer bigram argmax_v <E_v, g * norm(E_x)> is not x itself
    w["model.norm.weight"] = (r.standard_normal(H) * 1.5).astype(np.float32)
    return target_config(), w


def dspark_layers(r, w, n):
    for i in range(n):
        p = f"layers.{i}"
        w[f"{p}.self_attn.q_proj.weight"] = mt.linear(r, NH * GHD, H, 1.0)
        w[f"{p}.self_attn.k_proj.weight"] = mt.linear(r, GKV * GHD, H, 1.0)
        w[f"{p}.self_attn.o_proj.weight"] = mt.linear(r, H, NH * GHD, 1.0)
        w[f"{p}.self_attn.q_norm.weight"] = mt.norm_weight(r, GHD)
        w[f"{p}.self_attn.k_norm.weight"] = mt.norm_weight(r, GHD)
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.down_proj.weight"] = mt.linear(r, H, I, 1.0)
        w[f"{p}.input_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_attention_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.pre_feedforward_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_feedforward_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.layer_scalar"] = np.array([0.7 + 0.6 * r.random()], np.float32)


def make_dspark(seed, tw, own_head):
    r = mt.stream(seed, "gemma-spec-dspark")
    taps = [0, 1, 2]
    R = H
    w = {
        "embed_tokens.weight": r.standard_normal((V, H)).astype(np.float32),
        "fc.weight": mt.linear(r, H, len(taps) * H, 1.0),
        "hidden_norm.weight": mt.norm_weight(r, H),
    }
    dspark_layers(r, w, 2)
    w["norm.weight"] = mt.norm_weight(r, H)
    w["lm_head.weight"] = mt.linear(r, V, H, 0.3)
    # Markov bias w2(w1[prev]) = ALPHA * the target's zero-layer bigram logits (pre-softcap)
    E = tw["model.embed_tokens.weight"]
    w["markov_head.markov_w1.weight"] = (ALPHA * rms_rows(E, tw["model.norm.weight"])).astype(np.float32)
    w["markov_head.markov_w2.weight"] = E.copy()
    w["confidence_head.proj.weight"] = mt.linear(r, 1, H + R, 1.0)
    w["confidence_head.proj.bias"] = np.array([0.5], np.float32)
    if not own_head:
        del w["embed_tokens.weight"], w["lm_head.weight"]
    cfg = {
        "architectures": ["Gemma4DSparkModel"], "model_type": "gemma4_text",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2,
        "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": HD,
        "global_head_dim": GHD, "num_global_key_value_heads": GKV, "attention_k_eq_v": True,
        "vocab_size": V, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_parameters": ROPE, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "block_size": 7, "mask_token_id": MASK, "target_layer_ids": taps,
        "num_target_layers": 4, "markov_rank": R, "markov_head_type": "vanilla",
        "enable_confidence_head": True, "confidence_head_with_markov": True,
        "final_logit_softcapping": SOFTCAP, "layer_types": ["full_attention"] * 2,
        "pad_token_id": 0,
    }
    return cfg, w


def make_dflash(seed):
    r = mt.stream(seed, "gemma-spec-dflash")
    taps = [1, 3]
    w = {"fc.weight": mt.linear(r, H, len(taps) * H, 1.0), "hidden_norm.weight": mt.norm_weight(r, H)}
    for i in range(2):
        p = f"layers.{i}"
        w[f"{p}.self_attn.q_proj.weight"] = mt.linear(r, NH * HD, H, 2.0)
        w[f"{p}.self_attn.k_proj.weight"] = mt.linear(r, KV * HD, H, 2.0)
        w[f"{p}.self_attn.v_proj.weight"] = mt.linear(r, KV * HD, H, 2.0)
        w[f"{p}.self_attn.o_proj.weight"] = mt.linear(r, H, NH * HD, LOUD)
        w[f"{p}.self_attn.q_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.self_attn.k_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, 2.0)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, 2.0)
        w[f"{p}.mlp.down_proj.weight"] = mt.linear(r, H, I, LOUD)
        w[f"{p}.input_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_attention_layernorm.weight"] = mt.norm_weight(r, H)
    w["norm.weight"] = mt.norm_weight(r, H)
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "gemma4_text",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2,
        "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": HD,
        "vocab_size": V, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "float32",
        "layer_types": ["full_attention"] * 2, "final_logit_softcapping": SOFTCAP,
        "block_size": 8, "num_target_layers": 4, "target_layer_ids": taps,
        "mask_token_id": MASK,
    }
    return cfg, w


def save(path, cfg, w):
    mt.save_dir(path, cfg, mt.tagged({k: np.ascontiguousarray(v, np.float32) for k, v in w.items()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "spec", "gemma"))
    ap.add_argument("--seed", type=int, default=20261201)
    a = ap.parse_args()
    tcfg, tw = make_target(a.seed)
    save(os.path.join(a.out, "target"), tcfg, tw)
    save(os.path.join(a.out, "dspark"), *make_dspark(a.seed, tw, True))
    save(os.path.join(a.out, "dspark-bound"), *make_dspark(a.seed, tw, False))
    save(os.path.join(a.out, "dflash"), *make_dflash(a.seed))


if __name__ == "__main__":
    main()
