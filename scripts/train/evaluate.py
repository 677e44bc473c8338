#!/usr/bin/env python3
"""Held-out greedy acceptance of trained drafters on MT-Bench (80 first turns) and HumanEval
(164 prompts, the `prompt` field as the user message), computed exactly from the greedy run.

For greedy decoding the speculative loop commits the target's greedy tokens, so every round
starts at a position of the greedy continuation g with the target's taps of g before it. The
drafts at anchor p (the pending token g[p]) depend only on g[..p]; the round accepts the longest
prefix of drafts equal to g[p+1..], then emits one more token. All anchors are drafted in one
batched pass; then the rounds are walked as dspark's loop does (crates/dspark-engine
spec/decode.rs: the first token comes from prefill, each round records accepted + 1, generation
ends once max_new tokens or an eos are emitted). DSpark's Markov head uses the previous draft,
which equals g while drafts are accepted, so teacher forcing gives the same accept lengths.

Writes a JSON with tau per (set, drafter, cap) and, for the first 10 MT-Bench prompts at
--rounds-max-new, the greedy tokens and per-round accept lengths (to compare with `dspark`).

  python scripts/train/evaluate.py --gguf-dir DIR --mtbench Q.jsonl --humaneval H.jsonl.gz \
      --drafter dflash=ckpt/dflash --drafter dspark=ckpt/dspark --out eval.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def load_drafter(path, Ht, device, block=None):
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(path, "config.json")))
    nested = cfg.get("dflash_config", {})
    for k in ("mask_token_id", "target_layer_ids", "block_size"):
        cfg[k] = nested.get(k, cfg.get(k))
    if block:
        cfg["block_size"] = block
    assert cfg["mask_token_id"] == common.MASK_ID and cfg["target_layer_ids"] == common.TAPS
    sd = {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
    net = common.KvInjectionNet(cfg, Ht)
    rank = cfg.get("markov_rank", 0)
    heads = common.DSparkHeads(cfg["vocab_size"], cfg["hidden_size"], rank) if rank else None
    net_sd = {k: v for k, v in sd.items() if not k.startswith(("markov_head", "confidence_head"))}
    net.load_state_dict(net_sd, strict=True)
    if heads is not None:
        heads.load_state_dict({k: v for k, v in sd.items() if k.startswith(("markov_head", "confidence_head"))},
                              strict=True)
        heads = heads.to(device).eval()
    return cfg, net.to(device).eval(), heads


@torch.no_grad()
def accept_runs(kind, cfg, net, heads, emb, fused, tok, n, chunk=256):
    """m[p - n] = drafts accepted at anchor p, for p in n .. len-2."""
    L = tok.shape[1]
    lens = torch.tensor([L], device=tok.device)
    out = []
    for s in range(n, L - 1, chunk):
        anchors = torch.arange(s, min(L - 1, s + chunk), device=tok.device)[None]
        if kind == "dspark":
            g = cfg["block_size"]
            _, u, prev = common.dspark_forward(net, heads, emb, fused, tok, lens, anchors, g)
            pred = (u + heads.markov_head(prev)).argmax(-1)
            labels, valid = common.shifted(tok, lens, anchors, torch.arange(1, g + 1, device=tok.device))
        else:
            bs = cfg["block_size"]
            pred = common.dflash_logits(net, emb, fused, tok, anchors, bs).argmax(-1)
            labels, valid = common.shifted(tok, lens, anchors, torch.arange(1, bs, device=tok.device))
        hit = ((pred == labels) & valid).float()
        out.extend(torch.cumprod(hit, -1).sum(-1)[0].long().tolist())
    return out


def walk(m, resp, max_new, cap):
    """Per-round accept lengths (accepted + 1) of dspark's loop over greedy response `resp`."""
    rounds = []
    emitted, p = 1, 0  # resp[0] comes from prefill
    if resp[0] in common.EOS_IDS:
        return rounds
    while emitted < max_new and p < len(m):
        acc = min(m[p], cap)
        block = resp[p + 1:p + 2 + acc]
        rounds.append(acc + 1)
        emitted += acc + 1
        if any(t in common.EOS_IDS for t in block):
            break
        p += acc + 1
    return rounds


def mean_tau(runs, resps, max_new, cap):
    """Tokens per round over every prompt's walk (accept runs `runs[i]` over greedy `resps[i]`)."""
    toks = rounds = 0
    for m, r in zip(runs, resps):
        w = walk(m, r, max_new, cap)
        toks += sum(w)
        rounds += len(w)
    return toks / max(1, rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--mtbench", required=True)
    ap.add_argument("--humaneval", required=True)
    ap.add_argument("--drafter", action="append", default=[], help="NAME=DIR[:BLOCK]")
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--rounds-max-new", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok_, model, template = common.load_target(a.gguf_dir, a.device)
    taps = common.Taps(model, common.TAPS)
    emb = common.embed_weight(model)
    Ht = emb.shape[1]

    mt = [json.loads(line)["turns"][0] for line in open(a.mtbench) if line.strip()]
    he = [json.loads(line)["prompt"] for line in gzip.open(a.humaneval, "rt") if line.strip()]
    sets = {"mtbench": mt, "humaneval": he}
    if a.limit:
        sets = {k: v[:a.limit] for k, v in sets.items()}
    drafters = {}
    for spec in a.drafter:
        name, rest = spec.split("=", 1)
        path, _, block = rest.partition(":")
        drafters[name] = load_drafter(path, Ht, a.device, int(block) if block else None)
    result = {"max_new": a.max_new, "rounds_max_new": a.rounds_max_new, "sets": {}, "rounds": {}}
    for sname, prompts in sets.items():
        ids = [common.chat_ids(tok_, template, p) for p in prompts]
        resps = []
        for i in range(0, len(ids), 128):
            resps += common.batched_generate(model, ids[i:i + 128], a.max_new, sample=False, device=a.device)
        print(f"{sname}: {len(ids)} greedy runs ({time.time() - t0:.0f}s)", flush=True)
        per = {name: [] for name in drafters}
        for i, (p, r) in enumerate(zip(ids, resps)):
            seq = torch.tensor([p + r], device=a.device)
            fused, _ = common.target_states(model, taps, seq, torch.ones_like(seq))
            for name, (cfg, net, heads) in drafters.items():
                kind = "dspark" if heads is not None else "dflash"
                m = accept_runs(kind, cfg, net, heads, common.embed_weight(model), fused, seq, len(p))
                per[name].append(m)
                if sname == "mtbench" and i < 10:
                    rr = result["rounds"].setdefault(name, [])
                    rr.append({"prompt_ids": p, "greedy": r[:a.rounds_max_new],
                               "accept_lengths": walk(m, r, a.rounds_max_new, 10 ** 6)})
        res = {}
        for name, (cfg, _net, heads) in drafters.items():
            width = cfg["block_size"] if heads is not None else cfg["block_size"] - 1
            caps = {}
            for cap in range(1, width + 1):
                for mn in sorted({a.max_new, a.rounds_max_new}):
                    caps[f"cap{cap}_max{mn}"] = round(mean_tau(per[name], resps, mn, cap), 4)
            res[name] = caps
            full = caps[f"cap{width}_max{a.max_new}"]
            print(f"  {sname} {name}: tau(full block, max_new {a.max_new}) = {full:.3f}", flush=True)
        result["sets"][sname] = {"prompts": len(ids), "response_tokens": sum(len(r) for r in resps), "tau": res}
    result["seconds"] = round(time.time() - t0, 1)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.out, flush=True)


if __name__ == "__main__":
    main()
