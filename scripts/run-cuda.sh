#!/usr/bin/env bash
# Runs on the GPU machine (no Rust there), from the repository root, what scripts/build-cuda.sh
# built and packed: the CUDA test binaries (golden_tiny, spec_greedy, spec_golden), `dspark
# generate`/`bench` on the tiny fixtures and, with --q8b, `dspark bench` on a random
# Qwen3-8B-shaped bf16 checkpoint written there by scripts/bench/make_qwen3_8b_random.py.
# Usage: scripts/run-cuda.sh [--q8b] [PACK]   (PACK: default target/cuda/carry/cuda-bins.tar.xz)
# Logs go to $OUT (the device tool's result folder) or to target/cuda/run.
set -uo pipefail
cd "$(dirname "$0")/.."
Q8B=0 PACK=target/cuda/carry/cuda-bins.tar.xz
for a in "$@"; do
  case $a in
    --q8b) Q8B=1 ;;
    *) PACK=$a ;;
  esac
done
LOG=${OUT:-$PWD/target/cuda/run}
mkdir -p "$LOG"
BIN=/tmp/dspark-cuda
unxz() { # xz, or Python's lzma where the image has no xz
  if command -v xz >/dev/null; then xz -dc "$1"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
  fi
}
mkdir -p $BIN && unxz "$PACK" | tar -xf - -C $BIN || exit 1
# cuBLAS, cuRAND, NVRTC and cudart from the PyTorch venv's nvidia-* wheels; libcuda from the driver
LIBS=$(python3 - <<'EOF'
import glob, os
import nvidia
dirs = set()
for p in nvidia.__path__:
    for so in glob.glob(os.path.join(p, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(so))
print(":".join(sorted(dirs)))
EOF
)
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DSPARK_TESTS_DIR=$PWD/tests
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  ldd $BIN/dspark | grep -i "cuda\|not found"
} 2>&1 | tee "$LOG/env.txt"
fails=0
for t in golden_tiny spec_greedy spec_golden; do
  echo "== $t" | tee -a "$LOG/tests.txt"
  ( time timeout 150 $BIN/$t --test-threads=1 --nocapture ) >>"$LOG/tests.txt" 2>&1 || fails=$((fails + 1))
  grep -E "^test result|FAILED|panicked|on candle cuda" "$LOG/tests.txt" | tail -20
done
echo "test binaries failing: $fails" | tee -a "$LOG/tests.txt"
T=tests/fixtures/spec/models
{
  $BIN/dspark generate --model $T/target --device cuda --dtype f32 --no-chat-template \
    --prompt "<t5> <t9> <t11>" --max-tokens 48
  $BIN/dspark generate --model $T/target --device cuda --dtype f32 --no-chat-template \
    --prompt "<t5> <t9> <t11>" --max-tokens 48 --mode dflash --drafter $T/dflash-accept
  python3 -c 'import json; print(json.dumps([[5, 9, 11, 13, 17, 19, 23, 29]] * 3))' >/tmp/ids.json
  $BIN/dspark bench --model $T/target --device cuda --dtype f32 --mode dflash \
    --drafter $T/dflash-accept --prompt-ids /tmp/ids.json --max-tokens 64 --mem-bandwidth-gbs 4130 \
    --out "$LOG/bench_tiny.json"
} >"$LOG/tiny.txt" 2>&1
tail -25 "$LOG/tiny.txt"
if [ $Q8B = 1 ]; then
  M=/tmp/q8b
  ( time timeout 150 python3 scripts/bench/make_qwen3_8b_random.py $M --seed 0 --context 1024 --prompts 2 ) 2>&1 |
    tee "$LOG/q8b.txt"
  ( time timeout 180 $BIN/dspark bench --model $M --device cuda --dtype bf16 --mode baseline \
    --prompt-ids $M/prompt_ids.json --max-tokens 128 --mem-bandwidth-gbs 4130 --out "$LOG/bench_q8b.json" ) >>"$LOG/q8b.txt" 2>&1
  tail -30 "$LOG/q8b.txt"
fi
