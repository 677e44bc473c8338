#!/usr/bin/env bash
# On the GPU machine: the balanced-grid GEMM trial (scripts/bench/cuda_gemm_balanced.cuh; docs/cuda.md,
# twelfth slice): the sweep (target/cuda/kbench/cuda_gemm_sweep balanced),
# then the chain bench's step with and without the balanced layer GEMMs, each layer shape on the
# sweep's fastest (NT, W, blocks per SM) by the sum of its 1-row and 16-row times. Needs only the
# driver (static cudart). The two binaries are 17 MB, so carry them packed (tar of cuda_gemm_sweep
# and cuda_chain_bench through xz, unpacked into target/cuda/kbench on the GPU machine) when the
# CUDA pack travels in the same call. JSON lines to $OUT (or target/cuda/run).
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-$PWD/target/cuda/run}
mkdir -p "$LOG"
K=target/cuda/kbench
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv,noheader | tee "$LOG/gpu.txt"
timeout 240 $K/cuda_gemm_sweep balanced > "$LOG/gemm-balanced.jsonl" 2> "$LOG/gemm-balanced.err"
echo "sweep rc $?"
PLAN=$(python3 - "$LOG/gemm-balanced.jsonl" <<'PY'
import json, sys, collections
t = collections.defaultdict(dict)
base = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "gemm" not in r:
        continue
    if r["cfg"].startswith("plan_"):
        base.setdefault(r["gemm"], {})[r["m"]] = r["us_per_call"]
        continue
    t[(r["gemm"], r["cfg"], r["per_sm"])][r["m"]] = r["us_per_call"]
names = {"qkv": "qkv", "o": "o", "gate_up": "gu", "down": "down"}
out = []
for g, short in names.items():
    cands = [(v[1] + v[16], k) for k, v in t.items() if k[0] == g and 1 in v and 16 in v]
    if not cands:
        continue
    s, (_, cfg, per) = min(cands)
    nt, w = cfg.split("_")[1][2:], cfg.split("_")[2][1:]
    b = base.get(g, {})
    print(f"{g}: best {cfg} x{per}/SM {t[(g, cfg, per)]} vs plan {b}", file=sys.stderr)
    out.append(f"{short}={nt},{w},{per}")
print(" ".join(out))
PY
)
echo "plan: $PLAN"
timeout 200 $K/cuda_chain_bench bal $PLAN > "$LOG/chain-balanced.jsonl" 2> "$LOG/chain-balanced.err"
echo "chain rc $?"
grep -h "ms_per_step" "$LOG/chain-balanced.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(r["way"], r["context"], r["rows"], r["ms_per_step"])'
