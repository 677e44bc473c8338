#!/usr/bin/env bash
# Greedy acceptance (tau, full block) of the demo's trained drafters under draft vocabularies,
# with each prompt's ids joining the ranked ones (the default) and without them
# (DSPARK_DRAFT_VOCAB_PROMPT=0), beside the whole vocabulary, on both held-out sets. Tau only
# (no timing), so the host's load does not matter. Writes one JSON per run under $OUT_DIR and
# the summary $SUMMARY (default bench-results/draft-vocab-prompt-tau.json).
#   cargo build --release -p dspark-cli && scripts/bench/draft_vocab_tau.sh [PROMPTS] [TOKENS]
#   env: SETS ("humaneval mtbench"), SIZES ("16384 8192"), MODES ("dspark dflash")
set -Eeuo pipefail
trap 'echo "draft_vocab_tau.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-10}
TOKENS=${2:-256}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-draft-vocab-tau}
SUMMARY=${SUMMARY:-bench-results/draft-vocab-prompt-tau.json}
SIZES=${SIZES:-16384 8192}
MODES=${MODES:-dspark dflash}
SETS=${SETS:-humaneval mtbench}
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/*.json
drafter() { [ "$1" = dspark ] && echo dspark-b7 || echo dflash-b16; }
for set in $SETS; do
    for mode in $MODES; do
        for way in "0 1" $(for k in $SIZES; do echo "$k:1 $k:0"; done); do
            k=${way%%[: ]*}
            p=${way##*[: ]}
            out="$OUT_DIR/$set-$mode-k$k-p$p.json"
            DSPARK_DRAFT_VOCAB_PROMPT=$p "$BIN" bench --model demo --mode "$mode" \
                --drafter "assets/drafters/smollm2-135m-$(drafter "$mode")" --tau-only \
                --max-draft 16 --draft-vocab "$k" --prompt-set "$set" --prompts "$N" \
                --max-tokens "$TOKENS" --out "$out" | grep -E "tau [0-9]"
        done
    done
done
python3 - "$SUMMARY" "$OUT_DIR"/*.json <<'PY'
import json, sys
summary, paths = sys.argv[1], sys.argv[2:]
rows = []
for p in sorted(paths):
    d = json.load(open(p))
    s = d["tau_only"]
    rows.append({"prompt_set": s["prompt_set"], "mode": s["mode"], "prompts": s["prompts"],
                 "max_tokens": s["max_tokens"], "draft_vocab": s.get("draft_vocab"),
                 "prompt_ids_join": s.get("draft_vocab_prompt_ids"), "mean_tau": round(s["mean_tau"], 3)})
out = {"about": "greedy tau at the full block of the demo's trained drafters: whole vocabulary "
                "(draft_vocab null), and draft vocabularies of the ranked ids with and without each "
                "prompt's ids (scripts/bench/draft_vocab_tau.sh)",
       "runs": rows}
with open(summary, "w") as fh:
    json.dump(out, fh, indent=1)
    fh.write("\n")
print(f"wrote {summary} ({len(rows)} runs)")
PY
