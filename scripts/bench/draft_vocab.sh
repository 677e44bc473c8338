#!/usr/bin/env bash
# Draft vocabularies on the demo, side by side: the trained DSpark and DFlash drafters (default
# count) with their heads over the whole vocabulary (--draft-vocab 0) and over the K most
# frequent ids (draft_vocab.json), each against its own baseline of the same prompts, on both
# held-out sets, for each matmul arithmetic. The ways alternate within each rep, so a noisy host
# shows as spread rather than as a difference. Writes one JSON per run under $OUT_DIR and the
# summary $SUMMARY (default bench-results/draft-vocab-cpu.json) of every run in $OUT_DIR, so that
# a set can be run apart and join the others.
#   cargo build --release -p dspark-cli && scripts/bench/draft_vocab.sh [PROMPTS] [REPS]
#   env: SETS ("humaneval mtbench"), SIZES ("0 16384"), MATMULS ("f32 bf16"),
#        MODES ("dspark dflash")
set -Eeuo pipefail
trap 'echo "draft_vocab.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-10}
REPS=${2:-1}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-draft-vocab}
SUMMARY=${SUMMARY:-bench-results/draft-vocab-cpu.json}
SIZES=${SIZES:-0 16384}
MATMULS=${MATMULS:-f32 bf16}
MODES=${MODES:-dspark dflash}
SETS=${SETS:-humaneval mtbench}
mkdir -p "$OUT_DIR"
for rep in $(seq 1 "$REPS"); do
    for set in $SETS; do
        for mm in $MATMULS; do
            for mode in $MODES; do
                for k in $SIZES; do
                    out="$OUT_DIR/$set-$mode-$mm-k$k-r$rep.json"
                    echo "== rep $rep $set $mode matmul $mm draft vocabulary $k"
                    "$BIN" bench --model demo --matmul "$mm" --mode "$mode" --prompt-set "$set" \
                        --prompts "$N" --max-tokens 128 --draft-vocab "$k" --out "$out" |
                        grep -E "^(baseline|dflash|dspark) "
                done
            done
        done
    done
done
python3 - "$SUMMARY" "$OUT_DIR"/*-r*.json <<'PY'
import json, sys
summary, paths = sys.argv[1], sys.argv[2:]
rows = []
for p in paths:
    d = json.load(open(p))
    s = d["spec"]
    rows.append({"rep": int(p.rsplit("-r", 1)[1].split(".")[0]), "matmul": d["matmul"],
                 "prompt_set": d["prompt_set"], "prompts": d["prompts"], "mode": s["mode"],
                 "draft_vocab": s.get("draft_vocab"), "mean_tau": round(s["mean_tau"], 3),
                 "baseline_tok_s": round(d["baseline"]["tok_s"], 1), "spec_tok_s": round(s["tok_s"], 1),
                 "ratio_vs_own_baseline": round(s["ratio_vs_baseline"], 3),
                 "draft_share": round(s["draft_share"], 3), "verify_share": round(s["verify_share"], 3),
                 "greedy_identical": s.get("greedy_identical")})
out = {"about": "trained drafters on the demo with the whole vocabulary and with a draft vocabulary "
                "(--draft-vocab; draft_vocab.json ranks the ids), default count, each against its own "
                "baseline, alternated in one script (scripts/bench/draft_vocab.sh)",
       "runs": rows}
with open(summary, "w") as fh:
    json.dump(out, fh, indent=1)
    fh.write("\n")
for r in rows:
    print(f"rep {r['rep']} {r['prompt_set']:9} {r['mode']:6} {r['matmul']:4} vocab {str(r['draft_vocab'] or 'all'):>5}: "
          f"tau {r['mean_tau']:.2f}, {r['spec_tok_s']:.1f} vs {r['baseline_tok_s']:.1f} tok/s "
          f"(x{r['ratio_vs_own_baseline']:.2f}), draft {100 * r['draft_share']:.0f}% of the round, "
          f"greedy identical {r['greedy_identical']}/{r['prompts']}")
PY
