#!/usr/bin/env bash
# The test command: fetch the registry artefacts the tests read (idempotent), then run every
# Rust test of the default workspace members (engine, hub, server, cli, cross-crate tests), then
# the server's end-to-end suite (official openai SDK against `dspark serve`, tests/e2e/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-artefacts.sh
cargo test --locked "$@"
[ -x .venv-e2e/bin/python ] || bash scripts/e2e-venv.sh
cargo build --locked -p dspark-cli
.venv-e2e/bin/python -m pytest tests/e2e -q -p no:cacheprovider
