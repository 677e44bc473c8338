#!/usr/bin/env bash
# Unpacks the CUDA 13.0 toolkit pieces that dspark's CUDA builds need (nvcc, runtime, crt, cccl,
# nvvm: nvcc 13.0.88 = the H200's driver level; PTX from a newer nvcc would not load there) from
# their PyPI wheels into $CUDATK (default target/cudatk), once, and prints the toolkit root
# ($CUDATK/nvidia/cu13). Used by scripts/build-cuda.sh and scripts/bench/cuda-kernel-bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
TK=${CUDATK:-$PWD/target/cudatk}
if [ ! -x "$TK/nvidia/cu13/bin/nvcc" ]; then
  mkdir -p "$TK/wheels"
  python3 -m pip download --no-deps -q -d "$TK/wheels" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-nvvm==13.0.88 >&2
  for w in "$TK"/wheels/*.whl; do python3 -m zipfile -e "$w" "$TK"; done
  chmod +x "$TK"/nvidia/cu13/bin/* "$TK"/nvidia/cu13/nvvm/bin/* 2>/dev/null || true
fi
ln -sf libcudart.so.13 "$TK/nvidia/cu13/lib/libcudart.so"
echo "$TK/nvidia/cu13"
