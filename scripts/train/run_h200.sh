#!/usr/bin/env bash
# The whole drafter pipeline on the GPU machine (no network there): data generation (skipped
# when $W/data_u16.npz, an earlier run's data, is there; gen_data.py writes it), joint DFlash +
# DSpark training on precomputed target states, held-out evaluation, loss plot. Meant to run detached (setsid) so
# that it outlives one command of the device tool; progress goes to $W/log, stage markers to
# $W/{SMOKE_DONE,SMOKE_FAIL,GEN_DONE,DONE,FAIL}.
#
#   scripts/train/run_h200.sh W     W holds SmolLM2-135M-Instruct.Q4_1.gguf, question.jsonl,
#                                   HumanEval.jsonl.gz (and data_u16.npz or smoke_u16.npz)
#
# Sizes come from the environment (defaults: the planned run on the second data set; the shipped
# drafters' run used GEN_BUDGET_S=270 TRAIN_BUDGET_S=420 and the first gen_data.py): GEN_BUDGET_S,
# GEN_ARGS, TRAIN_BUDGET_S, TRAIN_BATCH, TRAIN_ANCHORS, TRAIN_ARGS, EVAL_LIMIT, DEVICE; EVAL_SHIPPED=1
# also evaluates the drafters in assets/drafters on the same greedy runs. GEN_ONLY=1 stops after
# the data (for a later session to train on); $W/data_more_*.npz are trained on beside data_u16.npz.
set -uo pipefail
W="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CODE="$W/code"
rm -rf "$CODE" && cp -r "$HERE" "$CODE"   # the running copy does not change under us
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
ART="${ART:-$W}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# the tenth run's out-of-memory errors (gen_data.py, train.py's validation) left 4.75 GB of the
# 80 GB card reserved but unallocated: growable segments let the allocator use that room
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
stamp() { echo "[$(date +%H:%M:%S) +$((SECONDS))s] $*"; }
keep_data() { mv "$W/gen_u16.npz" "$DATA" && mv "$W/gen_u16.json" "$W/data_u16.json"; }   # gen_data.py's output as the run's data
drafters_in() {   # evaluate.py's --drafter arguments for the drafters a run saved (TRAIN_ARGS may hold --which)
    EVAL_DRAFTERS=()
    [ -d "$1/dflash" ] && EVAL_DRAFTERS+=(--drafter "dflash16=$1/dflash" --drafter "dflash8=$1/dflash:8")
    [ -d "$1/dspark" ] && EVAL_DRAFTERS+=(--drafter "dspark=$1/dspark")
    return 0
}

rm -f "$W"/{SMOKE_DONE,SMOKE_FAIL,GEN_DONE,TRAIN_DONE,DONE,FAIL}   # an earlier launch's markers
stamp "start"
DATA="$W/data_u16.npz"
if [ -f "$DATA" ]; then
    stamp "data: reusing $DATA"
else
    "$PY" "$CODE/gen_data.py" --gguf-dir "$W" --out "$W/gen_u16.npz" --device "$DEVICE" \
        --exclude-mtbench "$ART/question.jsonl" --exclude-humaneval "$ART/HumanEval.jsonl.gz" \
        --budget-s "${GEN_BUDGET_S:-300}" ${GEN_ARGS:-} > "$W/gen.log" 2>&1 &
    GEN=$!
    if [ -f "$W/smoke_u16.npz" ]; then
        stamp "smoke: full-size batch on the small data set, then a 2-prompt evaluation"
        if "$PY" "$CODE/train.py" --gguf-dir "$W" --data "$W/smoke_u16.npz" --out "$W/smoke" --device "$DEVICE" \
                --max-steps 3 --log-every 1 --batch "${TRAIN_BATCH:-48}" --anchors "${TRAIN_ANCHORS:-64}" \
                ${TRAIN_ARGS:-} > "$W/smoke.log" 2>&1 \
            && drafters_in "$W/smoke" \
            && "$PY" "$CODE/evaluate.py" --gguf-dir "$W" --mtbench "$ART/question.jsonl" \
                --humaneval "$ART/HumanEval.jsonl.gz" "${EVAL_DRAFTERS[@]}" --limit 2 \
                --out "$W/smoke/eval.json" --device "$DEVICE" >> "$W/smoke.log" 2>&1; then
            touch "$W/SMOKE_DONE"; stamp "smoke ok"
        else
            touch "$W/SMOKE_FAIL"; stamp "smoke FAILED (see smoke.log); data generation continues"
            wait $GEN; RC=$?; stamp "data generation exit $RC"
            # keep the data so that a relaunch with mended TRAIN_ARGS trains at once
            [ $RC -eq 0 ] && keep_data
            touch "$W/GEN_DONE"
            exit 1
        fi
    fi
    if ! wait $GEN; then
        stamp "data generation FAILED"; tail -30 "$W/gen.log"; touch "$W/FAIL"; exit 1
    fi
    keep_data
    stamp "data: $(grep '^data:' "$W/gen.log" | cut -c1-400)"
fi
touch "$W/GEN_DONE"
for more in "$W"/data_more_*.npz; do   # earlier runs' data sets (other seeds), trained on beside it
    [ -f "$more" ] && DATA="$DATA,$more" && stamp "data: also $more"
done
if [ -n "${GEN_ONLY:-}" ]; then   # a short lease: generate only; poll_h200.sh brings data_u16.npz back
    stamp "done (GEN_ONLY)"; touch "$W/DONE"; exit 0
fi

stamp "train"
if ! "$PY" "$CODE/train.py" --gguf-dir "$W" --data "$DATA" --out "$W/ckpt" --device "$DEVICE" \
        --budget-s "${TRAIN_BUDGET_S:-420}" --batch "${TRAIN_BATCH:-48}" --anchors "${TRAIN_ANCHORS:-64}" \
        ${TRAIN_ARGS:-} > "$W/train.log" 2>&1; then
    stamp "train FAILED"; tail -30 "$W/train.log"; touch "$W/FAIL"; exit 1
fi
stamp "trained: $(tail -1 "$W/train.log" | cut -c1-300)"
touch "$W/TRAIN_DONE"

stamp "evaluate"
drafters_in "$W/ckpt"
if [ -n "${EVAL_SHIPPED:-}" ]; then   # the drafters in the tree, side by side on the same greedy runs
    A="$HERE/../../assets/drafters"
    EVAL_DRAFTERS+=(--drafter "shipped_dflash16=$A/smollm2-135m-dflash-b16" \
        --drafter "shipped_dflash8=$A/smollm2-135m-dflash-b16:8" --drafter "shipped_dspark=$A/smollm2-135m-dspark-b7")
fi
if ! "$PY" "$CODE/evaluate.py" --gguf-dir "$W" --mtbench "$ART/question.jsonl" \
        --humaneval "$ART/HumanEval.jsonl.gz" "${EVAL_DRAFTERS[@]}" \
        --limit "${EVAL_LIMIT:-0}" --out "$W/ckpt/eval.json" --device "$DEVICE" > "$W/eval.log" 2>&1; then
    stamp "evaluate FAILED"; tail -30 "$W/eval.log"; touch "$W/FAIL"; exit 1
fi
grep "tau(" "$W/eval.log"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
"$PY" "$CODE/plot.py" "$W/ckpt/train_log.json" "$W/ckpt/loss.png" "one ${GPU_NAME:-GPU}" || stamp "plot failed"
stamp "done"
touch "$W/DONE"
