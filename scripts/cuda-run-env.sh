# Sourced by the GPU-machine scripts (run-cuda.sh, bench/gemma4-12b-shape.sh): unpacking what
# scripts/build-cuda.sh packed, and the library path of the image's CUDA libraries.
unxz() { # xz, or Python's lzma where the image has no xz
  if command -v xz >/dev/null; then xz -dc "$1"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
  fi
}
# cuBLAS, cuRAND, NVRTC and cudart from the PyTorch venv's nvidia-* wheels; libcuda from the driver
cuda_lib_path() {
  local libs
  libs=$(python3 - <<'PY'
import glob, os
import nvidia
dirs = set()
for p in nvidia.__path__:
    for so in glob.glob(os.path.join(p, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(so))
print(":".join(sorted(dirs)))
PY
)
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
