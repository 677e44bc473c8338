#!/usr/bin/env bash
# Two dspark binaries (or two drafters) side by side on the demo's trained drafters: for each
# held-out set, mode and matmul arithmetic, side A then side B (each spec run against its own
# baseline of the same prompts), REPS times, so that a noisy host shows as spread rather than as
# a difference. Writes one JSON per run under $OUT_DIR and the summary $SUMMARY of every run there.
#   scripts/bench/cpu_ab.sh BIN_A LABEL_A BIN_B LABEL_B [PROMPTS] [REPS]
#   env: SETS ("humaneval mtbench"), MODES ("dspark dflash"), MATMULS ("bf16 f32"),
#        OUT_DIR (target/bench-cpu-ab), SUMMARY (bench-results/cpu-ab.json), ABOUT (a sentence),
#        DRAFTERS ("DIR_A DIR_B": each side's --drafter, for two drafters on one binary)
set -Eeuo pipefail
trap 'echo "cpu_ab.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
[ $# -ge 4 ] || { echo "usage: $0 BIN_A LABEL_A BIN_B LABEL_B [PROMPTS] [REPS]" >&2; exit 2; }
BINS=("$1" "$3")
LABELS=("$2" "$4")
N=${5:-10}
REPS=${6:-2}
OUT_DIR=${OUT_DIR:-target/bench-cpu-ab}
SUMMARY=${SUMMARY:-bench-results/cpu-ab.json}
SETS=${SETS:-humaneval mtbench}
MODES=${MODES:-dspark dflash}
MATMULS=${MATMULS:-bf16 f32}
read -r -a DRAFTER_DIRS <<<"${DRAFTERS:-}"
mkdir -p "$OUT_DIR"
for rep in $(seq 1 "$REPS"); do
    for set in $SETS; do
        for mm in $MATMULS; do
            for mode in $MODES; do
                for i in 0 1; do
                    out="$OUT_DIR/${LABELS[$i]}-$set-$mode-$mm-r$rep.json"
                    echo "== rep $rep $set $mode matmul $mm: ${LABELS[$i]}"
                    drafter=()
                    [ -z "${DRAFTER_DIRS[$i]:-}" ] || drafter=(--drafter "${DRAFTER_DIRS[$i]}")
                    "${BINS[$i]}" bench --model demo --matmul "$mm" --mode "$mode" "${drafter[@]}" \
                        --prompt-set "$set" --prompts "$N" --max-tokens 128 --out "$out" |
                        grep -E "^(baseline|dflash|dspark) "
                done
            done
        done
    done
done
python3 - "$SUMMARY" "${ABOUT:-two binaries side by side (scripts/bench/cpu_ab.sh)}" "$OUT_DIR"/*-r*.json <<'PY'
import json, os, sys
summary, about, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for p in sorted(paths):
    d = json.load(open(p))
    s = d["spec"]
    rows.append({"binary": os.path.basename(p).split("-")[0],
                 "rep": int(p.rsplit("-r", 1)[1].split(".")[0]), "matmul": d["matmul"],
                 "prompt_set": d["prompt_set"], "prompts": d["prompts"], "mode": s["mode"],
                 "draft_vocab": s.get("draft_vocab"), "mean_tau": round(s["mean_tau"], 3),
                 "baseline_tok_s": round(d["baseline"]["tok_s"], 1), "spec_tok_s": round(s["tok_s"], 1),
                 "ratio_vs_own_baseline": round(s["ratio_vs_baseline"], 3),
                 "draft_share": round(s["draft_share"], 3), "verify_share": round(s["verify_share"], 3),
                 "rounds_by_draft_count": s.get("rounds_by_draft_count"),
                 "greedy_identical": s.get("greedy_identical")})
with open(summary, "w") as fh:
    json.dump({"about": about, "runs": rows}, fh, indent=1)
    fh.write("\n")
key = lambda r: (r["prompt_set"], r["mode"], r["matmul"], r["binary"])
groups = {}
for r in rows:
    groups.setdefault(key(r), []).append(r)
for k in sorted(groups):
    rs = groups[k]
    ratios = ", ".join(f"x{r['ratio_vs_own_baseline']:.2f}" for r in rs)
    taus = ", ".join(f"{r['mean_tau']:.2f}" for r in rs)
    same = sum(r["greedy_identical"] or 0 for r in rs)
    print(f"{k[0]:9} {k[1]:6} {k[2]:4} {k[3]:>8}: {ratios} (tau {taus}); greedy identical "
          f"{same}/{sum(r['prompts'] for r in rs)}")
PY
