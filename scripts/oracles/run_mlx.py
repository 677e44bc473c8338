#!/usr/bin/env python3
"""mlx-dspark 0.20.3 goldens on the tiny spec checkpoints (CPU, f32, greedy).

Runs, for every prompt: the plain greedy baseline, DSpark (full block, no lookup, no
confidence cut), DSpark with confidence_threshold 0.5, DFlash with the random drafter and
DFlash with the partially-accepted drafter. Records per round the drafted ids as the
reference computes them (by wrapping the drafter's own methods, which returns their results
unchanged), and for DSpark the argmax of the block logits before the Markov bias.

Writes tests/fixtures/spec/golden_mlx.json. Run with the .venv-mlx interpreter
(scripts/oracles/setup.sh).
"""
from __future__ import annotations

import argparse
import importlib.metadata as im
import json
import os
import platform

import mlx.core as mx

import mlx_dspark as md
from mlx_dspark.dflash_model import DFlashDraftModel
from mlx_dspark.model import DSparkDrafter

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC = os.path.join(ROOT, "tests", "fixtures", "spec")

PROMPTS = [  # chosen for variety: periodic tails, short repeats, one absorbing repeat
    [129, 367, 211, 426, 510, 144, 240, 109, 353, 326, 431, 411, 499, 492, 457],
    [100, 387, 509, 39, 124, 74, 131, 158, 37, 458, 131, 470, 389, 88, 356, 395, 65, 66],
    [472, 141, 370, 82, 164, 495, 215, 263, 149, 59, 216, 318, 232],
    [392, 454, 108, 445, 424, 160, 32, 394, 421, 235, 84, 74, 191, 386, 161],
    [373, 150, 325, 432, 410, 63, 495, 374, 356, 95, 471],
    [334, 81, 220, 451, 443, 161, 323, 42, 414, 137, 174, 493, 277],
    [353, 380, 91, 286, 202],
]
MAX_NEW = 40


class Recorder:
    """Wraps DSparkDrafter.sample_block / compute_logits and DFlashDraftModel.__call__ and
    stores what they return (the returned values are passed through untouched)."""

    def __init__(self):
        self.rounds = []
        self.pre_markov = []
        self.verified = []
        o_sb, o_cl, o_df = DSparkDrafter.sample_block, DSparkDrafter.compute_logits, DFlashDraftModel.__call__
        o_vf = md.Target.verify
        rec = self

        def verify(self, ids, cache, tap):
            rec.verified.append([int(x) for x in ids[0].tolist()])
            return o_vf(self, ids, cache, tap)

        md.Target.verify = verify

        def sample_block(self, base_logits, first_prev_token):
            out = o_sb(self, base_logits, first_prev_token)
            rec.rounds.append([int(x) for x in out.tolist()])
            return out

        def compute_logits(self, hidden):
            out = o_cl(self, hidden)
            rec.pre_markov.append([int(x) for x in mx.argmax(out[0], axis=-1).tolist()])
            return out

        def dcall(self, inputs, target_hidden, cache, logits_start=0):
            out = o_df(self, inputs, target_hidden, cache, logits_start)
            rec.rounds.append([int(x) for x in mx.argmax(out[0], axis=-1).tolist()])
            return out

        DSparkDrafter.sample_block = sample_block
        DSparkDrafter.compute_logits = compute_logits
        DFlashDraftModel.__call__ = dcall

    def reset(self):
        self.rounds, self.pre_markov, self.verified = [], [], []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(SPEC, "models"))
    ap.add_argument("--out", default=os.path.join(SPEC, "golden_mlx.json"))
    ap.add_argument("--max-new", type=int, default=MAX_NEW)
    ap.add_argument("--modes", default="baseline,dspark,dspark_conf05,dflash,dflash_accept")
    a = ap.parse_args()
    modes = a.modes.split(",")

    M = a.models
    target, tok = md.load_target(os.path.join(M, "target"), require_tap=True)
    dsp, _ = md.load_drafter(os.path.join(M, "dspark"), quantize=False)
    dfl, _ = md.load_dflash(os.path.join(M, "dflash"), quantize=False)
    dfa, _ = md.load_dflash(os.path.join(M, "dflash-accept"), quantize=False)
    rec = Recorder()

    def vers(p):
        try:
            return im.version(p)
        except im.PackageNotFoundError:
            return None

    res = {
        "reference": "mlx-dspark",
        "versions": {p: vers(p) for p in ("mlx-dspark", "mlx", "mlx-lm", "numpy")},
        "platform": f"{platform.system()} {platform.machine()} python {platform.python_version()}",
        "device": str(mx.default_device()),
        "dtype": "float32",
        "temperature": 0.0,
        "max_new_tokens": a.max_new,
        "stop_tokens": [],
        "notes": "token_ids include the first token sampled from the prefill logits; "
                 "accept_lengths[r] = committed tokens in round r (accepted drafts + 1); "
                 "drafted[r] = ids the drafter proposed in round r (full block: 7 for DSpark, "
                 "block_size-1 = 7 for DFlash), before any confidence truncation; verified[r] = the ids fed to the target in the "
                 "verify forward of round r ([pending] + the drafts actually verified). Speculative "
                 "runs may overshoot max_new_tokens by up to one block.",
        "cases": [],
    }
    for ids in PROMPTS:
        case = {"prompt_ids": ids}
        base = md.greedy_generate(target, tok, prompt_ids=ids, max_new_tokens=a.max_new + 8)
        case["baseline"] = {"token_ids": base.token_ids}
        b = base.token_ids
        for m in modes:
            if m == "baseline":
                continue
            rec.reset()
            if m in ("dspark", "dspark_conf05"):
                r = md.speculative_generate(
                    target, tok, dsp, prompt_ids=ids, max_new_tokens=a.max_new,
                    max_draft_tokens=None, lookup_drafts=False,
                    confidence_threshold=0.5 if m == "dspark_conf05" else 0.0)
            else:
                r = md.dflash_generate(
                    target, tok, dfl if m == "dflash" else dfa, prompt_ids=ids,
                    max_new_tokens=a.max_new, max_draft_tokens=None, lookup_drafts=False)
            t = r.token_ids
            e = {"token_ids": t, "accept_lengths": r.accept_lengths, "drafted": rec.rounds,
                 "verified": rec.verified,
                 "equals_baseline_prefix": t == b[: len(t)]}
            if m.startswith("dspark"):
                e["block_argmax_pre_markov"] = rec.pre_markov
            assert len(rec.rounds) == len(r.accept_lengths), (m, len(rec.rounds), len(r.accept_lengths))
            case[m] = e
            mean = sum(r.accept_lengths) / max(1, len(r.accept_lengths))
            print(f"{m:14s} n={len(t):3d} rounds={len(r.accept_lengths):3d} mean={mean:.2f} "
                  f"== baseline: {e['equals_baseline_prefix']} accept={r.accept_lengths}")
        res["cases"].append(case)
        print("baseline", b)

    summ = {}
    for m in modes:
        if m == "baseline":
            continue
        toks = sum(sum(c[m]["accept_lengths"]) for c in res["cases"])
        rnds = sum(len(c[m]["accept_lengths"]) for c in res["cases"])
        summ[m] = {"mean_accept_length": round(toks / rnds, 4),
                   "all_equal_baseline": all(c[m]["equals_baseline_prefix"] for c in res["cases"])}
    res["summary"] = summ
    print(json.dumps(summ, indent=1))
    with open(a.out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
