#!/usr/bin/env bash
# The test command: fetch the registry artefacts the tests read (idempotent), then run every
# Rust test of the default workspace members (engine, hub, cli, cross-crate tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-artefacts.sh
cargo test --locked "$@"
