#!/usr/bin/env python3
"""torch-side goldens on the tiny spec checkpoints (CPU, f32, greedy): HF transformers greedy
on the target and z-lab dflash 0.1.0 `dflash_generate` (temperature 0) with both DFlash
drafters. Records per round the drafted ids (argmax of the drafter logits that z-lab computes,
read by wrapping DFlashDraftModel.compute_logits, result returned unchanged) and the accept
lengths (z-lab's own `acceptance_lengths`: its `return_stats=True` path times with
torch.cuda.synchronize, so the timer is swapped for time.perf_counter; nothing else changes).

Compares with tests/fixtures/spec/golden_mlx.json when present and writes
tests/fixtures/spec/golden_zlab.json. Run with the .venv-ref interpreter (scripts/oracles/setup.sh).
"""
from __future__ import annotations

import argparse
import importlib.metadata as im
import json
import os
import platform
import time

import torch
import dflash.model as zm
from dflash.model import DFlashDraftModel
from transformers import AutoModelForCausalLM

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC = os.path.join(ROOT, "tests", "fixtures", "spec")
MAX_NEW = 40


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(SPEC, "models"))
    ap.add_argument("--mlx", default=os.path.join(SPEC, "golden_mlx.json"))
    ap.add_argument("--out", default=os.path.join(SPEC, "golden_zlab.json"))
    ap.add_argument("--max-new", type=int, default=MAX_NEW)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    mlx = json.load(open(a.mlx)) if os.path.exists(a.mlx) else None
    prompts = [c["prompt_ids"] for c in mlx["cases"]] if mlx else None
    if prompts is None:
        raise SystemExit("golden_mlx.json is needed for the prompt list (run run_mlx.py first)")

    target = AutoModelForCausalLM.from_pretrained(os.path.join(a.models, "target"), dtype=torch.float32)
    target.eval()
    target.generation_config.eos_token_id = None
    target.generation_config.pad_token_id = 0
    drafters = {}
    for mode, d in (("dflash", "dflash"), ("dflash_accept", "dflash-accept")):
        m, info = DFlashDraftModel.from_pretrained(os.path.join(a.models, d), dtype=torch.float32,
                                                   output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, f"{d}: non-strict load {bad}"
        drafters[mode] = m.eval()

    # --- record drafted ids per round (values untouched) and enable stats on CPU ---
    rounds: list[list[int]] = []
    o_cl = DFlashDraftModel.compute_logits

    def compute_logits(self, hidden, output_head):
        out = o_cl(self, hidden, output_head)
        rounds.append([int(x) for x in out[0].argmax(-1).tolist()])
        return out

    DFlashDraftModel.compute_logits = compute_logits
    zm._cuda_time = time.perf_counter

    def vers(p):
        try:
            return im.version(p)
        except im.PackageNotFoundError:
            return None

    res = {
        "reference": "z-lab dflash (torch) + HF transformers",
        "versions": {p: vers(p) for p in ("dflash", "torch", "transformers", "numpy")},
        "platform": f"{platform.system()} {platform.machine()} python {platform.python_version()}",
        "dtype": "float32", "temperature": 0.0, "max_new_tokens": a.max_new, "stop_tokens": [],
        "notes": "token_ids = generated ids after the prompt (the first comes from the prefill "
                 "logits); z-lab stops at exactly max_new_tokens and shrinks the last blocks to "
                 "min(block_size, prompt_len + max_new - start) (fewer drafts there); "
                 "accept_lengths = z-lab acceptance_lengths (tokens committed per round, "
                 "clipped at the budget); drafted[r] = argmax of the drafter logits in round r.",
        "cases": [],
    }
    report = {"hf_eq_mlx_baseline": True, "zlab_eq_hf": {}, "drafts_vs_mlx": {}}
    for ci, ids in enumerate(prompts):
        x = torch.tensor([ids])
        case = {"prompt_ids": ids}
        with torch.no_grad():
            out = target.generate(x, max_new_tokens=a.max_new + 8, do_sample=False,
                                  attention_mask=torch.ones_like(x))
        hf = out[0, len(ids):].tolist()
        case["hf_greedy"] = {"token_ids": hf}
        if mlx:
            mb = mlx["cases"][ci]["baseline"]["token_ids"]
            eq = hf[: len(mb)] == mb[: len(hf)]
            case["hf_greedy"]["equals_mlx_baseline"] = eq
            report["hf_eq_mlx_baseline"] &= eq
        for mode, dm in drafters.items():
            rounds.clear()
            st = zm.dflash_generate(dm, target, x, a.max_new, None, temperature=0.0, return_stats=True)
            toks = st.output_ids[0, len(ids):].tolist()
            e = {"token_ids": toks, "accept_lengths": list(st.acceptance_lengths),
                 "drafted": [list(r) for r in rounds],
                 "equals_hf_greedy_prefix": toks == hf[: len(toks)]}
            assert len(rounds) == len(st.acceptance_lengths)
            report["zlab_eq_hf"].setdefault(mode, True)
            report["zlab_eq_hf"][mode] &= e["equals_hf_greedy_prefix"]
            if mlx:
                mr = mlx["cases"][ci][mode]
                same_rounds, diff = 0, []
                for r, (zd, md_) in enumerate(zip(e["drafted"], mr["drafted"])):
                    if zd == md_:
                        same_rounds += 1
                    else:
                        diff.append({"round": r, "zlab": zd, "mlx": md_,
                                     "zlab_block_shrunk": len(zd) < len(md_),
                                     "zlab_prefix_of_mlx": zd == md_[: len(zd)]})
                e["vs_mlx"] = {"rounds_compared": min(len(e["drafted"]), len(mr["drafted"])),
                               "rounds_identical": same_rounds, "differences": diff,
                               "accept_lengths_equal_where_unclipped":
                                   st.acceptance_lengths[:-1] == mr["accept_lengths"][: len(st.acceptance_lengths) - 1]}
                rep = report["drafts_vs_mlx"].setdefault(mode, {"rounds": 0, "identical": 0,
                                                                "differ_only_in_shrunk_blocks": True})
                rep["rounds"] += e["vs_mlx"]["rounds_compared"]
                rep["identical"] += same_rounds
                rep["differ_only_in_shrunk_blocks"] &= all(d["zlab_block_shrunk"] for d in diff)
            case[mode] = e
            mean = sum(st.acceptance_lengths) / len(st.acceptance_lengths)
            print(f"case {ci} {mode:13s} n={len(toks)} rounds={len(st.acceptance_lengths)} mean={mean:.2f} "
                  f"== hf: {e['equals_hf_greedy_prefix']} vs mlx: "
                  f"{e.get('vs_mlx', {}).get('rounds_identical')}/{e.get('vs_mlx', {}).get('rounds_compared')}")
        res["cases"].append(case)
    summ = {}
    for mode in drafters:
        tot = sum(sum(c[mode]["accept_lengths"]) for c in res["cases"])
        rn = sum(len(c[mode]["accept_lengths"]) for c in res["cases"])
        summ[mode] = {"mean_accept_length": round(tot / rn, 4)}
    res["summary"] = summ
    res["report"] = report
    print(json.dumps({"summary": summ, "report": report}, indent=1))
    with open(a.out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
