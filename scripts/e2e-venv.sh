#!/usr/bin/env bash
# Installs the Python end-to-end test tools (the official `openai` and `anthropic` SDKs and
# pytest) into .venv-e2e/. Idempotent; called by .ci/run and, when the venv is missing, by scripts/test.sh.
set -Eeuo pipefail
trap 'echo "e2e-venv: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
VENV=.venv-e2e
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import openai, anthropic, pytest" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "openai>=1.40,<3" "anthropic==2.10.0" "pytest>=8,<10"
fi
# schemathesis: property-based checks of the served OpenAPI description (tests/e2e/test_openapi.py)
if ! "$VENV/bin/python" -c "import schemathesis" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==4.32.5"
fi
"$VENV/bin/python" -c "import openai, anthropic, pytest; print('e2e venv: openai', openai.__version__, '/ anthropic', anthropic.__version__, '/ pytest', pytest.__version__)"
