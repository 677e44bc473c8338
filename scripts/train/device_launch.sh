#!/usr/bin/env bash
# Call 5 of the device recipe (scripts/train/README.md, "Running on the device machine"):
# joins the GGUF parts the earlier calls left in /tmp/w with .devcarry/e/part_e, installs the
# gguf wheel, launches run_h200.sh detached and polls it once (up to $1 s). On a GPU under 100 GB (an H100) the
# training takes `--subset 28000` (or $SUBSET): the target's states of a whole data set do not
# fit beside a batch. GEN_BUDGET_S, GEN_ARGS, TRAIN_BUDGET_S and TRAIN_ARGS come from the environment
# (TRAIN_ARGS defaults to the ninth run's: the shipped DSpark trained further). A smoke_u16.npz
# in .devcarry/e makes run_h200.sh run its smoke check first. Run again on the same warm machine
# after a failed run, it relaunches with the new environment.
W=/tmp/w; G=$W/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f $W/part_d ]; then
    cat $W/part_a $W/part_b $W/part_c $W/part_d .devcarry/e/part_e > $G || exit 4
    rm -f $W/part_?
elif [ ! -f $G ]; then   # a relaunch on the same machine (after a failed run) reuses the joined GGUF
    echo machine lost; exit 3
fi
md5sum $G
cp .devcarry/e/{question.jsonl,HumanEval.jsonl.gz} $W/ || exit 4
[ ! -f .devcarry/e/smoke_u16.npz ] || cp .devcarry/e/smoke_u16.npz $W/ || exit 4
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/e/gguf-*.whl || exit 4
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
SUB=""; [ "$MEM" -lt 100000 ] && SUB="--subset ${SUBSET:-28000}"
echo "gpu memory $MEM MiB; subset: ${SUB:-none}"
export PYTHONPATH=/tmp/site GEN_BUDGET_S=${GEN_BUDGET_S:-240} TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-560} GEN_ARGS="${GEN_ARGS:---seed 20261202}"
DEFAULT="--which dspark --init ,$PWD/assets/drafters/smollm2-135m-dspark-b7 --dspark-layers 2 --dspark-intermediate 576 --lr 5e-4 --val-seqs 480 --val-every 250"
export TRAIN_ARGS="${TRAIN_ARGS:-$DEFAULT} $SUB"
echo "TRAIN_ARGS=$TRAIN_ARGS"
setsid nohup bash scripts/train/run_h200.sh $W > $W/log 2>&1 < /dev/null &
sleep 3
bash scripts/train/poll_h200.sh "${1:-540}"
