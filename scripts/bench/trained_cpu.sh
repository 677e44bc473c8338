#!/usr/bin/env bash
# The trained demo drafters (assets/drafters/) against the baseline on this CPU, each run its own
# baseline and speculative pass over the same prompts: 10 held-out MT-Bench first turns and 10
# HumanEval prompts, 128 tokens; greedy (the default count, "auto": each round's count from
# measured acceptance and round times, and 2 drafts per round) and T = 0.7 (top-p 1, seeds
# 0..9, the default count). Writes one JSON per run under $OUT_DIR and the summary
# bench-results/smollm2-trained-cpu.json (W2-2 item 5: tau and tok/s against the baseline).
#   cargo build --release -p dspark-cli && scripts/bench/trained_cpu.sh [PROMPTS]
set -Eeuo pipefail
trap 'echo "trained_cpu.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-10}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-trained}
mkdir -p "$OUT_DIR"
runs=()
for set in mtbench humaneval; do
    for run in "dflash full 0" "dflash 2 0" "dspark full 0" "dspark 2 0" "dflash full 0.7" "dspark full 0.7"; do
        read -r mode cap temp <<<"$run"
        capargs=()
        [ "$cap" = full ] || capargs=(--max-draft "$cap")
        out="$OUT_DIR/$set-$mode-$cap-t$temp.json"
        echo "== $set $mode cap $cap T $temp"
        "$BIN" bench --model demo --mode "$mode" "${capargs[@]}" --prompt-set "$set" --prompts "$N" \
            --max-tokens 128 --temperature "$temp" --seed 0 --out "$out" | grep -E "^(baseline|dflash|dspark) "
        runs+=("$out")
    done
done
python3 - "${runs[@]}" <<'PY'
import json, sys
rows = []
for p in sys.argv[1:]:
    d = json.load(open(p))
    s = d["spec"]
    rows.append({
        "prompt_set": d["prompt_set"], "prompts": d["prompts"], "max_tokens": d["max_tokens"],
        "mode": s["mode"], "drafter": s["drafter"], "max_draft": s["max_draft"] if not isinstance(s["max_draft"], int) or s["max_draft"] < 1 << 20 else "block",
        "temperature": s.get("temperature", 0.0), "mean_tau": s["mean_tau"],
        "baseline_tok_s": d["baseline"]["tok_s"], "spec_tok_s": s["tok_s"],
        "ratio_vs_baseline": s["ratio_vs_baseline"], "verify_share": s["verify_share"],
        "draft_share": s["draft_share"], "greedy_identical": s.get("greedy_identical"),
        "host_read_gb_s": d["memory"]["measured_read_gb_s"],
    })
out = {"about": "Trained SmolLM2-135M drafters (assets/drafters/) vs the f32 baseline on the 2-core "
                "CPU, each row one `dspark bench` run (its own baseline on the same prompts); "
                "scripts/bench/trained_cpu.sh", "rows": rows}
with open("bench-results/smollm2-trained-cpu.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
for r in rows:
    print(f"{r['prompt_set']:9} {r['mode']:6} cap {r['max_draft']:>5} T {r['temperature']:.1f}: tau {r['mean_tau']:.2f} "
          f"x{r['ratio_vs_baseline']:.2f} ({r['spec_tok_s']:.1f} vs {r['baseline_tok_s']:.1f} tok/s) "
          f"identical {r['greedy_identical']}")
PY
