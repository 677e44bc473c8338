#!/usr/bin/env bash
# Builds scripts/bench/cuda_kernel_bench.cu (the engine's CUDA kernels, included as they are,
# with a micro-benchmark and self-check driver) into target/cuda/kbench/cuda_kernel_bench with
# the CUDA 13.0 wheels' nvcc (scripts/build-cuda.sh fetches them) and a static cudart, so the
# GPU machine needs only its driver. Run it there: target/cuda/kbench/cuda_kernel_bench
# (device tool: carry target/cuda/kbench).
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-target/cudatk/nvidia/cu13/bin/nvcc}
[ -x "$NVCC" ] || { echo "no nvcc at $NVCC: run scripts/build-cuda.sh --check once" >&2; exit 2; }
mkdir -p target/cuda/kbench
"$NVCC" -O3 -std=c++17 -arch=sm_90 -lineinfo --cudart static -o target/cuda/kbench/cuda_kernel_bench \
  -L target/cudatk/nvidia/cu13/lib scripts/bench/cuda_kernel_bench.cu
ls -la target/cuda/kbench/cuda_kernel_bench
