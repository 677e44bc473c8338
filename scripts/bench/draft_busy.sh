#!/usr/bin/env bash
# Demo draft mode vs its baseline, idle and then while another 2-thread process keeps the cores
# busy (two shell busy-loops), in one script: W2-1's "speculation that pays, also on a busy
# machine". Writes bench-results/smollm2-draft-idle.json and smollm2-draft-busy.json (with
# MAX_DRAFT `auto`: smollm2-draft-auto-{idle,busy}.json, the default adaptive count).
#   cargo build --release -p dspark-cli && scripts/bench/draft_busy.sh [PROMPTS] [MAX_DRAFT|auto]
set -Eeuo pipefail
trap 'echo "draft_busy.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
N=${1:-10}
K=${2:-4}
BIN=${DSPARK:-target/release/dspark}
if [ "$K" = auto ]; then
    KARG=() NAME=smollm2-draft-auto
else
    KARG=(--max-draft "$K") NAME=smollm2-draft
fi
"$BIN" bench --model demo --mode draft "${KARG[@]}" --prompts "$N" --max-tokens 128 \
    --out "bench-results/$NAME-idle.json"
hogs=()
for _ in 1 2; do
    sh -c 'while :; do :; done' &
    hogs+=($!)
done
cleanup() { kill "${hogs[@]}" 2>/dev/null || true; }
trap cleanup EXIT
sleep 1
"$BIN" bench --model demo --mode draft "${KARG[@]}" --prompts "$N" --max-tokens 128 \
    --out "bench-results/$NAME-busy.json"
