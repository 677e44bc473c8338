#!/usr/bin/env python3
"""mlx-dspark 0.20.3 goldens on real weights: the trained SmolLM2-135M drafters of
assets/drafters/ (DFlash b16 and b8, DSpark b7) with the demo target dequantized to f32.

The target is the HF copy that scripts/train/common.py writes from the GGUF
(``<artefacts>/smollm2/hf-f32``: transformers' GGUF loader, f32, Llama with tied embeddings);
mlx-lm loads it as ``llama`` and mlx-dspark's hidden-state tap probe (``require_tap``) accepts
it once ``rope_theta`` is hoisted to the top level of its config (see ``mlx_copy``). The
drafters (``$DSPARK_DRAFTERS_DIR``, default assets/drafters) load unchanged: DFlash binds the target's embedding and head as z-lab's layout
always does; the DSpark checkpoint ships no ``embed_tokens``/``lm_head``, which mlx-dspark's
``load_drafter`` reads as "reuse the target's" (``has_own_embed`` / ``has_own_lm_head`` false).

Prompts: the first ``--prompts`` MT-Bench first turns through the chat template, ids as dspark
renders them (checked in the Rust test). Greedy, CPU, f32, no lookup drafts, full block, no
confidence cut, the target's eos set. Per round it records what ``run_mlx.Recorder`` records:
the ids fed to each verify forward and the accept lengths.

Writes tests/fixtures/spec/golden_mlx_smollm2.json. Run with the .venv-mlx interpreter through
scripts/oracles/smollm2_mlx.sh (which makes the hf-f32 copy first).
"""
from __future__ import annotations

import argparse
import importlib.metadata as im
import json
import os
import platform
import sys

import mlx.core as mx

import mlx_dspark as md

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_mlx import Recorder  # noqa: E402  (wraps the drafters' and the target's methods)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ART = os.environ.get("DSPARK_ARTEFACTS", os.path.expanduser("~/.cache/dspark/artefacts"))
DRAFTERS = os.environ.get("DSPARK_DRAFTERS_DIR", os.path.join(ROOT, "assets", "drafters"))
# (golden key, drafter folder, loop)
RUNS = [
    ("dflash_b16", "smollm2-135m-dflash-b16", "dflash"),
    ("dflash_b8", "smollm2-135m-dflash-b8", "dflash"),
    ("dspark_b7", "smollm2-135m-dspark-b7", "dspark"),
]


def vers(p):
    try:
        return im.version(p)
    except im.PackageNotFoundError:
        return None


def mlx_copy(hf: str) -> str:
    """The hf-f32 folder as mlx-lm reads it: transformers 5 writes RoPE's base only under
    ``rope_parameters.rope_theta``, while mlx-lm 0.32's llama reads a top-level ``rope_theta``
    and otherwise takes 10000 (SmolLM2 uses 100000: every greedy token after the first few
    differs). The copy links the weights and tokenizer and hoists the field; nothing else."""
    out = hf.rstrip("/") + "-mlx"
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(hf):
        if name != "config.json" and not os.path.exists(os.path.join(out, name)):
            os.symlink(os.path.join(hf, name), os.path.join(out, name))
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("rope_theta", cfg["rope_parameters"]["rope_theta"])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return out


def prompts(tok, n):
    out = []
    with open(os.path.join(ART, "mtbench", "question.jsonl")) as f:
        for line in f:
            if len(out) == n:
                break
            q = json.loads(line)
            msgs = [{"role": "user", "content": q["turns"][0]}]
            text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            out.append(tok.encode(text, add_special_tokens=False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=os.path.join(ART, "smollm2", "hf-f32"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "spec",
                                                   "golden_mlx_smollm2.json"))
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new", type=int, default=64)
    a = ap.parse_args()

    mx.set_default_device(mx.cpu)
    target, tok = md.load_target(mlx_copy(a.target), require_tap=True)
    eos = sorted(md.generate.eos_token_ids(tok))
    rec = Recorder()
    # the checkpoints' own bytes, so the Rust test can tell a stale golden from a dspark bug
    import hashlib

    def sha(d):
        with open(os.path.join(DRAFTERS, d, "model.safetensors"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    res = {
        "reference": "mlx-dspark",
        "versions": {p: vers(p) for p in ("mlx-dspark", "mlx", "mlx-lm", "transformers", "numpy")},
        "platform": f"{platform.system()} {platform.machine()} python {platform.python_version()}",
        "device": str(mx.default_device()),
        "dtype": "float32",
        "temperature": 0.0,
        "max_new_tokens": a.max_new,
        "stop_tokens": eos,
        "drafter_sha256": {d: sha(d) for _, d, _ in RUNS},
        "notes": "target: SmolLM2-135M-Instruct Q4_1 GGUF dequantized to f32 by transformers "
                 "(scripts/train/common.py hf-f32), loaded by mlx-lm (llama); drafters from "
                 "assets/drafters loaded with quantize=False, full block, no lookup drafts, no "
                 "confidence cut. token_ids include the first token (from the prefill logits); "
                 "accept_lengths[r] = tokens committed in round r (accepted drafts + 1); "
                 "verified[r] = ids fed to the target's verify forward of round r ([pending] + "
                 "drafts). mlx-dspark commits whole rounds, so runs may overshoot "
                 "max_new_tokens by up to one block.",
        "cases": [],
    }
    drafters = {}
    for key, d, loop in RUNS:
        path = os.path.join(DRAFTERS, d)
        if loop == "dflash":
            m, _ = md.load_dflash(path, quantize=False)
        else:
            m, cfg = md.load_drafter(path, quantize=False)
            assert not cfg.has_own_embed and not cfg.has_own_lm_head
        drafters[key] = (m, loop)

    for ids in prompts(tok, a.prompts):
        base = md.greedy_generate(target, tok, prompt_ids=ids, max_new_tokens=a.max_new + 16)
        case = {"prompt_ids": ids, "baseline": {"token_ids": base.token_ids}}
        for key, (m, loop) in drafters.items():
            rec.reset()
            if loop == "dspark":
                r = md.speculative_generate(
                    target, tok, m, prompt_ids=ids, max_new_tokens=a.max_new,
                    max_draft_tokens=None, lookup_drafts=False, confidence_threshold=0.0)
            else:
                r = md.dflash_generate(
                    target, tok, m, prompt_ids=ids, max_new_tokens=a.max_new,
                    max_draft_tokens=None, lookup_drafts=False)
            t = r.token_ids
            e = {"token_ids": t, "accept_lengths": r.accept_lengths, "verified": rec.verified,
                 "equals_baseline_prefix": t == base.token_ids[: len(t)]}
            assert len(rec.verified) == len(r.accept_lengths), (key, len(rec.verified))
            case[key] = e
            mean = sum(r.accept_lengths) / max(1, len(r.accept_lengths))
            print(f"{key:10s} n={len(t):3d} rounds={len(r.accept_lengths):3d} mean={mean:.2f} "
                  f"== baseline: {e['equals_baseline_prefix']}", flush=True)
        res["cases"].append(case)

    summ = {}
    for key, _, _ in RUNS:
        toks = sum(sum(c[key]["accept_lengths"]) for c in res["cases"])
        rnds = sum(len(c[key]["accept_lengths"]) for c in res["cases"])
        summ[key] = {"mean_accept_length": round(toks / rnds, 4),
                     "all_equal_baseline": all(c[key]["equals_baseline_prefix"]
                                               for c in res["cases"])}
    res["summary"] = summ
    print(json.dumps(summ, indent=1))
    with open(a.out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
