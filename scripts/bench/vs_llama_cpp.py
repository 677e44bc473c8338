#!/usr/bin/env python3
"""dspark vs llama.cpp (llama-cpp-python built from its sdist) on the same GGUF files, the same
prompt ids and the same number of new tokens, interleaved in one run; HF transformers f32
beside them when a Python with torch + transformers is given.

Rows: F32 (a dequantized copy of the demo GGUF), Q8_0 (a requantized copy), Q4_1 (the demo
file itself). dspark runs F32 dequantized and the quantized rows with --keep-quantized.
Per repetition and row: llama.cpp prefill + greedy decode, then `dspark bench --prompt-ids`
on the same ids. Prints decode and prefill ratios (median and spread over the repetitions)
and writes JSON (default bench-results/vs-llama-cpp.json).

    scripts/bench/bench-venv.sh                      # once: builds llama-cpp-python
    cargo build --release -p dspark-cli
    .venv-bench/bin/python scripts/bench/vs_llama_cpp.py --reps 5 --prompts 3 --max-tokens 128

Options: --dspark BIN (default target/release/dspark), --hf-python PY (adds the HF row),
--rows f32,q8_0,q4_1, --out FILE, --threads N (llama.cpp threads; default: all cores).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("DSPARK_CACHE", pathlib.Path.home() / ".cache" / "dspark"))
DEMO = CACHE / "artefacts" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def derived_gguf(kind):
    """F32 / Q8_0 copies of the demo GGUF, made once with llama.cpp's own quantizer."""
    import llama_cpp

    if kind == "q4_1":
        return DEMO
    out = CACHE / "bench" / f"SmolLM2-135M-Instruct.{kind.upper()}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    ftype = {"f32": llama_cpp.LLAMA_FTYPE_ALL_F32, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[kind]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    tmp = out.with_suffix(".part")
    rc = llama_cpp.llama_model_quantize(str(DEMO).encode(), str(tmp).encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize({kind}) failed with {rc}")
    tmp.rename(out)
    log(f"made {out} ({out.stat().st_size / 1e6:.0f} MB)")
    return out


def prompt_ids(dspark, n):
    """Chat-templated MT-Bench first turns tokenized by dspark (its bench records the ids)."""
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d) / "ids.json"
        subprocess.run([dspark, "bench", "--model", str(DEMO), "--prompts", str(n), "--max-tokens", "1",
                        "--out", str(out), "--emit-prompt-ids"], check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())["prompt_ids"]


def run_llama(path, ids, max_tokens, threads):
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=4096, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False, logits_all=False)
    # warm-up
    llm.reset()
    llm.eval(ids[0][:8])
    prefill_s = decode_s = 0.0
    prompt_tokens = new_tokens = 0
    outs = []
    n_vocab = llm.n_vocab()

    def last_argmax():
        # the last position's logits straight from the context (llama-cpp-python keeps
        # `scores` only with logits_all, which would also compute the head for every prompt row)
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    for p in ids:
        llm.reset()
        t = time.perf_counter()
        llm.eval(p)
        prefill_s += time.perf_counter() - t
        prompt_tokens += len(p)
        toks = []
        t = time.perf_counter()
        tok = last_argmax()
        for _ in range(max_tokens - 1):
            toks.append(tok)
            llm.eval([tok])
            tok = last_argmax()
        toks.append(tok)
        decode_s += time.perf_counter() - t
        new_tokens += max_tokens - 1
        outs.append(toks)
    del llm
    return {"prefill_tok_s": prompt_tokens / prefill_s, "decode_tok_s": new_tokens / decode_s, "ids": outs}


def run_dspark(dspark, path, quantized, ids_file, max_tokens):
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d) / "r.json"
        cmd = [dspark, "bench", "--model", str(path), "--prompt-ids", ids_file, "--max-tokens", str(max_tokens),
               "--baseline-only", "--out", str(out)]
        if quantized:
            cmd.append("--keep-quantized")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = json.loads(out.read_text())["baseline"]
        return {"prefill_tok_s": r["prefill_tok_s"], "decode_tok_s": r["decode_tok_s"], "ids": r["ids"]}


