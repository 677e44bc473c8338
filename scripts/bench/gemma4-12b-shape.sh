#!/usr/bin/env bash
# Gemma 4 12B at its real shape (random weights) on the GPU machine, from the repository root:
# transformers builds the checkpoint and its f32 greedy reference (gemma4_12b_shape.py), then
# `dspark` (built by scripts/build-cuda.sh, carried packed) loads the same directory on CUDA in
# f32 and bf16 and generates from the same prompt ids: a short prompt and one of 1,100 tokens,
# so the 1,024-position sliding windows wrap. In stages, each within one device call:
#   gemma4-12b-shape.sh make DIR TOKENIZER_XZ   checkpoint (24 GB of bf16 shards) + prompts
#   gemma4-12b-shape.sh reference DIR           transformers f32 greedy -> DIR/ref.json
#   gemma4-12b-shape.sh dspark DIR [PACK]       dspark f32 + bf16 -> gemma4-12b-shape.json
# Results and logs go to $OUT (the device tool's result folder) or target/cuda/run.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE=$1 DIR=$2
LOG=${OUT:-$PWD/target/cuda/run}
mkdir -p "$LOG" "$DIR"
NEW=8
. scripts/cuda-run-env.sh
case $STAGE in
  make)
    unxz "$3" >/tmp/gemma-tokenizer.json || exit 1
    python3 - "$DIR/prompts.json" <<'EOF'
import json, random, sys
r = random.Random(20261203)
short = [2] + [r.randrange(3, 262144) for _ in range(11)]
long = [2] + [r.randrange(3, 262144) for _ in range(1099)]
json.dump([short, long], open(sys.argv[1], "w"))
EOF
    ( time timeout 560 python3 scripts/bench/gemma4_12b_shape.py make "$DIR" \
        --tokenizer /tmp/gemma-tokenizer.json ) 2>&1 | grep -v Warning | tail -8 | tee "$LOG/make.txt"
    df -h "$DIR" | tail -1 | tee -a "$LOG/make.txt"
    ;;
  reference)
    [ -f "$DIR/tokenizer.json" ] || { echo "no checkpoint in $DIR (machine lost?)"; exit 3; }
    ( time timeout 560 python3 scripts/bench/gemma4_12b_shape.py reference "$DIR" \
        --prompts "$DIR/prompts.json" --new $NEW --out "$DIR/ref.json" ) 2>&1 | grep -v Warning \
        | tail -8 | tee "$LOG/reference.txt"
    cp "$DIR/ref.json" "$LOG/" 2>/dev/null
    ;;
  dspark)
    [ -f "$DIR/ref.json" ] || { echo "no reference in $DIR (machine lost?)"; exit 3; }
    PACK=${3:-target/cuda/carry/cuda-bins.tar.xz}
    BIN=/tmp/dspark-cuda
    mkdir -p $BIN && unxz "$PACK" | tar -xf - -C $BIN || exit 1
    cuda_lib_path
    for dt in f32 bf16; do
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"/tmp/mem-$dt.txt" &
      smi=$!
      ( time timeout 240 $BIN/dspark bench --model "$DIR" --backend cuda --device cuda --dtype $dt \
          --prompt-ids "$DIR/prompts.json" --max-tokens $NEW --baseline-only \
          --mem-bandwidth-gbs 4130 --out "$LOG/dspark-$dt.json" ) >"$LOG/dspark-$dt.txt" 2>&1
      echo "exit $?" >>"$LOG/dspark-$dt.txt"
      kill $smi
      tail -6 "$LOG/dspark-$dt.txt"
    done
    python3 - "$DIR" "$LOG" <<'EOF'
import json, os, sys
d, log = sys.argv[1:]
ref = json.load(open(os.path.join(d, "ref.json")))
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
out = {"checkpoint": "transformers Gemma4ForCausalLM, the published 12B text config, seeded random weights (scripts/bench/gemma4_12b_shape.py)",
       "safetensors_bytes": size, "reference": ref, "dspark": {}}
for dt in ("f32", "bf16"):
    p = os.path.join(log, f"dspark-{dt}.json")
    mem = [int(x) for x in open(f"/tmp/mem-{dt}.txt").read().split() if x.isdigit()]
    row = {"gpu_memory_peak_mib": max(mem) if mem else None}
    if os.path.exists(p):
        b = json.load(open(p))["baseline"]
        ids = b["ids"]
        row.update(decode_tok_s=b.get("decode_tok_s"), prefill_tok_s=b.get("prefill_tok_s"), ids=ids,
                   identical_to_reference=[i == r["new_tokens"] for i, r in zip(ids, ref["runs"])],
                   first_difference=[next((j for j, (a, c) in enumerate(zip(i, r["new_tokens"])) if a != c), None)
                                     for i, r in zip(ids, ref["runs"])])
    out["dspark"][dt] = row
json.dump(out, open(os.path.join(log, "gemma4-12b-shape.json"), "w"), indent=1)
print(json.dumps({dt: {k: v for k, v in r.items() if k != "ids"} for dt, r in out["dspark"].items()}))
print("reference:", [r["new_tokens"] for r in ref["runs"]])
EOF
    ;;
  *) echo "usage: $0 make|reference|dspark DIR [...]" >&2; exit 2 ;;
esac
