#!/usr/bin/env python3
"""HF transformers reference for `dspark bench --device cuda` on the GPU machine: greedy decode
of the same prompt ids, bf16 on CUDA, with a static KV cache, first without compilation
(generation_config.disable_compile) and then with torch.compile mode "reduce-overhead" (CUDA
graphs). Decode tok/s = (N - 1) / (t(N new tokens) - t(1 new token)) on the same prompt, so the
prefill is left out as dspark's decode figure leaves it out. Writes one JSON object to OUT (and
rewrites it after each measurement, so a timeout keeps what was done).

Usage: python3 scripts/bench/hf_cuda_decode.py MODEL_DIR OUT.json PROMPT_IDS.json[:modes] ...
  modes: a '+'-separated subset of static,compile (default both), e.g. ids_8192.json:static
"""

import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

try:
    from transformers import CompileConfig
except ImportError:  # older transformers: compile through generation_config only
    CompileConfig = None

N = 128


def timed(model, ids, n, mode):
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
              cache_implementation="static")
    if mode == "static":
        kw["disable_compile"] = True
    elif CompileConfig is not None:
        kw["compile_config"] = CompileConfig(mode="reduce-overhead", fullgraph=True)
    x = torch.tensor([ids], device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    y = model.generate(x, attention_mask=torch.ones_like(x), generation_config=GenerationConfig(**kw))
    torch.cuda.synchronize()
    return time.perf_counter() - t, y[0, len(ids):].tolist()


def main():
    path, out = sys.argv[1], sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    res = {"model": path, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "max_new_tokens": N, "runs": []}
    import transformers

    res["transformers"] = transformers.__version__
    for spec in sys.argv[3:]:
        f, _, modes = spec.partition(":")
        prompts = json.load(open(f))
        for mode in (modes or "static+compile").split("+"):
            with torch.inference_mode():
                t0 = time.perf_counter()
                # warm-up (compilation and graph capture happen here for "compile")
                for _ in range(3 if mode == "compile" else 1):
                    timed(model, prompts[0], N, mode)
                    timed(model, prompts[0], 1, mode)
                warm = time.perf_counter() - t0
                dec, toks = 0.0, 0
                for p in prompts:
                    tn, _ = timed(model, p, N, mode)
                    t1, _ = timed(model, p, 1, mode)
                    dec += tn - t1
                    toks += N - 1
            row = {"prompt_ids": f, "context": len(prompts[0]), "mode": mode, "prompts": len(prompts),
                   "decode_tok_s": toks / dec, "decode_ms_per_token": 1e3 * dec / toks,
                   "warmup_s": warm}
            print(json.dumps(row), flush=True)
            res["runs"].append(row)
            with open(out, "w") as fh:
                json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
