#!/usr/bin/env bash
# `--matmul bf16` (AMX-BF16 tiles) against the default f32 arithmetic on the demo, side by side:
# the cost of verifying 4 / 8 / 16 tokens against a decode step, and the trained drafters
# (DSpark b7, DFlash with the demo's default drafter; default count) against each mode's own
# baseline and against the f32 baseline of the same prompts. Both ways run alternately, REPS
# times, so that a noisy host shows as spread rather than as a difference. Writes one JSON per
# run under $OUT_DIR and the summary bench-results/bf16-matmul-cpu.json.
#   cargo build --release -p dspark-cli && scripts/bench/bf16_matmul.sh [PROMPTS] [REPS]
set -Eeuo pipefail
trap 'echo "bf16_matmul.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-10}
REPS=${2:-2}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-bf16}
SUMMARY=${SUMMARY:-bench-results/bf16-matmul-cpu.json}
mkdir -p "$OUT_DIR"
runs=()
for rep in $(seq 1 "$REPS"); do
    for mm in f32 bf16; do
        out="$OUT_DIR/verify-$mm-r$rep.json"
        echo "== rep $rep matmul $mm: verify cost"
        "$BIN" bench --model demo --matmul "$mm" --prompts 1 --max-tokens 32 \
            --verify-cost 1,4,8,16 --out "$out" | grep -E "^(baseline|verify) "
        runs+=("$out")
    done
    for set in humaneval mtbench; do
        for mode in dspark dflash; do
            for mm in f32 bf16; do
                out="$OUT_DIR/$set-$mode-$mm-r$rep.json"
                echo "== rep $rep $set $mode matmul $mm"
                "$BIN" bench --model demo --matmul "$mm" --mode "$mode" --prompt-set "$set" \
                    --prompts "$N" --max-tokens 128 --out "$out" | grep -E "^(baseline|dflash|dspark) "
                runs+=("$out")
            done
        done
    done
done
python3 - "$SUMMARY" "${runs[@]}" <<'PY'
import json, sys
summary, paths = sys.argv[1], sys.argv[2:]
verify, spec = [], []
for p in paths:
    d = json.load(open(p))
    rep = int(p.rsplit("-r", 1)[1].split(".")[0])
    mm = d["matmul"]
    if "verify_cost" in d:
        verify.append({"rep": rep, "matmul": mm, "decode_tok_s": d["baseline"]["decode_tok_s"],
                       "prefill_tok_s": d["baseline"]["prefill_tok_s"],
                       "x_decode_step": {t: round(r["ratio_vs_decode_step"], 3)
                                         for t, r in d["verify_cost"]["median_ms"].items()},
                       "ms": {t: round(r["ms"], 3) for t, r in d["verify_cost"]["median_ms"].items()}})
        continue
    s = d["spec"]
    spec.append({"rep": rep, "matmul": mm, "prompt_set": d["prompt_set"], "prompts": d["prompts"],
                 "mode": s["mode"], "drafter": s["drafter"], "mean_tau": round(s["mean_tau"], 3),
                 "baseline_tok_s": round(d["baseline"]["tok_s"], 1), "spec_tok_s": round(s["tok_s"], 1),
                 "ratio_vs_own_baseline": round(s["ratio_vs_baseline"], 3),
                 "baseline_cpu_ms_per_token": round(d["baseline"]["cpu_ms_per_token"], 2),
                 "spec_cpu_ms_per_token": round(s["cpu_ms_per_token"], 2),
                 "greedy_identical": s.get("greedy_identical")})
# each bf16 run against the f32 baseline of the same prompts, mode and rep
for r in spec:
    f = [x for x in spec if x["matmul"] == "f32" and x["rep"] == r["rep"]
         and x["prompt_set"] == r["prompt_set"] and x["mode"] == r["mode"]]
    r["ratio_vs_f32_baseline"] = round(r["spec_tok_s"] / f[0]["baseline_tok_s"], 3) if f else None
out = {"about": "--matmul bf16 (AMX-BF16 tiles; the demo's Q4_1 blocks rebuilt into them for each "
                "call) against the default f32 arithmetic (exact packed), alternated in one script "
                "(scripts/bench/bf16_matmul.sh): verify cost per block size, and the trained drafters "
                "(default count) against each mode's own baseline and against the f32 baseline",
       "verify": verify, "spec": spec}
with open(summary, "w") as fh:
    json.dump(out, fh, indent=1)
    fh.write("\n")
for v in verify:
    print(f"rep {v['rep']} {v['matmul']:4}: decode {v['decode_tok_s']:.1f} tok/s, prefill {v['prefill_tok_s']:.0f}; "
          f"verify x {v['x_decode_step']}")
for r in spec:
    print(f"rep {r['rep']} {r['prompt_set']:9} {r['mode']:6} {r['matmul']:4}: tau {r['mean_tau']:.2f} "
          f"{r['spec_tok_s']:.1f} vs {r['baseline_tok_s']:.1f} tok/s (x{r['ratio_vs_own_baseline']:.2f}; "
          f"x{r['ratio_vs_f32_baseline']:.2f} vs f32 baseline) identical {r['greedy_identical']}")
PY
