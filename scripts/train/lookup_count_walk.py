#!/usr/bin/env python3
"""How prompt lookup should pick its occurrence and its draft counts on a CPU, measured before
building them (wave 2 session 49): evaluate.py's exact greedy walk over the first N prompts of
each held-out set with the shipped drafters, under a cost model of a round on the 2-core CPU
(a plain step 1, a round of k drafts 1 + ROW * k + DRAFT, in decode steps: --verify-cost on a
Zen 4 gave 0.13-0.16 a verified row, the drafter about 0.1). Per set and drafter:
- tau at 7 drafts with lookup after the first draft, the pair's latest occurrence against the
  occurrence whose preceding tokens match the context longest (ties: the latest);
- tokens per cost unit at the best fixed count without lookup, and with lookup rounds given
  counts of their own by kind of match (the pair alone / 3-4 tokens / 5 or more; each kind's
  count, or none = the drafter's drafts, chosen over a grid), the drafter's count fixed.

  python scripts/train/lookup_count_walk.py --gguf-dir DIR [--prompts 40] [--max-new 128] --out OUT.json
    [--dump CACHE.pkl]   (the walk's accept runs: made on the first run, about 9 min on 2 cores)
with a Python that has torch, transformers and gguf (as evaluate.py).
"""
from __future__ import annotations

import itertools
import json
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from lookup_walk import DRAFTERS, held_out_walks, walk_args, write_result  # noqa: E402

EOS = set(common.EOS_IDS)
OPTS = [None, 2, 3, 4, 5, 7]


def lookup(ctx, width, longest):
    """(continuation, tokens matched) for the context's last pair, or (None, 0)."""
    n = len(ctx)
    if n <= 2:
        return None, 0
    occ = [s for s in range(n - 3, -1, -1) if ctx[s] == ctx[-2] and ctx[s + 1] == ctx[-1]][:64]
    if not occ:
        return None, 0

    def before(s):
        k = 0
        while k < 14 and s - 1 - k >= 0 and ctx[s - 1 - k] == ctx[n - 3 - k]:
            k += 1
        return k
    s = max(occ, key=lambda s: (before(s), s)) if longest else occ[0]
    return ctx[s + 2:min(s + 2 + width, n)], 2 + before(s)


def kind(matched):
    return 0 if matched == 2 else (1 if matched <= 4 else 2)


def prep(rec, name, longest):
    """Per anchor: (continuation after the first draft, its kind, lookup drafts accepted)."""
    seq, n = rec["prompt"] + rec["resp"], len(rec["prompt"])
    out = []
    for p in range(len(rec[name])):
        c, m = lookup(seq[:n + p + 2], 16, longest)
        acc = 0
        for j, t in enumerate(c or []):
            if n + p + 2 + j < len(seq) and seq[n + p + 2 + j] == t:
                acc += 1
            else:
                break
        out.append((c, kind(m), acc))
    return out


def walk(rec, name, pre, k_own, k_kind, a):
    """(tokens, rounds, cost) of one prompt's walk: the drafter's k_own drafts a round, or after
    a first draft with a match of kind j, k_kind[j] drafts in all (None: the drafter's)."""
    resp, m = rec["resp"], rec[name]
    toks = rounds = 0
    cost, emitted, p = 0.0, 1, 0
    if resp[0] in EOS:
        return 0, 0, 0.0
    while emitted < a.max_new and p < len(m):
        k, acc = k_own, min(m[p], k_own)
        c, j, la = pre[p]
        if c and k_kind[j] is not None:
            k = min(k_kind[j], 1 + len(c))
            acc = min(1 + la, k) if m[p] >= 1 else 0
        rounds += 1
        toks += acc + 1
        emitted += acc + 1
        cost += 1.0 + a.row * k + a.draft
        if any(t in EOS for t in resp[p + 1:p + 2 + acc]):
            break
        p += acc + 1
    return toks, rounds, cost


def main():
    ap = walk_args(__doc__, 40)
    ap.add_argument("--row", type=float, default=0.16)
    ap.add_argument("--draft", type=float, default=0.1)
    ap.add_argument("--dump")
    a = ap.parse_args()
    t0 = time.time()
    if a.dump and os.path.exists(a.dump):
        data = pickle.load(open(a.dump, "rb"))
    else:
        data = held_out_walks(a)
        if a.dump:
            pickle.dump(data, open(a.dump, "wb"))
    result = {"about": __doc__.split("\n\n")[0], "prompts_per_set": a.prompts, "max_new": a.max_new,
              "row": a.row, "draft": a.draft, "sets": {}}
    for sname, recs in data.items():
        for name in DRAFTERS:
            row = {}
            for longest in (False, True):
                pres = [prep(r, name, longest) for r in recs]

                def ev(k_own, k_kind):
                    t = r = 0
                    c = 0.0
                    for rec, pre in zip(recs, pres):
                        t1, r1, c1 = walk(rec, name, pre, k_own, k_kind, a)
                        t, r, c = t + t1, r + r1, c + c1
                    return round(t / max(r, 1), 3), round(t / max(c, 1e-9), 4)
                rule = "longest" if longest else "latest"
                row[f"tau_7_drafts_{rule}"] = ev(7, (7, 7, 7))[0]
                if longest:
                    row["tau_7_drafts_no_lookup"] = ev(7, (None, None, None))[0]
                    plain = max(((k, ev(k, (None,) * 3)) for k in range(1, 8)), key=lambda x: x[1][1])
                    row["best_plain"] = {"drafts": plain[0], "tau": plain[1][0], "tokens_per_cost": plain[1][1]}
                    best = None
                    for k in (2, 3):
                        for kk in itertools.product(OPTS, repeat=3):
                            v = ev(k, kk)
                            if best is None or v[1] > best[2][1]:
                                best = (k, kk, v)
                    row["best_by_kind"] = {"drafts": best[0], "lookup_drafts_by_kind": best[1],
                                           "tau": best[2][0], "tokens_per_cost": best[2][1]}
            result["sets"][f"{sname}/{name}"] = row
            print(sname, name, json.dumps(row), flush=True)
    write_result(a.out, result, t0)


if __name__ == "__main__":
    main()
