#!/usr/bin/env bash
# One poll of the detached pipeline (run_h200.sh) on the device machine: waits up to $1 seconds
# (default 560) for $W/DONE or $W/FAIL, prints the progress, and copies what a run leaves into
# $OUT (both model.safetensors; a tar of configs, train_log.json, eval.json, loss.png and logs;
# at the end, data_u16.npz).
# Exits 3 at once on a fresh machine (no $W/log: the earlier one was handed back), so that a
# lost run does not cost a whole wait.
W="${W:-/tmp/w}"
[ -f "$W/log" ] || { echo "machine lost"; exit 3; }
end=$((SECONDS + ${1:-560}))
while [ ! -f "$W/DONE" ] && [ ! -f "$W/FAIL" ] && [ $SECONDS -lt $end ]; do sleep 5; done
ls "$W"
echo "== log"; cat "$W/log"
for f in smoke.log gen.log train.log eval.log; do
    [ -f "$W/$f" ] && { echo "== $f"; tail -n 15 "$W/$f"; }
done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
[ -n "${OUT:-}" ] || exit 0
for d in dflash dspark; do
    [ -f "$W/ckpt/$d/model.safetensors" ] && cp "$W/ckpt/$d/model.safetensors" "$OUT/$d.safetensors"
done
(cd "$W" && tar czf "$OUT/run.tgz" --ignore-failed-read log ./*.log data_u16.json \
    ckpt/dflash/config.json ckpt/dspark/config.json ckpt/train_log.json ckpt/eval.json ckpt/loss.png \
    smoke/eval.json 2>/dev/null)
[ -f "$W/DONE" ] || [ -f "$W/FAIL" ] || exit 0
# the data set, for later sessions to train on without generating (under the 16 MiB a file)
[ -f "$W/data_u16.npz" ] && [ "$(stat -c %s "$W/data_u16.npz")" -lt 16000000 ] && cp "$W/data_u16.npz" "$OUT/"
[ -f "$W/DONE" ]
