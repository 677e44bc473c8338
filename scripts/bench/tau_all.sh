#!/usr/bin/env bash
# Held-out acceptance of every demo drafter by dspark itself (`dspark bench --tau-only`: the
# speculative loop alone, stopping at the model's end-of-turn tokens, no baseline pass) over all
# 80 MT-Bench first turns and all 164 HumanEval prompts, 128 new tokens: the trained DFlash
# (block 16 and block 8) and DSpark (block 7) drafters at T = 0.7 (top-p 1, prompt i seeded
# SEED + i) with the full block verified every round (--max-draft 15 / 7 / 7), and the
# draft-model drafter (the demo GGUF kept quantized, adaptive 2-8 drafts) greedy and at T = 0.7;
# with CAPS="1 2 3", DFlash b8 at T = 0.7 with each of those draft counts too.
# A run whose JSON is already in $OUT_DIR is kept (set FRESH=1 to redo all). ONLY=PATTERN runs
# only the specs whose drafter path contains PATTERN (e.g. ONLY=dflash after a new DFlash); the
# summary then keeps the other rows of bench-results/smollm2-tau-all.json as they were. Greedy tau of the trained drafters over the same prompts comes from
# the training evaluator (bench-results/smollm2-trained-heldout-tau.json), checked against
# dspark round by round. Writes one JSON per run under $OUT_DIR and the summary
# bench-results/smollm2-tau-all.json (W2-2 item 5).
#   cargo build --release -p dspark-cli && scripts/bench/tau_all.sh [MAX_TOKENS]
set -Eeuo pipefail
trap 'echo "tau_all.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
MAX=${1:-128}
BIN=${DSPARK:-target/release/dspark}
OUT_DIR=${OUT_DIR:-target/bench-tau-all}
SEED=${SEED:-0}
D=assets/drafters
mkdir -p "$OUT_DIR"
runs=()
[ -z "${FRESH:-}" ] || rm -f "$OUT_DIR"/*.json
specs=("draft - - 0" "draft - - 0.7" "dflash $D/smollm2-135m-dflash-b8 7 0.7"
    "dspark $D/smollm2-135m-dspark-b7 7 0.7" "dflash $D/smollm2-135m-dflash-b16 15 0.7")
# CAPS="1 2 3": DFlash b8 at T = 0.7 with each of these fixed draft counts as well
for c in ${CAPS:-}; do specs+=("dflash $D/smollm2-135m-dflash-b8 $c 0.7 cap$c"); done
for run in "${specs[@]}"; do
    read -r mode drafter cap temp tag <<<"$run"
    [ -z "${ONLY:-}" ] || [[ "$drafter" == *"$ONLY"* ]] || continue
    dargs=()
    [ "$drafter" = - ] || dargs=(--drafter "$drafter" --max-draft "$cap")
    for set in mtbench humaneval; do
        n=80
        [ "$set" = humaneval ] && n=164
        out="$OUT_DIR/$set-$mode-$(basename "$drafter")${tag:+-$tag}-t$temp.json"
        runs+=("$out")
        [ -f "$out" ] && { echo "== $set $mode $drafter T $temp: kept $out"; continue; }
        echo "== $set $mode $drafter T $temp ($(date +%H:%M:%S))"
        "$BIN" bench --model demo --mode "$mode" "${dargs[@]}" --tau-only --prompt-set "$set" \
            --prompts "$n" --max-tokens "$MAX" --temperature "$temp" --seed "$SEED" --out "$out" \
            | grep -E "tau [0-9]"
    done
done
python3 - "${runs[@]}" <<'PY'
import json, os, sys
rows = []
for p in sys.argv[1:]:
    t = json.load(open(p))["tau_only"]
    rows.append({k: t[k] for k in ("prompt_set", "prompts", "max_tokens", "mode", "drafter", "max_draft",
                                   "temperature", "top_p", "first_seed", "mean_tau", "rounds",
                                   "tokens_in_rounds", "accept_length_counts")}
                | {"drafter_dir": os.path.basename(p).split("-", 2)[2].rsplit("-t", 1)[0]})
key = lambda r: (r["prompt_set"], r["mode"], r["drafter_dir"], r["temperature"], r["max_draft"])
if os.environ.get("ONLY") and os.path.isfile("bench-results/smollm2-tau-all.json"):
    fresh = {key(r): r for r in rows}
    old = json.load(open("bench-results/smollm2-tau-all.json"))["rows"]
    rows = [fresh.pop(key(r), r) for r in old] + list(fresh.values())
out = {"about": "Held-out acceptance (mean tokens per round: accepted drafts + 1) of the demo's drafters by "
                "dspark's own speculative loop (`dspark bench --tau-only`, f32 target on the CPU, generation "
                "stops at the model's end-of-turn tokens): all 80 MT-Bench first turns and 164 HumanEval "
                "prompts; scripts/bench/tau_all.sh", "rows": rows}
with open("bench-results/smollm2-tau-all.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
for r in rows:
    print(f"{r['prompt_set']:9} {r['mode']:6} {r['drafter_dir']:28} T {r['temperature']:.1f}: "
          f"tau {r['mean_tau']:.3f} over {r['rounds']} rounds")
PY
