#!/usr/bin/env bash
# Builds scripts/bench/cuda_kernel_bench.cu (the engine's CUDA kernels, included as they are,
# with a micro-benchmark and self-check driver) into target/cuda/kbench/cuda_kernel_bench with
# the CUDA 13.0 wheels' nvcc (scripts/cuda-toolkit.sh fetches them once) and a static cudart, so the
# GPU machine needs only its driver. Run it there: target/cuda/kbench/cuda_kernel_bench
# (device tool: carry target/cuda/kbench).
set -euo pipefail
cd "$(dirname "$0")/../.."
CU=$(bash scripts/cuda-toolkit.sh)
mkdir -p target/cuda/kbench
"$CU/bin/nvcc" -O3 -std=c++17 -arch=sm_90 -lineinfo --cudart static -o target/cuda/kbench/cuda_kernel_bench \
  -L "$CU/lib" scripts/bench/cuda_kernel_bench.cu
ls -la target/cuda/kbench/cuda_kernel_bench
