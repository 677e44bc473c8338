#!/usr/bin/env bash
# Desktop app and web UI tests (W1-5), each step timed; about 3 min once the workspace is built:
#   1. browser e2e: ui/ served by `dspark serve --model demo`, headless Debian chromium driven
#      by playwright-core (tests/e2e/ui.test.mjs); screenshots in target/e2e-artifacts/
#   2. Xvfb smoke test of the built app: endpoint answers, tray menu -> Quit -> exit 0
# The binaries come from `cargo test --workspace --no-run` (a no-op after `scripts/test.sh
# --workspace`, which also runs the app's Tauri mock-runtime command tests): the same package
# selection as the test build, so nothing is compiled twice.
# Installs the Debian packages it needs when they are missing (apt-get, as root in CI).
set -Eeuo pipefail
trap 'echo "test-ui.sh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
t_all=$(date +%s)
timed() {
    local name=$1; shift
    local s; s=$(date +%s)
    echo "-- ui: $name"
    "$@"
    echo "-- ui: $name took $(( $(date +%s) - s ))s"
}

PKGS="libwebkit2gtk-4.1-dev libayatana-appindicator3-dev librsvg2-dev libxdo-dev libssl-dev
      build-essential file pkg-config xvfb xauth xdotool trayer imagemagick chromium curl"
install_pkgs() {
    local missing=""
    for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    if [ -n "$missing" ]; then
        apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
    fi
}
timed "apt packages" install_pkgs

timed "workspace build (no-op when already built)" cargo test --locked --workspace --no-run

browser_e2e() {
    (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
    (cd tests/e2e && node --test --test-concurrency=1 ui.test.mjs)
}
timed "browser e2e (playwright-core + chromium)" browser_e2e
timed "xvfb smoke (tray quit)" bash tests/smoke-xvfb.sh
echo "-- ui: all steps took $(( $(date +%s) - t_all ))s"
