#!/usr/bin/env python3
"""fastgen.generate (f32) against transformers' greedy generate on a few prompts of different
lengths in one batch, and a bf16 / sampled smoke run.

  python scripts/train/check_fastgen.py GGUF_DIR [--device cpu]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import fastgen  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("gguf_dir")
ap.add_argument("--device", default="cpu")
ap.add_argument("--max-new", type=int, default=40)
a = ap.parse_args()
tok, model, tpl = common.load_target(a.gguf_dir, a.device)
texts = ["What is the capital of France?", "Write a haiku about rain.",
         "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n",
         "Explain in detail how a bicycle gear system works and why it helps riders on hills."]
prompts = [common.chat_ids(tok, tpl, t) for t in texts]
ref = common.batched_generate(model, prompts, a.max_new, sample=False, device=a.device)
lm = fastgen.FastLM(model, dtype=torch.float32)
t0 = time.time()
got = fastgen.generate(lm, prompts, [0.0] * len(prompts), a.max_new, common.EOS_IDS, common.PAD_ID)
print(f"fastgen f32: {time.time() - t0:.1f}s")
bad = 0
for r, g, t in zip(ref, got, texts):
    same = len(r) if r == g else next(i for i, (x, y) in enumerate(zip(r + [-9], g + [-8])) if x != y)
    print(f"{'OK ' if r == g else 'DIFF'} agree {same}/{len(r)}: {tok.decode(g)[:80]!r}")
    bad += r != g
single = [fastgen.generate(lm, [p], [0.0], a.max_new, common.EOS_IDS, common.PAD_ID)[0] for p in prompts]
print("batch == one at a time:", single == got)
lm16 = fastgen.FastLM(model, dtype=torch.bfloat16)
gen = torch.Generator(device=a.device).manual_seed(1)
s = fastgen.generate(lm16, prompts, [0.0, 0.7, 1.0, 0.7], a.max_new, common.EOS_IDS, common.PAD_ID, gen=gen)
for x in s:
    print("bf16/sampled:", repr(tok.decode(x)[:80]))
sys.exit(1 if bad > 1 else 0)
