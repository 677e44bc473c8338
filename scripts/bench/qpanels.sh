#!/usr/bin/env bash
# The panel kernels (backend/cpu/qpanel*.rs) against the pair layout they replace, side by side
# in one script on this CPU: the demo kept quantized (Q4_1 layers, Q8_0 head) decoding alone
# with the pair layout (DSPARK_QPANELS=0), the panels on AVX-512 VNNI only (DSPARK_AMX=0) and
# the panels with AMX tiles for 8-row calls (the default where the CPU has them), alternated
# REPS times; then demo draft mode (exact target, drafter kept quantized), pairs against
# panels; then DFlash b8 and DSpark b7 on the kept-quantized demo (default draft count).
# Writes one JSON per run under $OUT_DIR and the summary bench-results/qpanels-cpu.json.
#   cargo build --release -p dspark-cli && scripts/bench/qpanels.sh [PROMPTS] [REPS]
set -Eeuo pipefail
trap 'echo "qpanels.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-5}
REPS=${2:-2}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-qpanels}
mkdir -p "$OUT_DIR"
runs=()
run() { # name env... -- bench args...
    local name=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local out="$OUT_DIR/$name.json"
    echo "== $name (${envs[*]:-default})"
    env "${envs[@]}" "$BIN" bench --model demo "$@" --out "$out" | grep -E "^(baseline|dflash|dspark|draft) "
    runs+=("$name=$out")
}
for rep in $(seq 1 "$REPS"); do
    run "kept-pairs-$rep" DSPARK_QPANELS=0 -- --keep-quantized --baseline-only --prompts "$N" --max-tokens 128
    run "kept-panels-vnni-$rep" DSPARK_AMX=0 -- --keep-quantized --baseline-only --prompts "$N" --max-tokens 128
    run "kept-panels-amx-$rep" -- --keep-quantized --baseline-only --prompts "$N" --max-tokens 128
done
run draft-pairs DSPARK_QPANELS=0 -- --mode draft --prompts "$N" --max-tokens 128
run draft-panels -- --mode draft --prompts "$N" --max-tokens 128
for set in mtbench humaneval; do
    for mode in dflash dspark; do
        run "kept-$mode-$set" -- --keep-quantized --mode "$mode" --prompt-set "$set" --prompts "$N" --max-tokens 128
    done
done
python3 - "${runs[@]}" <<'PY'
import json, sys
rows = []
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    d = json.load(open(path))
    b, s = d["baseline"], d.get("spec")
    row = {"run": name, "prompt_set": d["prompt_set"], "prompts": d["prompts"],
           "keep_quantized": d["keep_quantized"], "baseline_tok_s": b["tok_s"],
           "baseline_decode_tok_s": b["decode_tok_s"], "prefill_tok_s": b["prefill_tok_s"]}
    if s:
        row.update({"mode": s["mode"], "mean_tau": s["mean_tau"], "spec_tok_s": s["tok_s"],
                    "ratio_vs_baseline": s["ratio_vs_baseline"],
                    "greedy_identical": s.get("greedy_identical")})
    rows.append(row)
out = {"about": "Panel kernels (backend/cpu/qpanel*.rs) vs the pair layout (DSPARK_QPANELS=0), "
                "VNNI only (DSPARK_AMX=0) vs with AMX tiles; demo SmolLM2-135M, 2-core CPU; "
                "scripts/bench/qpanels.sh", "rows": rows}
with open("bench-results/qpanels-cpu.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
for r in rows:
    extra = ""
    if "mode" in r:
        extra = f" | {r['mode']} tau {r['mean_tau']:.2f} x{r['ratio_vs_baseline']:.2f} ({r['spec_tok_s']:.1f} tok/s) identical {r['greedy_identical']}"
    print(f"{r['run']:24} decode {r['baseline_decode_tok_s']:6.1f} prefill {r['prefill_tok_s']:6.0f} tok/s{extra}")
PY
