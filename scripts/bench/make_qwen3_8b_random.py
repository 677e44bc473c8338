#!/usr/bin/env python3
"""Writes a random-weight, Qwen3-8B-shaped bf16 checkpoint (HF layout) for throughput benchmarks
on the GPU machine, where no real weights can be fetched.

Shape (Qwen3-8B's config): hidden 4096, 36 layers, 32 query / 8 kv heads, head_dim 128,
intermediate 12288, vocab 151936, untied lm_head, q/k RMSNorm. Weights ~ N(0, 0.02) drawn from
torch's generator seeded with --seed (on the GPU when there is one, so the same seed gives the same
weights on the same kind of device), norms = 1. Also writes a WordLevel tokenizer.json over the
full vocabulary ("<t0>".."<t151935>", no chat template) and prompt_ids.json: --prompts lists of
--context ids (from the same seed) for `dspark bench --prompt-ids`; with --long-context N also
prompt_ids_N.json.

With --drafters, also random drafters at this shape, for the draft cost of
`dspark bench --oracle-tau`: OUT_DIR/dflash-b16 (DFlash-shaped: 5 layers, block 16, taps of target
layers 1, 9, 17, 25, 33, as z-lab's Qwen3-8B DFlash) and OUT_DIR/dspark-b7 (DSpark-shaped: the same
backbone with block 7 plus a rank-256 Markov head and a confidence head; the target's embedding
and LM head are shared). About 1.1 GB each.

With --decisive, the embedding has std 8 instead of 0.02 and the LM head's row perm[u] is token
u's embedding (scaled back to std 0.02) for a seeded permutation perm: the embedding then makes up
most of the final hidden state (the 36 random layers add an rms of roughly 8, by estimate), so the greedy token
after u is perm[u] with a margin of many standard deviations of the other logits. bf16 rounding
then cannot flip a greedy choice between a one-token decode step and a multi-token verify (with
N(0, 0.02) everywhere the top logits are near-ties and the two paths diverge within a few tokens),
which `dspark bench --oracle-tau` needs. Timing does not depend on the values.

Usage: python3 scripts/bench/make_qwen3_8b_random.py OUT_DIR [--seed 0] [--context 1024]
       [--prompts 2] [--layers 36] [--long-context 8192] [--drafters] [--decisive]
About 16.4 GB on disk; about 30 s on the H200 machine.
"""

import argparse
import json
import os
import time

import torch
from safetensors.torch import save_file

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 4096, 36, 32, 8, 128
INTER, VOCAB = 12288, 151936
DECISIVE_STD = 8.0
DRAFT_LAYERS, DRAFT_TAPS, MASK_ID, MARKOV_RANK = 5, [1, 9, 17, 25, 33], 151669, 256


def config(layers):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,
        "torch_dtype": "bfloat16",
    }


def drafter_config(kind):
    """config.json of a DFlash-shaped (block 16) or DSpark-shaped (block 7) drafter."""
    c = config(DRAFT_LAYERS)
    c.pop("max_window_layers")
    c["layer_types"] = ["full_attention"] * DRAFT_LAYERS
    c["num_target_layers"] = LAYERS
    if kind == "dflash":
        c["architectures"] = ["DFlashDraftModel"]
        c["block_size"] = 16
        c["dflash_config"] = {"mask_token_id": MASK_ID, "target_layer_ids": DRAFT_TAPS, "block_size": 16}
    else:
        c["architectures"] = ["Qwen3DSparkModel"]
        c.update({"block_size": 7, "mask_token_id": MASK_ID, "target_layer_ids": DRAFT_TAPS,
                  "markov_rank": MARKOV_RANK, "markov_head_type": "vanilla",
                  "enable_confidence_head": True, "confidence_head_with_markov": True,
                  "final_logit_softcapping": None, "logits_start": 0})
    return c


