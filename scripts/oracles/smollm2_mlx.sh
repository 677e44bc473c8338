#!/usr/bin/env bash
# One command for the real-weight mlx-dspark goldens (tests/fixtures/spec/golden_mlx_smollm2.json,
# checked by tests/tests/spec_golden_smollm2.rs): makes the dequantized f32 HF copy of the demo
# GGUF if missing (scripts/train/common.py, with a Python that has torch + transformers + gguf:
# $TRAIN_PY, default .venv-train/bin/python), then runs scripts/oracles/run_mlx_smollm2.py in
# .venv-mlx (scripts/oracles/setup.sh). Re-run it whenever assets/drafters/ changes; extra
# arguments go to run_mlx_smollm2.py (--prompts, --max-new, --out). About 10 min on 2 CPU cores.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ART="${DSPARK_ARTEFACTS:-$HOME/.cache/dspark/artefacts}"
TRAIN_PY="${TRAIN_PY:-$ROOT/.venv-train/bin/python}"
MLX_PY="${DSPARK_MLX_VENV:-$ROOT/.venv-mlx}/bin/python"
if [ ! -f "$ART/smollm2/hf-f32/config.json" ]; then
    "$TRAIN_PY" -c "import sys; sys.path.insert(0, '$ROOT/scripts/train'); import common; common.load_target('$ART/smollm2', 'cpu')"
fi
DSPARK_ARTEFACTS="$ART" "$MLX_PY" "$ROOT/scripts/oracles/run_mlx_smollm2.py" "$@"
