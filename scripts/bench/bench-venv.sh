#!/usr/bin/env bash
# Builds the peer-benchmark venv once (.venv-bench/): llama-cpp-python compiled from its PyPI
# sdist for this CPU (cmake; about 5-10 min on 2 cores) and numpy. Idempotent. Used by
# scripts/bench/vs_llama_cpp.py (its HF transformers row uses the fixtures venv instead:
# scripts/fixtures/setup-venv.sh).
set -Eeuo pipefail
trap 'echo "bench-venv: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/../.."
VENV=.venv-bench
LLAMA_CPP_PYTHON=0.3.36
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
pip=("$VENV/bin/pip" install --quiet --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import llama_cpp; assert llama_cpp.__version__ == '$LLAMA_CPP_PYTHON'" 2>/dev/null; then
    command -v cmake >/dev/null || { echo "bench-venv: cmake is missing (apt-get install cmake)" >&2; exit 1; }
    echo "bench-venv: building llama-cpp-python $LLAMA_CPP_PYTHON from the sdist (native CPU flags)"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" "${pip[@]}" --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON"
fi
"$VENV/bin/python" -c "import numpy" 2>/dev/null || "${pip[@]}" numpy
"$VENV/bin/python" -c "import llama_cpp, numpy; print('bench venv: llama-cpp-python', llama_cpp.__version__, '/ numpy', numpy.__version__)"
