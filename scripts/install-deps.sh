#!/usr/bin/env bash
# Installs the Debian packages every CI step needs, in one apt transaction and only those that
# are missing (idempotent; a no-op on a machine that has them): npm (artefacts, browser e2e),
# the Tauri app's build libraries, chromium + Xvfb tools (UI tests), and cmake/clang/OpenBLAS
# (the MLX build). scripts/test-ui.sh and scripts/with-mlx still check their own lists, so
# each also works alone.
set -Eeuo pipefail
trap 'echo "install-deps: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

PKGS="libwebkit2gtk-4.1-dev libayatana-appindicator3-dev librsvg2-dev libxdo-dev libssl-dev
      build-essential file pkg-config
      xvfb xauth xdotool trayer imagemagick chromium curl
      cmake clang libclang-dev libopenblas-dev"

missing=""
# npm: the machine's Node.js may ship its own (not Debian's, which would conflict with it)
command -v npm >/dev/null || missing=" npm"
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: all Debian packages present"
    exit 0
fi
echo "install-deps: installing$missing"
sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq ||
    { echo "install-deps: apt-get update failed (no access to the Debian mirror?)" >&2; exit 1; }
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    $missing
