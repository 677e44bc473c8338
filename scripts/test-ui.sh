#!/usr/bin/env bash
# Desktop app and web UI tests (W1-5), each step timed:
#   1. browser e2e: ui/ served by `dspark serve --model demo`, headless Debian chromium driven
#      by playwright-core (tests/e2e/ui.test.mjs); screenshots in target/e2e-artifacts/
#   2. Tauri mock-runtime tests of the app's commands (cargo test -p dspark-app)
#   3. Xvfb smoke test of the built app: endpoint answers, tray menu -> Quit -> exit 0
# Installs the Debian packages it needs when they are missing (apt-get, as root in CI).
set -euo pipefail
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
      build-essential file xvfb xauth xdotool trayer imagemagick chromium curl"
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

browser_e2e() {
    cargo build --locked -p dspark-cli
    (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
    (cd tests/e2e && node --test --test-concurrency=1 ui.test.mjs)
}
timed "browser e2e (playwright-core + chromium)" browser_e2e
timed "tauri mock-runtime tests" cargo test --locked -p dspark-app
timed "tauri app build" cargo build --locked -p dspark-app
timed "xvfb smoke (tray quit)" bash tests/smoke-xvfb.sh
echo "-- ui: all steps took $(( $(date +%s) - t_all ))s"
