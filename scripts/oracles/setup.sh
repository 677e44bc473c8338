#!/usr/bin/env bash
# Create the two reference venvs used by the speculative-decoding oracles (PyPI only):
#   .venv-mlx/  mlx-dspark 0.20.3 + mlx (CPU build) + mlx-lm   -> scripts/oracles/run_mlx.py
#   .venv-ref/  torch 2.13.0 + transformers 5.15.0 + z-lab dflash 0.1.0 -> scripts/oracles/run_torch.py
# Two venvs because mlx-dspark pulls transformers 5.24 while dflash pins 5.15.
# .venv-ref/ is shared with scripts/fixtures/setup-venv.sh (which it calls when missing).
# Both names are covered by the /.venv*/ entry of .gitignore.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
MLX="${DSPARK_MLX_VENV:-$ROOT/.venv-mlx}"
REF="${DSPARK_REF_VENV:-$ROOT/.venv-ref}"

if [ ! -x "$MLX/bin/python" ]; then
    "$PY" -m venv "$MLX"
fi
"$MLX/bin/python" -m pip install --quiet "mlx-dspark==0.20.3" "mlx[cpu]" mlx-lm numpy safetensors

if [ ! -x "$REF/bin/python" ]; then
    DSPARK_REF_VENV="$REF" bash "$ROOT/scripts/fixtures/setup-venv.sh"
fi
"$REF/bin/python" -m pip install --quiet "torch==2.13.0" "transformers==5.15.0" "dflash==0.1.0" numpy safetensors

"$MLX/bin/python" -c "import importlib.metadata as m, mlx.core as mx; print('mlx venv:', 'mlx-dspark', m.version('mlx-dspark'), 'mlx', m.version('mlx'), 'mlx-lm', m.version('mlx-lm'), mx.default_device())"
"$REF/bin/python" -c "import importlib.metadata as m; print('ref venv:', 'torch', m.version('torch'), 'transformers', m.version('transformers'), 'dflash', m.version('dflash'))"
