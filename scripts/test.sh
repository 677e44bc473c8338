#!/usr/bin/env bash
# The test command: every Rust test of the default members (engine, hub, server, cli,
# cross-crate tests; `--workspace` adds the app's mock-runtime tests), then the openai-SDK e2e
# suite against `dspark serve` (tests/e2e/); cold on 2 cores, 65 min on the AVX2 CI-class machine
# (half of it compiling) and 29 min on a Zen 4 one (compile 16, Rust tests 11, e2e 2).
# Extra arguments go to `cargo test`.
set -Eeuo pipefail
trap 'echo "test.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
bash scripts/fetch-artefacts.sh
cargo test --locked "$@"
# The e2e suite starts target/debug/dspark, which the cargo test above built for the CLI's own
# integration tests (same features: building it again with `cargo build -p` would unify
# features differently and recompile the engine).
[ -x target/debug/dspark ] ||
    { echo "test.sh: target/debug/dspark was not built by cargo test (was dspark-cli excluded?)" >&2; exit 1; }
[ -x .venv-e2e/bin/python ] || bash scripts/e2e-venv.sh
.venv-e2e/bin/python -m pytest tests/e2e -q -p no:cacheprovider
