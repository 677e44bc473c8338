#!/usr/bin/env bash
# Builds scripts/bench/cuda_kernel_bench.cu (the engine's CUDA kernels, included as they are,
# with a micro-benchmark and self-check driver) and scripts/bench/cuda_chain_bench.cu (one whole
# decode step of those kernels: plain launches, PDL, CUDA graphs) and scripts/bench/
# cuda_gemm_sweep.cu (the GEMM's launch shapes under PDL) into
# target/cuda/kbench/ with
# the CUDA 13.0 wheels' nvcc (scripts/cuda-toolkit.sh fetches them once) and a static cudart, so the
# GPU machine needs only its driver. Run them there: target/cuda/kbench/cuda_kernel_bench and
# target/cuda/kbench/cuda_chain_bench, target/cuda/kbench/cuda_gemm_sweep (device tool: carry
# target/cuda/kbench).
set -euo pipefail
cd "$(dirname "$0")/../.."
CU=$(bash scripts/cuda-toolkit.sh)
mkdir -p target/cuda/kbench
"$CU/bin/nvcc" -O3 -std=c++17 -arch=sm_90 -lineinfo --cudart static -o target/cuda/kbench/cuda_kernel_bench \
  -L "$CU/lib" scripts/bench/cuda_kernel_bench.cu &
KB=$!
"$CU/bin/nvcc" -O3 -std=c++17 -arch=sm_90 -lineinfo --cudart static -o target/cuda/kbench/cuda_gemm_sweep \
  -L "$CU/lib" scripts/bench/cuda_gemm_sweep.cu &
GS=$!
"$CU/bin/nvcc" -O3 -std=c++17 -arch=sm_90 -lineinfo --cudart static -o target/cuda/kbench/cuda_chain_bench \
  -L "$CU/lib" scripts/bench/cuda_chain_bench.cu
wait "$KB"
wait "$GS"
ls -la target/cuda/kbench/cuda_kernel_bench target/cuda/kbench/cuda_chain_bench target/cuda/kbench/cuda_gemm_sweep
