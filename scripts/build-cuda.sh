#!/usr/bin/env bash
# Cross-builds `dspark` with the candle CUDA backend on a machine without a GPU, for the H200
# benchmark box (no Rust there). CUDA 13.0 toolkit pieces come from PyPI nvidia-* wheels; a
# copy of candle-core gets cudarc's `dynamic-loading` instead of `dynamic-linking`, so no
# libcuda/cuBLAS is needed at link time (they are dlopened on the GPU machine). The build runs
# in a shadow copy of the tracked files, so the repository's Cargo.lock is never touched.
# Usage: scripts/build-cuda.sh   -> target/cuda/release/dspark
set -euo pipefail
cd "$(dirname "$0")/.."
TK=${CUDATK:-$PWD/target/cudatk}
if [ ! -x "$TK/nvidia/cu13/bin/nvcc" ]; then
  mkdir -p "$TK/wheels"
  python3 -m pip download --no-deps -q -d "$TK/wheels" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-nvvm==13.0.88
  for w in "$TK"/wheels/*.whl; do python3 -m zipfile -e "$w" "$TK"; done
  chmod +x "$TK"/nvidia/cu13/bin/* "$TK"/nvidia/cu13/nvvm/bin/* 2>/dev/null || true
fi
CU=$TK/nvidia/cu13
ln -sf libcudart.so.13 "$CU/lib/libcudart.so"
SRC=$(ls -d "$HOME"/.cargo/registry/src/*/candle-core-0.11.1 | head -1)
DST=$PWD/target/cuda-src/candle-core
rm -rf "$DST" && mkdir -p "$(dirname "$DST")" && cp -r "$SRC" "$DST"
sed -i 's/"dynamic-linking"/"dynamic-loading"/' "$DST/Cargo.toml"
WS=$PWD/target/cuda-src/ws
rm -rf "$WS" && mkdir -p "$WS"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$WS"
OUT=$PWD/target/cuda
(cd "$WS" && PATH=$CU/bin:$PATH CUDA_HOME=$CU CUDA_ROOT=$CU CUDA_COMPUTE_CAP=90 LIBRARY_PATH=$CU/lib \
  CARGO_TARGET_DIR=$OUT \
  cargo build --release -p dspark-cli --features cuda \
  --config "patch.crates-io.candle-core.path=\"$DST\"" --config 'profile.release.strip=true')
ls -la target/cuda/release/dspark
