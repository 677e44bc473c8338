#!/usr/bin/env python3
"""What bigram lookup drafts would add beside the trained drafters, before building them: the
exact greedy walk of evaluate.py over the first N prompts of each held-out set, by cap on the
drafts a round, for
- lookup alone: at each anchor, the tokens that followed the latest earlier occurrence of the
  last two tokens (prompt and response so far), cut to the known context; no match, no drafts;
- each trained drafter alone (evaluate.accept_runs);
- drafter + lookup: the lookup's drafts where a match exists, else the drafter's;
- drafter, then lookup after D: the drafter's first D drafts, then, where the context with them
  has a match, the lookup's drafts after them, else the drafter's rest (D = 1, 2).
Also the share of anchors with a match. CPU is enough (20 + 20 prompts x 128 tokens: under 3 min on 2 cores).

  python scripts/train/lookup_walk.py --gguf-dir DIR [--prompts 20] [--max-new 128] --out OUT.json
with a Python that has torch, transformers and gguf (as evaluate.py); DIR holds the demo GGUF (or a
link to it), beside which common.load_target writes its f32 copy on the first run.
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
import evaluate as ev  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CAPS = (1, 2, 3, 4, 7)


def lookup_runs(seq, n, width):
    """(has a match, drafts accepted) at each anchor p, whose pending token is seq[n + p]."""
    out = []
    for pos in range(n, len(seq) - 1):
        a, b = seq[pos - 1], seq[pos]
        j = next((j for j in range(pos - 1, 0, -1) if seq[j - 1] == a and seq[j] == b), None)
        if j is None:
            out.append((False, 0))
            continue
        acc = 0
        for k, t in enumerate(seq[j + 1:min(j + 1 + width, pos + 1)]):
            if pos + 1 + k < len(seq) and seq[pos + 1 + k] == t:
                acc += 1
            else:
                break
        out.append((True, acc))
    return out


def extend(m, lk, d):
    """Accepted drafts at each anchor when the drafter's first d drafts are followed by the
    lookup's where the context through them (the target's tokens, once they are accepted) has a
    match, else by the drafter's rest."""
    out = []
    for p, run in enumerate(m):
        q = p + d
        if run < d or q >= len(lk) or not lk[q][0]:
            out.append(run)
        else:
            out.append(d + lk[q][1])
    return out


def tau(runs, resps, max_new, cap):
    return round(ev.mean_tau(runs, resps, max_new, cap), 3)


# the shipped drafters each walk runs, as held_out_walks names their accept runs
DRAFTERS = ("dflash8", "dspark")


def held_out_walks(a):
    """Per held-out set (mtbench, humaneval): for each of its first `a.prompts` prompts, the
    chat ids, the target's greedy response of `a.max_new` tokens and each shipped drafter's
    accept runs over it (evaluate.accept_runs), on the CPU."""
    tok_, model, template = common.load_target(a.gguf_dir, "cpu")
    taps = common.Taps(model, common.TAPS)
    emb = common.embed_weight(model)
    d = os.path.join(ROOT, "assets", "drafters")
    drafters = dict(zip(DRAFTERS, (ev.load_drafter(f"{d}/smollm2-135m-dflash-b16", emb.shape[1], "cpu", 8),
                                   ev.load_drafter(f"{d}/smollm2-135m-dspark-b7", emb.shape[1], "cpu"))))
    mt = [json.loads(x)["turns"][0] for x in open(f"{a.artefacts}/mtbench/question.jsonl") if x.strip()]
    he = [json.loads(x)["prompt"] for x in gzip.open(f"{a.artefacts}/humaneval/HumanEval.jsonl.gz", "rt") if x.strip()]
    out = {}
    for sname, prompts in (("mtbench", mt[:a.prompts]), ("humaneval", he[:a.prompts])):
        ids = [common.chat_ids(tok_, template, p) for p in prompts]
        resps = common.batched_generate(model, ids, a.max_new, sample=False, device="cpu")
        recs = []
        for p, r in zip(ids, resps):
            seq = torch.tensor([p + r])
            fused, _ = common.target_states(model, taps, seq, torch.ones_like(seq))
            rec = {"prompt": p, "resp": r}
            for name, (cfg, net, heads) in drafters.items():
                kind = "dspark" if heads is not None else "dflash"
                rec[name] = ev.accept_runs(kind, cfg, net, heads, emb, fused, seq, len(p))
            recs.append(rec)
        out[sname] = recs
    return out


def write_result(path, result, t0):
    """`result`, with the seconds since `t0`, as indented JSON at `path`."""
    result["seconds"] = round(time.time() - t0, 1)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def walk_args(doc, prompts):
    """The walk's command line (held_out_walks' inputs and --out), described by `doc`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--artefacts", default=os.path.expanduser("~/.cache/dspark/artefacts"))
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--out", required=True)
    return ap


def main():
    a = walk_args(__doc__, 20).parse_args()
    t0 = time.time()
    result = {"about": __doc__.split("\n\n")[0], "prompts_per_set": a.prompts, "max_new": a.max_new, "sets": {}}
    for sname, recs in held_out_walks(a).items():
        resps = [rec["resp"] for rec in recs]
        runs = {name: [rec[name] for rec in recs] for name in DRAFTERS}
        lk = [lookup_runs(rec["prompt"] + rec["resp"], len(rec["prompt"]), max(CAPS)) for rec in recs]
        row = {"anchors_with_a_match": round(sum(h for x in lk for h, _ in x) / sum(len(x) for x in lk), 3)}
        for cap in CAPS:
            row[f"lookup_cap{cap}"] = tau([[n for _, n in x] for x in lk], resps, a.max_new, cap)
            for name in DRAFTERS:
                row[f"{name}_cap{cap}"] = tau(runs[name], resps, a.max_new, cap)
                both = [[n if h else m_ for (h, n), m_ in zip(x, m)] for x, m in zip(lk, runs[name])]
                row[f"{name}+lookup_cap{cap}"] = tau(both, resps, a.max_new, cap)
                for d in (1, 2):
                    row[f"{name}+lookup_after{d}_cap{cap}"] = tau(
                        [extend(m, x, d) for x, m in zip(lk, runs[name])], resps, a.max_new, cap)
        result["sets"][sname] = row
        print(sname, json.dumps(row), flush=True)
    write_result(a.out, result, t0)


if __name__ == "__main__":
    main()