def spread(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dspark", default=str(ROOT / "target" / "release" / "dspark"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rows", default="f32,q8_0,q4_1")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hf-python")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "vs-llama-cpp.json"))
    a = ap.parse_args()
    if not DEMO.exists():
        sys.exit(f"{DEMO} is missing: run scripts/fetch-artefacts.sh")
    rows = a.rows.split(",")
    files = {r: derived_gguf(r) for r in rows}
    ids = prompt_ids(a.dspark, a.prompts)
    ids_file = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(ids, ids_file)
    ids_file.close()
    log(f"{len(ids)} prompts ({sum(map(len, ids))} prompt tokens), {a.max_tokens} new tokens, {a.reps} reps")
    res = {r: {"llama_cpp": [], "dspark": []} for r in rows}
    agree = {r: [] for r in rows}
    for rep in range(a.reps):
        for r in rows:
            ll = run_llama(files[r], ids, a.max_tokens, a.threads)
            ds = run_dspark(a.dspark, files[r], r != "f32", ids_file.name, a.max_tokens)
            res[r]["llama_cpp"].append(ll)
            res[r]["dspark"].append(ds)
            same = sum(x == y for x, y in zip(ll["ids"], ds["ids"]))
            agree[r].append(same)
            log(f"rep {rep} {r:5}: decode llama.cpp {ll['decode_tok_s']:6.1f} dspark {ds['decode_tok_s']:6.1f} tok/s"
                f" | prefill {ll['prefill_tok_s']:6.0f} / {ds['prefill_tok_s']:6.0f} | same tokens {same}/{len(ids)}")
    summary = {}
    print(f"{'row':6} {'llama.cpp dec':>14} {'dspark dec':>11} {'ratio (min-max)':>20} {'prefill ratio (min-max)':>26}")
    for r in rows:
        dl = [x["decode_tok_s"] for x in res[r]["llama_cpp"]]
        dd = [x["decode_tok_s"] for x in res[r]["dspark"]]
        pl = [x["prefill_tok_s"] for x in res[r]["llama_cpp"]]
        pd = [x["prefill_tok_s"] for x in res[r]["dspark"]]
        dr = [d / l for d, l in zip(dd, dl)]
        pr = [d / l for d, l in zip(pd, pl)]
        summary[r] = {"file": str(files[r]), "llama_cpp_decode_tok_s": spread(dl), "dspark_decode_tok_s": spread(dd),
                      "decode_ratio": spread(dr), "llama_cpp_prefill_tok_s": spread(pl),
                      "dspark_prefill_tok_s": spread(pd), "prefill_ratio": spread(pr),
                      "same_greedy_tokens_per_rep": agree[r]}
        print(f"{r:6} {statistics.median(dl):14.1f} {statistics.median(dd):11.1f} "
              f"{statistics.median(dr):8.2f}x ({min(dr):.2f}-{max(dr):.2f}) {statistics.median(pr):12.2f}x ({min(pr):.2f}-{max(pr):.2f})")
    out = {"prompts": len(ids), "prompt_tokens": sum(map(len, ids)), "max_tokens": a.max_tokens, "reps": a.reps,
           "threads": a.threads, "cpu_count": os.cpu_count(), "rows": summary}
    if a.hf_python:
        script = ROOT / "scripts" / "bench" / "hf_decode.py"
        arg = json.dumps({"model": str(files.get("f32", DEMO)), "prompts": ids, "max_tokens": a.max_tokens})
        hf = json.loads(subprocess.run([a.hf_python, str(script), arg], check=True, capture_output=True).stdout)
        out["hf_transformers_f32_tok_s"] = hf["tok_s"]
        print(f"hf transformers f32: {hf['tok_s']:.1f} tok/s (end to end)")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
