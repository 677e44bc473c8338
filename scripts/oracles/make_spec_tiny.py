#!/usr/bin/env python3
"""Write the tiny checkpoints used by the speculative-decoding goldens (tests/fixtures/spec/).

Output directory (default tests/fixtures/spec/models/):

  target/         Qwen3ForCausalLM, vocab 512, H 64, I 128, 4 layers, 4 heads / 2 kv heads,
                  head_dim 16, untied lm_head, f32, weak layers (layer scale 0.3) so the next
                  token is close to a bigram function of the current one. Also gets a tiny
                  word-level tokenizer.json ("<t0>".."<t511>", no eos token) so that mlx-lm can
                  load the directory; the goldens work on ids only.
                  Embedding structure (used by dflash-accept, harmless for everything else):
                  column 62 is 0 and column 63 is the constant C0 for every token except the
                  mask id 511, whose row is EPS_MASK * e_62 (so mask keys/queries can be told
                  apart from token keys by a fixed direction).
  dspark/         DeepSpec-layout DSpark drafter: block 7, 2 layers, taps [0,1,2], mask 511,
                  own embed/lm_head, markov_rank 64 with the "bigram-aligned" Markov head
                  (markov_w1 = ALPHA * target_final_norm(E_target), markov_w2 = target lm_head,
                  so the bias is ALPHA x the target's zero-layer bigram logits -> partial
                  acceptance), confidence head (proj [1, 128] + bias).
  dflash/         z-lab DFlash drafter with random weights (layer scale 3): block 8, 2 layers,
                  taps [0,2]. Its drafts are essentially never accepted (reject-all path).
  dflash-accept/  z-lab DFlash drafter with hand-built weights so that it is PARTIALLY accepted:
                  attention is purely positional (queries/keys read only the constant embedding
                  columns, RoPE does the rest) and every mask slot attends to the most recent
                  non-mask position, i.e. the pending token; the values copy that token's target
                  embedding into the residual, so norm + target lm_head predicts the target's
                  bigram successor of the pending token. Slot 1 is then usually right, later
                  slots only where the target repeats itself.

Deterministic (fixed seed, numpy only + the safetensors writer of scripts/fixtures/make_tiny.py).

Usage: python scripts/oracles/make_spec_tiny.py [--out tests/fixtures/spec/models] [--seed 20240611]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
import make_tiny as mt  # noqa: E402  (stream, linear, norm_weight, decoder_weights, configs, writer)

V, H, I, NH, NKV, HD = mt.VOCAB, mt.HIDDEN, mt.INTER, mt.HEADS, mt.KV_HEADS, mt.HEAD_DIM
MASK = V - 1            # 511
EOS = mt.EOS            # 2, as in tests/fixtures/tiny (the goldens run without stop tokens)
TARGET_LAYERS = 4
LAYER_SCALE = 0.3       # weak target layers -> near-bigram target -> drafters can be accepted
C0 = 3.0                # constant embedding column 63 (token rows)
EPS_MASK = 0.05         # mask row = EPS_MASK * e_62
ALPHA = 1.0             # DSpark Markov alignment strength (target lm_head already has scale 4)
ROPE_THETA = 1000000.0
STICKY_N = int(os.environ.get("SPEC_STICKY_N", "48"))
STICKY_GAMMA = float(os.environ.get("SPEC_STICKY_GAMMA", "0.12"))


def rms_rows(x, g, eps=1e-6):
    x = x.astype(np.float64)
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g).astype(np.float32)


# ----------------------------------------------------------------------------- target

def make_target(seed):
    w = mt.decoder_weights(mt.stream(seed, "spec-target"), TARGET_LAYERS, layer_scale=LAYER_SCALE,
                           qk_norm=True, tied=False, embed_std=1.0)
    E = w["model.embed_tokens.weight"]
    E[:, 62] = 0.0
    E[:, 63] = C0
    E[MASK, :] = 0.0
    E[MASK, 62] = EPS_MASK
    if STICKY_N and STICKY_GAMMA:
        # "sticky" tokens: lm_head row x gets + GAMMA * final_norm(E[x]) (constant columns
        # dropped), so x tends to follow itself; the context (layers) decides how long a run
        # lasts. Gives the targets short repeats, which fully parallel drafters can predict.
        rs = mt.stream(seed, "spec-target-sticky")
        S = rs.choice(np.arange(16, V - 1), size=STICKY_N, replace=False)
        En = rms_rows(E, w["model.norm.weight"])
        En[:, 62:] = 0.0
        w["lm_head.weight"][S] += (STICKY_GAMMA * En[S]).astype(np.float32)
    cfg = mt.qwen3_config(TARGET_LAYERS, tied=False)
    cfg["eos_token_id"] = EOS
    return cfg, w


def tokenizer_files():
    vocab = {f"<t{i}>": i for i in range(V)}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<t0>"},
    }
    tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<t0>",
               "model_max_length": 4096, "clean_up_tokenization_spaces": False}
    return tok, tok_cfg


# ----------------------------------------------------------------------------- DSpark

def make_dspark(seed, tw):
    r = mt.stream(seed, "spec-dspark")
    taps = [0, 1, 2]
    R = H
    w = {
        "embed_tokens.weight": r.standard_normal((V, H)).astype(np.float32),
        "fc.weight": mt.linear(r, H, len(taps) * H, 1.0),
        "hidden_norm.weight": mt.norm_weight(r, H),
    }
    for i in range(2):
        p = f"layers.{i}"
        w[f"{p}.self_attn.q_proj.weight"] = mt.linear(r, NH * HD, H, LAYER_SCALE)
        w[f"{p}.self_attn.k_proj.weight"] = mt.linear(r, NKV * HD, H, LAYER_SCALE)
        w[f"{p}.self_attn.v_proj.weight"] = mt.linear(r, NKV * HD, H, LAYER_SCALE)
        w[f"{p}.self_attn.o_proj.weight"] = mt.linear(r, H, NH * HD, LAYER_SCALE)
        w[f"{p}.self_attn.q_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.self_attn.k_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, LAYER_SCALE)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, LAYER_SCALE)
        w[f"{p}.mlp.down_proj.weight"] = mt.linear(r, H, I, LAYER_SCALE)
        w[f"{p}.input_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_attention_layernorm.weight"] = mt.norm_weight(r, H)
    w["norm.weight"] = mt.norm_weight(r, H)
    w["lm_head.weight"] = mt.linear(r, V, H, 1.0)
    # bigram-aligned Markov head: w2(w1[prev]) = ALPHA * lm_head_T(final_norm_T(E_T[prev]))
    En = rms_rows(tw["model.embed_tokens.weight"], tw["model.norm.weight"])
    w["markov_head.markov_w1.weight"] = (ALPHA * En).astype(np.float32)
    w["markov_head.markov_w2.weight"] = tw["lm_head.weight"].copy()
    w["confidence_head.proj.weight"] = mt.linear(r, 1, H + R, 1.0)
    w["confidence_head.proj.bias"] = np.array([0.5], np.float32)
    cfg = {
        "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
        "vocab_size": V, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_theta": ROPE_THETA, "attention_bias": False, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "block_size": 7, "mask_token_id": MASK, "target_layer_ids": taps,
        "num_target_layers": TARGET_LAYERS, "markov_rank": R, "markov_head_type": "vanilla",
        "enable_confidence_head": True, "confidence_head_with_markov": True,
        "final_logit_softcapping": None, "logits_start": 0,
        "layer_types": ["full_attention"] * 2,
    }
    return cfg, w


# ----------------------------------------------------------------------------- DFlash

def dflash_config(taps, block):
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
        "vocab_size": V, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_theta": ROPE_THETA, "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "layer_types": ["full_attention"] * 2, "torch_dtype": "float32", "dtype": "float32",
        "block_size": block, "num_target_layers": TARGET_LAYERS,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": list(taps),
                          "block_size": block},
    }


def make_dflash_random(seed):
    r = mt.stream(seed, "spec-dflash")
    taps = [0, 2]
    w = {"fc.weight": mt.linear(r, H, len(taps) * H, 1.0), "hidden_norm.weight": mt.norm_weight(r, H)}
    for i in range(2):
        p = f"layers.{i}"
        w[f"{p}.self_attn.q_proj.weight"] = mt.linear(r, NH * HD, H, 3.0)
        w[f"{p}.self_attn.k_proj.weight"] = mt.linear(r, NKV * HD, H, 3.0)
        w[f"{p}.self_attn.v_proj.weight"] = mt.linear(r, NKV * HD, H, 3.0)
        w[f"{p}.self_attn.o_proj.weight"] = mt.linear(r, H, NH * HD, 3.0)
        w[f"{p}.self_attn.q_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.self_attn.k_norm.weight"] = mt.norm_weight(r, HD)
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, 3.0)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, 3.0)
        w[f"{p}.mlp.down_proj.weight"] = mt.linear(r, H, I, 3.0)
        w[f"{p}.input_layernorm.weight"] = mt.norm_weight(r, H)
        w[f"{p}.post_attention_layernorm.weight"] = mt.norm_weight(r, H)
    w["norm.weight"] = mt.norm_weight(r, H)
    return dflash_config(taps, 8), w


# RoPE pairs (rotate-half): dim d and d+8 rotate at inv_freq[d] = theta^(-2d/16).
# Queries/keys live on dims QK_DIMS; pair 7 (inv_freq 5.6e-6, i.e. no rotation) separates
# token keys (+) from mask keys (-). Amplitudes tuned so that, over relative offsets 1..200,
# the score strictly prefers the nearest token key with a margin of several units.
QK_DIMS = [0, 1, 2, 3, 7]


def make_dflash_accept(seed, tw, amp_q, amp_k):
    """Hand-built DFlash drafter (see module doc). amp_q/amp_k: per-dim q_norm/k_norm weights
    on QK_DIMS (the rest 0)."""
    r = mt.stream(seed, "spec-dflash-accept")
    taps = [0, 2]
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    w = {}
    # ctx = hidden_norm(fc(taps)) = tap0 with column 62 dropped, normalised (weights 1)
    fc = z(H, 2 * H)
    for d in range(H):
        if d != 62:
            fc[d, d] = 1.0
    w["fc.weight"] = fc
    w["hidden_norm.weight"] = np.ones(H, np.float32)
    # value columns copied per layer / kv head (columns 62 never; 63 = the constant)
    groups = {0: [list(range(0, 16)), list(range(16, 32))],
              1: [list(range(32, 48)), list(range(48, 62)) + [63]]}
    qn = z(HD)
    kn = z(HD)
    for j, d in enumerate(QK_DIMS):
        qn[d] = amp_q[j]
        kn[d] = amp_k[j]
    for li in range(2):
        p = f"layers.{li}"
        q = z(NH * HD, H)
        k = z(NKV * HD, H)
        v = z(NKV * HD, H)
        o = z(H, NH * HD)
        for h in range(NH):
            for d in QK_DIMS:
                q[h * HD + d, 62] = 1.0          # queries: only mask-like rows (column 62 > 0)
        for g in range(NKV):
            for d in QK_DIMS:
                if d == 7:
                    k[g * HD + d, 63] = 1.0      # token rows: + on the non-rotating pair
                    k[g * HD + d, 62] = -1.0     # mask rows: - on it
                else:
                    k[g * HD + d, 63] = 1.0
            cols = groups[li][g]
            for t, c in enumerate(cols):
                v[g * HD + t, c] = 1.0
                # query head 2g reads kv head g (GQA: heads 2g, 2g+1); write back in place
                o[c, (2 * g) * HD + t] = 1.0
        w[f"{p}.self_attn.q_proj.weight"] = q
        w[f"{p}.self_attn.k_proj.weight"] = k
        w[f"{p}.self_attn.v_proj.weight"] = v
        w[f"{p}.self_attn.o_proj.weight"] = o
        w[f"{p}.self_attn.q_norm.weight"] = qn.copy()
        w[f"{p}.self_attn.k_norm.weight"] = kn.copy()
        # MLP present but silent (down_proj 0); small random gate/up keep the tensors non-trivial
        w[f"{p}.mlp.gate_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.up_proj.weight"] = mt.linear(r, I, H, 1.0)
        w[f"{p}.mlp.down_proj.weight"] = z(H, I)
        w[f"{p}.input_layernorm.weight"] = np.ones(H, np.float32)
        w[f"{p}.post_attention_layernorm.weight"] = mt.norm_weight(r, H)
    # own final norm = the target's final norm, so norm(h) ~ target_final_norm(E[pending])
    w["norm.weight"] = tw["model.norm.weight"].copy()
    return dflash_config(taps, 8), w


# ----------------------------------------------------------------------------- main

AMP_Q = [3.0, 15.0, 36.0, 24.0, 15.0]
AMP_K = [3.0, 15.0, 36.0, 24.0, 15.0]


def save(path, cfg, w):
    mt.save_dir(path, cfg, mt.tagged({k: np.ascontiguousarray(v, np.float32) for k, v in w.items()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "spec", "models"))
    ap.add_argument("--seed", type=int, default=20240611)
    a = ap.parse_args()

    tcfg, tw = make_target(a.seed)
    save(os.path.join(a.out, "target"), tcfg, tw)
    tok, tok_cfg = tokenizer_files()
    with open(os.path.join(a.out, "target", "tokenizer.json"), "w") as f:
        json.dump(tok, f, separators=(",", ":"))
    with open(os.path.join(a.out, "target", "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
        f.write("\n")

    save(os.path.join(a.out, "dspark"), *make_dspark(a.seed, tw))
    save(os.path.join(a.out, "dflash"), *make_dflash_random(a.seed))
    save(os.path.join(a.out, "dflash-accept"), *make_dflash_accept(a.seed, tw, AMP_Q, AMP_K))


if __name__ == "__main__":
    main()