def layer(rnd, ones, p):
    """One Qwen3 decoder layer's weights under prefix p."""
    return {
        p + "input_layernorm.weight": ones(HIDDEN),
        p + "post_attention_layernorm.weight": ones(HIDDEN),
        p + "self_attn.q_proj.weight": rnd(HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.k_proj.weight": rnd(KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.v_proj.weight": rnd(KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.o_proj.weight": rnd(HIDDEN, HEADS * HEAD_DIM),
        p + "self_attn.q_norm.weight": ones(HEAD_DIM),
        p + "self_attn.k_norm.weight": ones(HEAD_DIM),
        p + "mlp.gate_proj.weight": rnd(INTER, HIDDEN),
        p + "mlp.up_proj.weight": rnd(INTER, HIDDEN),
        p + "mlp.down_proj.weight": rnd(HIDDEN, INTER),
    }


def write_drafter(out, kind, rnd, ones):
    w = {"fc.weight": rnd(HIDDEN, HIDDEN * len(DRAFT_TAPS)), "hidden_norm.weight": ones(HIDDEN),
         "norm.weight": ones(HIDDEN)}
    for i in range(DRAFT_LAYERS):
        w.update(layer(rnd, ones, f"layers.{i}."))
    if kind == "dspark":
        w["markov_head.markov_w1.weight"] = rnd(VOCAB, MARKOV_RANK)
        w["markov_head.markov_w2.weight"] = rnd(VOCAB, MARKOV_RANK)
        w["confidence_head.proj.weight"] = rnd(1, HIDDEN + MARKOV_RANK)
        w["confidence_head.proj.bias"] = torch.zeros(1, dtype=torch.bfloat16)
    d = os.path.join(out, "dflash-b16" if kind == "dflash" else "dspark-b7")
    os.makedirs(d, exist_ok=True)
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(drafter_config(kind), f, indent=1)


def retarget(layers):
    """A shallower target: the drafters tap 5 of its layers, spread like the 36-layer ones."""
    global DRAFT_TAPS, LAYERS
    DRAFT_TAPS = sorted({min(layers - 1, round(t * layers / LAYERS)) for t in DRAFT_TAPS})
    LAYERS = layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--long-context", type=int, default=0)
    ap.add_argument("--drafters", action="store_true")
    ap.add_argument("--decisive", action="store_true")
    a = ap.parse_args()
    if a.layers != LAYERS:
        retarget(a.layers)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(a.seed)

    def rnd(*shape):
        w = torch.empty(shape, dtype=torch.bfloat16, device=dev)
        w.normal_(0.0, 0.02, generator=g)
        return w.cpu()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    shards, cur, index = [], {}, {}

    def flush():
        if cur:
            shards.append(dict(cur))
            cur.clear()

    emb = rnd(VOCAB, HIDDEN)
    if a.decisive:
        emb = emb * (DECISIVE_STD / 0.02)
    cur["model.embed_tokens.weight"] = emb
    for i in range(a.layers):
        cur.update(layer(rnd, ones, f"model.layers.{i}."))
        if (i + 1) % 10 == 0:
            flush()
    cur["model.norm.weight"] = ones(HIDDEN)
    if a.decisive:
        # lm_head row perm[u] is token u's embedding (back at N(0, 0.02)): the greedy token
        # after u is perm[u], by a margin no rounding can flip
        perm = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(a.seed + 2))
        head = torch.empty_like(emb)
        head[perm] = emb * (0.02 / DECISIVE_STD)
        cur["lm_head.weight"] = head
    else:
        cur["lm_head.weight"] = rnd(VOCAB, HIDDEN)
    flush()
    total = 0
    for k, sh in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(a.out, name), metadata={"format": "pt"})
        for t, w in sh.items():
            index[t] = name
            total += w.numel() * w.element_size()
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f, indent=1)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config(a.layers), f, indent=1)
    vocab = {f"<t{i}>": i for i in range(VOCAB)}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<t0>"},
    }
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<t0>"}, f)
    pg = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(0, VOCAB, (a.prompts, a.context), generator=pg).tolist()
    with open(os.path.join(a.out, "prompt_ids.json"), "w") as f:
        json.dump(ids, f)
    if a.long_context:
        ids = torch.randint(0, VOCAB, (a.prompts, a.long_context), generator=pg).tolist()
        with open(os.path.join(a.out, f"prompt_ids_{a.long_context}.json"), "w") as f:
            json.dump(ids, f)
    if a.drafters:
        # after the target's tensors, so the target's weights stay those of the same seed
        for kind in ("dflash", "dspark"):
            write_drafter(a.out, kind, rnd, ones)
    print(f"wrote {a.out}: {total / 1e9:.2f} GB in {len(shards)} shards, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
