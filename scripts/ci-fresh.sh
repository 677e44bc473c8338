#!/usr/bin/env bash
# scripts/ci-fresh.sh [COMMIT]: run `.ci/run` the way a new CI machine would, and time it.
#   - a new clone of COMMIT (default HEAD) in a temporary folder: no target/, no venvs;
#   - an empty CARGO_HOME (its own registry and git cache; the rustup toolchain is kept);
#   - an empty HOME (no pip/npm/dspark caches; the machine's dotfiles .npmrc/.gitconfig are
#     copied, as a new machine has them); Debian packages stay (their install is idempotent).
# Prints the wall time of each step (from .ci/run's "== [Ns]" and test-ui's "-- ui:" lines)
# and writes them with the total to bench-results/ci-fresh.json of this checkout.
# Env: CI_FRESH_DIR (default: a new mktemp folder), CI_FRESH_KEEP=1 keeps it afterwards.
set -Eeuo pipefail
trap 'echo "ci-fresh: FAILED (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
repo=$(cd "$(dirname "$0")/.." && pwd -P)
commit=$(git -C "$repo" rev-parse "${1:-HEAD}")
root=${CI_FRESH_DIR:-$(mktemp -d /tmp/dspark-ci-fresh.XXXXXX)}
mkdir -p "$root"
home="$root/home"; cargo_home="$root/cargo"; clone="$root/clone"; log="$root/ci.log"
rm -rf "$home" "$cargo_home" "$clone"
mkdir -p "$home" "$cargo_home"
for f in .npmrc .gitconfig .profile .bashrc; do
    [ -f "$HOME/$f" ] && cp "$HOME/$f" "$home/$f"
done
git clone -q --no-hardlinks "$repo" "$clone"
git -C "$clone" checkout -q "$commit"
# shared/ sits beside the repository root in CI (read-only copy): link the same one here
[ -e "$root/shared" ] || { [ -d "$repo/../shared" ] && ln -s "$(cd "$repo/../shared" && pwd -P)" "$root/shared"; }

echo "ci-fresh: commit $commit in $clone (HOME=$home, CARGO_HOME=$cargo_home); log: $log"
t0=$(date +%s)
rc=0
(
    cd "$clone"
    export HOME="$home" CARGO_HOME="$cargo_home" CI=true
    export RUSTUP_HOME="${RUSTUP_HOME:-/root/.rustup}"
    # the toolchain's rustup proxies stay on PATH; nothing else of the old CARGO_HOME is used
    bash .ci/run </dev/null
) >"$log" 2>&1 || rc=$?
total=$(( $(date +%s) - t0 ))

# step timings: "== [Ns] name" marks the start of each .ci/run step
python3 - "$log" "$total" "$rc" "$commit" "$repo/bench-results/ci-fresh.json" <<'PY'
import json, re, sys
log, total, rc, commit, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
starts, ui = [], []
for line in open(log, errors="replace"):
    m = re.match(r"== \[(\d+)s\] (.*)", line)
    if m:
        starts.append((int(m.group(1)), m.group(2).strip()))
    m = re.match(r"-- ui: (.*) took (\d+)s", line)
    if m:
        ui.append({"step": m.group(1), "seconds": int(m.group(2))})
steps = []
for i, (s, name) in enumerate(starts):
    if name.startswith("done in"):
        break
    end = starts[i + 1][0] if i + 1 < len(starts) else total
    steps.append({"step": name, "seconds": end - s})
res = {"commit": commit, "exit_code": rc, "total_seconds": total, "steps": steps, "ui_substeps": ui}
json.dump(res, open(out, "w"), indent=2)
print(f"ci-fresh: exit {rc}, total {total}s ({total/60:.1f} min)")
for st in steps:
    print(f"  {st['seconds']:6d}s  {st['step']}")
for st in ui:
    print(f"  {st['seconds']:6d}s    ui: {st['step']}")
print(f"ci-fresh: wrote {out}")
PY
if [ "$rc" != 0 ]; then
    echo "ci-fresh: .ci/run failed (exit $rc); its last lines:" >&2
    tail -n 40 "$log" >&2
fi
[ "${CI_FRESH_KEEP:-0}" = 1 ] || [ "$rc" != 0 ] || rm -rf "$clone" "$cargo_home" "$home"
exit "$rc"
