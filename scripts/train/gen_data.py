#!/usr/bin/env python3
"""Training data for the SmolLM2-135M drafters: prompts, then the target's own responses.

Prompts (scripts/train/prompt_sources.py says where each comes from and its licence):
  1. self-instruct: the target writes user requests from 352 seed topics x 21 MT-Bench-like task
     styles (writing, roleplay, reasoning, math, coding, extraction, STEM, humanities, general) x
     random personas, sampled at T=1.0, top-p 0.95, cleaned and deduplicated;
  2. templates over the same topics;
  3. code: HumanEval-shaped completions (signature + docstring) and code requests built from
     public functions and methods of the Python standard library and numpy/scipy/networkx/sympy;
  4. reading / extraction tasks over passages of the stdlib's language reference text;
  5. second turns: a follow-up request after the target's own first answer, for a share of 1/2.
Every prompt that shares an 8-word run with MT-Bench or HumanEval (or names a HumanEval
function) is dropped (--exclude-mtbench / --exclude-humaneval): both stay held out.
Responses: the target through its chat template (dspark's rendering), bf16, KV-cached batched
generation (fastgen.py): greedy for every prompt, then sampled (T=0.7 or 1.0, top-p 0.9 within
the 256 most likely tokens) passes
while the time budget lasts, up to --max-new tokens, cut after eos.

Output: an .npz (tokens uint16 flat, lens, plens, modes 0 greedy / 1 sampled, kinds) + a .json.

  python scripts/train/gen_data.py --gguf-dir DIR --out /tmp/w/data_u16.npz [--budget-s 300]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import fastgen  # noqa: E402
import prompt_sources as ps  # noqa: E402


def chat_msgs(tok, template, msgs):
    text = tok.apply_chat_template(msgs, chat_template=template, add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def decode(tok, ids):
    return tok.decode([t for t in ids if t not in common.EOS_IDS], skip_special_tokens=True,
                      clean_up_tokenization_spaces=False)


def generate_fitting(lm, prompts, temps, max_new, gen, label):
    """fastgen.generate over one chunk; a chunk whose KV cache does not fit the GPU (long second
    turns at batch 3072 on an 80 GB H100) runs again as two halves, recursively."""
    try:
        return fastgen.generate(lm, prompts, temps, max_new, common.EOS_IDS, common.PAD_ID,
                                top_p=0.9, gen=gen)
    except torch.OutOfMemoryError:
        if len(prompts) < 2:
            raise
    torch.cuda.empty_cache()
    h = len(prompts) // 2
    print(f"  {label}: out of GPU memory at {len(prompts)} prompts, halving", flush=True)
    return (generate_fitting(lm, prompts[:h], temps[:h], max_new, gen, label)
            + generate_fitting(lm, prompts[h:], temps[h:], max_new, gen, label))


def run_batches(lm, items, temps, max_new, batch, gen, deadline, label, t0, full=lambda: False):
    """items: list of prompt ids; returns {index: new tokens} for the chunks done before deadline
    (or before full() says the data set is complete)."""
    order = sorted(range(len(items)), key=lambda j: len(items[j]))
    chunks = [order[i:i + batch] for i in range(0, len(order), batch)]
    random.Random(len(items)).shuffle(chunks)
    res, ntok, t1 = {}, 0, time.time()
    for ci, ch in enumerate(chunks):
        if time.time() > deadline or full():
            print(f"  {label}: budget reached at chunk {ci}/{len(chunks)}", flush=True)
            break
        out = generate_fitting(lm, [items[j] for j in ch], [temps[j] for j in ch], max_new, gen, label)
        for j, g in zip(ch, out):
            res[j] = g
            ntok += len(g)
        print(f"  {label} chunk {ci + 1}/{len(chunks)}: {len(res)} done, {ntok} tokens, "
              f"{ntok / (time.time() - t1):.0f} tok/s ({time.time() - t0:.0f}s)", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--max-prompt", type=int, default=448)
    ap.add_argument("--per-pair", type=int, default=2, help="self-instruct samples per topic x style")
    ap.add_argument("--batch", type=int, default=3072)
    ap.add_argument("--limit", type=int, default=0, help="cap on first-turn prompts (0 = all; smoke tests)")
    ap.add_argument("--max-topics", type=int, default=0, help="use only the first N topics (smoke tests)")
    ap.add_argument("--second-turn-share", type=float, default=0.5)
    ap.add_argument("--budget-s", type=float, default=300.0, help="time for the response passes")
    ap.add_argument("--max-tokens", type=int, default=12_000_000, help="stop once the data holds this many")
    ap.add_argument("--exclude-mtbench", default="")
    ap.add_argument("--exclude-humaneval", default="")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    t0 = time.time()
    if a.max_topics:
        del ps.TOPICS[a.max_topics:]
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=a.device).manual_seed(a.seed)
    tok, model, template = common.load_target(a.gguf_dir, a.device)
    lm = fastgen.FastLM(model, dtype=torch.bfloat16 if a.device.startswith("cuda") else torch.float32,
                        theta=common.ROPE_THETA)
    del model
    excl = ps.Excluder(a.exclude_mtbench or None, a.exclude_humaneval or None)
    print(f"target loaded in {time.time() - t0:.1f}s", flush=True)

    # 1. self-instruct
    metas = ps.self_instruct_metas(rng, a.per_pair)
    if a.limit:
        metas = metas[:a.limit]
    mids = [common.chat_ids(tok, template, m) for _, m in metas]
    got = run_batches(lm, mids, [1.0] * len(mids), 128, a.batch, gen, float("inf"), "self-instruct", t0)
    seen, items = set(), []
    for j in sorted(got):
        c = ps.clean_instruction(decode(tok, got[j]))
        if c and c not in seen:
            seen.add(c)
            items.append(("self-instruct:" + metas[j][0], c))
    n_si = len(items)
    # 2-4. templates, code, extraction
    items += [("template", p) for p in ps.template_prompts()]
    items += ps.code_prompts(rng)
    items += [("extraction", p) for p in ps.extraction_prompts(rng, 4000)]
    n_all = len(items)
    items = [it for it in items if excl.ok(it[1])]
    rng.shuffle(items)
    if a.limit:
        items = items[:a.limit]
    enc = [(k, p, common.chat_ids(tok, template, p)) for k, p in items]
    enc = [e for e in enc if len(e[2]) <= a.max_prompt]
    by_kind = {}
    for k, _, _ in enc:
        by_kind[k] = by_kind.get(k, 0) + 1
    print(f"prompts: {n_si} self-instruct, {n_all} in all, {len(items)} after the held-out filter, "
          f"{len(enc)} within {a.max_prompt} tokens ({time.time() - t0:.0f}s): {by_kind}", flush=True)

    seqs, plens, kinds, modes = [], [], [], []
    t1 = time.time()
    ntok_now = [0]

    def full():
        return ntok_now[0] > a.max_tokens

    def add(prompt_ids, resp, kind, mode):
        seqs.append(prompt_ids + resp)
        plens.append(len(prompt_ids))
        ntok_now[0] += len(prompt_ids) + len(resp)
        kinds.append(kind)
        modes.append(mode)

    # 5. greedy responses to every prompt
    ids = [e[2] for e in enc]
    g1 = run_batches(lm, ids, [0.0] * len(ids), a.max_new, a.batch, gen, t1 + 0.45 * a.budget_s, "greedy", t0)
    for j, r in g1.items():
        add(ids[j], r, enc[j][0], 0)
    # 6. second turns after a share of the greedy first answers (code completions excluded)
    cand = [j for j in g1 if enc[j][0] != "code-complete" and rng.random() < a.second_turn_share]
    two = []
    for j in cand:
        msgs = [{"role": "user", "content": enc[j][1]}, {"role": "assistant", "content": decode(tok, g1[j])},
                {"role": "user", "content": rng.choice(ps.FOLLOWUPS)}]
        p = chat_msgs(tok, template, msgs)
        if len(p) <= a.max_prompt:
            two.append((enc[j][0], p))
    g2 = run_batches(lm, [p for _, p in two], [0.0] * len(two), a.max_new, a.batch, gen,
                     t1 + 0.6 * a.budget_s, "second turn", t0)
    for j, r in g2.items():
        add(two[j][1], r, two[j][0] + "+turn2", 0)
    # 7. sampled responses while time is left
    temps = [0.7 if j % 2 else 1.0 for j in range(len(ids))]
    for pi in range(4):
        if time.time() - t1 > a.budget_s or full():
            break
        s = run_batches(lm, ids, temps, a.max_new, a.batch, gen, t1 + a.budget_s, f"sampled {pi}", t0, full)
        for j, r in s.items():
            add(ids[j], r, enc[j][0], 1)

    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    keep = np.cumsum(lens) <= a.max_tokens
    idx = [i for i in range(len(seqs)) if keep[i]]
    ntok = int(sum(lens[i] - plens[i] for i in idx))
    kind_names = sorted(set(kinds))
    meta = {"seed": a.seed, "first_turn_prompts": len(enc), "second_turn_prompts": len(two), "seqs": len(idx),
            "tokens": int(lens[keep].sum()), "response_tokens": ntok,
            "by_kind": {k: sum(1 for i in idx if kinds[i] == k) for k in kind_names},
            "greedy": sum(1 for i in idx if modes[i] == 0), "sampled": sum(1 for i in idx if modes[i] == 1),
            "max_new": a.max_new, "seconds": round(time.time() - t0, 1),
            "response_seconds": round(time.time() - t1, 1), "generation_dtype": str(lm.dtype)}
    np.savez_compressed(a.out, tokens=np.array([t for i in idx for t in seqs[i]], dtype=np.uint16),
                        lens=lens[keep], plens=np.array([plens[i] for i in idx]),
                        modes=np.array([modes[i] for i in idx], dtype=np.int8),
                        kinds=np.array([kind_names.index(kinds[i]) for i in idx], dtype=np.int16),
                        kind_names=np.array(kind_names))
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    print("data:", json.dumps(meta), flush=True)
    for i in idx[:4]:
        print("---", kinds[i], modes[i], repr(tok.decode(seqs[i][plens[i]:])[:300]), flush=True)


if __name__ == "__main__":
    main()
