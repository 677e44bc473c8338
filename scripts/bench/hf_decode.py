#!/usr/bin/env python3
"""HF transformers reference timing for `dspark bench --hf-python`: greedy decode of the same
prompt ids on CPU in float32 (GGUF dequantized by transformers). Prints one JSON object:
{"tok_s": ..., "tokens": N, "secs": S, "ids": [[...], ...]}. Argument: a JSON object with
model (a .gguf path or HF dir), prompts (lists of ids) and max_tokens."""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

args = json.loads(sys.argv[1])
torch.set_num_threads(os.cpu_count() or 1)
path = args["model"]
if path.endswith(".gguf"):
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
else:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.eval()
n = args["max_tokens"]
out_ids, total, secs = [], 0, 0.0
with torch.inference_mode():
    warm = torch.tensor([args["prompts"][0]])
    model.generate(warm, attention_mask=torch.ones_like(warm), max_new_tokens=4, do_sample=False,
                   eos_token_id=None, pad_token_id=0)
    for ids in args["prompts"]:
        x = torch.tensor([ids])
        t = time.time()
        y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, eos_token_id=None, pad_token_id=0)
        secs += time.time() - t
        new = y[0, len(ids):].tolist()
        total += len(new)
        out_ids.append(new)
print(json.dumps({"tok_s": total / secs, "tokens": total, "secs": secs, "ids": out_ids}))
