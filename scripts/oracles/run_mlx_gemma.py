#!/usr/bin/env python3
"""mlx-dspark 0.20.3 goldens for the Gemma drafters on the tiny Gemma 4 checkpoints of
scripts/oracles/make_gemma_spec_tiny.py (CPU, f32, greedy).

The target runs as mlx-dspark runs a Gemma 4 checkpoint: mlx-vlm's gemma4 language model
(`mlx_vlm.models.gemma4.language.LanguageModel`, whose `capture_layer_ids` hook gives the
taps) inside `mlx_dspark.Target`, which routes it by package (mlx-vlm) to that hook. The
multimodal wrapper's vision tower is never used for text ids, so the text model is held by a
small container declared in mlx-vlm's gemma4 package namespace (that is all Target reads).

Modes per prompt: the greedy baseline; DSpark with the full block (no lookup, no confidence
cut); DSpark with confidence_threshold 0.5; DSpark with a drafter that binds the target's
embedding and head; DFlash (full block). Per round: the drafted ids, the ids fed to the
verify forward and the accept lengths (the Recorder of run_mlx.py).

Not covered: DFlash sliding-window layers. mlx-dspark's context cache (a RotatingKVCache of
window - 1 rows) comes back in buffer order after a one-row append (e.g. positions
[16, 10, .., 15]), and its positional window mask then hides the newest context row from block
rows >= 1 instead of the oldest; the engine masks by position (what the window means), so the
two differ from the first round that commits a single token.

Writes tests/fixtures/spec/golden_mlx_gemma.json. Run with .venv-mlx (scripts/oracles/setup.sh).
"""
from __future__ import annotations

import argparse
import importlib.metadata as im
import json
import os
import platform
import sys

import mlx.core as mx
import mlx.nn as nn
import mlx_dspark as md
from mlx_vlm.models.gemma4.config import TextConfig
from mlx_vlm.models.gemma4.language import LanguageModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_mlx import Recorder  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC = os.path.join(ROOT, "tests", "fixtures", "spec")

PROMPTS = [
    [2, 129, 367, 211, 426, 510, 144, 240, 109, 353, 326, 431, 411, 499, 492, 457],
    [2, 100, 387, 509, 39, 124, 74, 131, 158, 37, 458, 131, 470, 389, 88, 356, 395, 65, 66],
    [2, 472, 141, 370, 82, 164, 495, 215, 263, 149, 59, 216, 318, 232],
    [2, 392, 454, 108, 445, 424, 160, 32, 394, 421, 235, 84, 74, 191, 386, 161],
    [2, 373, 150, 325, 432, 410, 63, 495, 374, 356, 95, 471],
    [2, 334, 81, 220, 451, 443, 161, 323, 42, 414, 137, 174, 493, 277],
    [2, 353, 380, 91, 286, 202],
]
MAX_NEW = 40


class Gemma4Text(nn.Module):
    """Holds the gemma4 language model the way mlx-vlm's gemma4 Model does."""

    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.language_model = LanguageModel(cfg)

    def make_cache(self):
        return self.language_model.make_cache()


Gemma4Text.__module__ = "mlx_vlm.models.gemma4"


class NoTokenizer:
    """The goldens work on ids only; Target/the loops read eos ids from here."""
    eos_token_id = None
    eos_token_ids = []

    def convert_tokens_to_ids(self, t):
        return None

    def decode(self, ids, **kw):
        return " ".join(f"<t{i}>" for i in ids)


def load_target(path):
    with open(os.path.join(path, "config.json")) as f:
        c = json.load(f)
    model = Gemma4Text(TextConfig.from_dict(c))
    w = mx.load(os.path.join(path, "model.safetensors"))
    w = {f"language_model.{k}": v for k, v in w.items()}
    w = model.language_model.sanitize(w)
    model.load_weights(list(w.items()), strict=True)
    mx.eval(model.parameters())
    return md.Target(model, NoTokenizer())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(SPEC, "gemma"))
    ap.add_argument("--out", default=os.path.join(SPEC, "golden_mlx_gemma.json"))
    ap.add_argument("--max-new", type=int, default=MAX_NEW)
    a = ap.parse_args()
    M = a.models
    target = load_target(os.path.join(M, "target"))
    assert target.is_vlm and target.family == "gemma4"
    tok = target.tokenizer
    dsp, _ = md.load_drafter(os.path.join(M, "dspark"), quantize=False)
    dsb, _ = md.load_drafter(os.path.join(M, "dspark-bound"), quantize=False)
    assert dsp.config.family == "gemma4" and dsp.config.scaling == 1.0
    assert not dsb.config.has_own_embed and not dsb.config.has_own_lm_head
    dfl, _ = md.load_dflash(os.path.join(M, "dflash"), quantize=False)
    assert dfl.config.rope_theta == 10000.0
    rec = Recorder()

    def vers(p):
        try:
            return im.version(p)
        except im.PackageNotFoundError:
            return None

    res = {
        "reference": "mlx-dspark",
        "versions": {p: vers(p) for p in ("mlx-dspark", "mlx", "mlx-lm", "mlx-vlm", "numpy")},
        "platform": f"{platform.system()} {platform.machine()} python {platform.python_version()}",
        "device": str(mx.default_device()),
        "dtype": "float32",
        "temperature": 0.0,
        "max_new_tokens": a.max_new,
        "stop_tokens": [],
        "notes": "Gemma 4 tiny target through mlx-vlm's gemma4 language model; fields as in "
                 "golden_mlx.json (token_ids include the first token from the prefill logits; "
                 "verified[r] = [pending] + the drafts fed to round r's verify; accept_lengths[r] "
                 "= accepted drafts + 1).",
        "cases": [],
    }
    modes = {"dspark": (dsp, 0.0), "dspark_conf05": (dsp, 0.5), "dspark_bound": (dsb, 0.0),
             "dflash": (dfl, None)}
    for ids in PROMPTS:
        case = {"prompt_ids": ids}
        base = md.greedy_generate(target, tok, prompt_ids=ids, max_new_tokens=a.max_new + 8)
        case["baseline"] = {"token_ids": base.token_ids}
        b = base.token_ids
        for m, (d, thr) in modes.items():
            rec.reset()
            if thr is not None:
                r = md.speculative_generate(
                    target, tok, d, prompt_ids=ids, max_new_tokens=a.max_new,
                    max_draft_tokens=None, lookup_drafts=False, confidence_threshold=thr)
            else:
                r = md.dflash_generate(
                    target, tok, d, prompt_ids=ids, max_new_tokens=a.max_new,
                    max_draft_tokens=None, lookup_drafts=False)
            t = r.token_ids
            e = {"token_ids": t, "accept_lengths": r.accept_lengths, "drafted": rec.rounds,
                 "verified": rec.verified, "equals_baseline_prefix": t == b[: len(t)]}
            assert len(rec.rounds) == len(r.accept_lengths), (m, len(rec.rounds))
            case[m] = e
            mean = sum(r.accept_lengths) / max(1, len(r.accept_lengths))
            print(f"{m:14s} n={len(t):3d} rounds={len(r.accept_lengths):3d} mean={mean:.2f} "
                  f"== baseline: {e['equals_baseline_prefix']} accept={r.accept_lengths}")
        res["cases"].append(case)
        print("baseline", b)
    summ = {}
    for m in modes:
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
