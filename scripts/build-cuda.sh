#!/usr/bin/env bash
# Cross-builds `dspark` and the CUDA test binaries (golden_tiny, spec_greedy, spec_golden,
# batch_invariance, draft_vocab, lookup_greedy of dspark-tests, feature `cuda`) with the candle CUDA backend on a machine without a GPU, for the
# H200 benchmark box (no Rust there; docs/cuda.md says how to carry and run them).
# - CUDA 13.0 toolkit pieces come from PyPI nvidia-* wheels (nvcc 13.0.88 = the H200's driver
#   level; PTX from a newer nvcc would not load there) into target/cudatk.
# - A copy of candle-core gets cudarc's `dynamic-loading` instead of `dynamic-linking`, so no
#   libcuda/cuBLAS/nvrtc/curand is needed at link time (dlopened on the GPU machine). Only
#   candle-core needs it: candle-nn and candle-kernels do not depend on cudarc, and
#   candle-kernels links only libcudart (from the runtime wheel).
# - Kernels target sm_90 (H200/H100), `CUDA_COMPUTE_CAP=90`.
# - The build runs in a shadow copy of the sources (target/cuda-src/ws, synced by content, so a
#   rebuild recompiles only what changed), so the repository's Cargo.lock and target/ lock are
#   never touched.
# Usage: scripts/build-cuda.sh [--check|--clippy] [--no-pack] [--rev COMMIT]
#   --rev     build a commit (git archive) instead of the working tree (tracked files plus
#             untracked ones that git does not ignore: what the device tool carries)
#   (default) build -> target/cuda/release/dspark + target/cuda/bin/{dspark,golden_tiny,...},
#             and pack them into target/cuda/carry/cuda-bins.tar.xz (strip + one solid xz).
#   --check   only `cargo check` the cuda features of the engine and tests (what CI runs).
#   --clippy  the same selection through `cargo clippy -- -D warnings`.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=build PACK=1 REV= LINT=0
while [ $# -gt 0 ]; do
  case $1 in
    --check) MODE=check ;;
    --clippy) MODE=check; LINT=1 ;;
    --no-pack) PACK=0 ;;
    --rev) REV=$2; shift ;;
    *) echo "usage: $0 [--check|--clippy] [--no-pack] [--rev COMMIT]" >&2; exit 2 ;;
  esac
  shift
done
ROOT=$PWD
CU=$(bash scripts/cuda-toolkit.sh)

# shadow workspace: the working tree's files (tracked + untracked-not-ignored), or a commit's
# with --rev; synced by content, so unchanged files keep their mtimes and are not rebuilt
WS=$ROOT/target/cuda-src/ws
STAGE=$ROOT/target/cuda-src/stage
rm -rf "$STAGE" && mkdir -p "$STAGE" "$WS"
if [ -n "$REV" ]; then
  git archive --format=tar "$REV" | tar -xf - -C "$STAGE"
else
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$STAGE"
fi
python3 - "$STAGE" "$WS" <<'EOF'
import filecmp, os, shutil, sys
src, dst = sys.argv[1:]
want = set()
for d, _, files in os.walk(src):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), src)
        want.add(rel)
        a, b = os.path.join(src, rel), os.path.join(dst, rel)
        if os.path.islink(a) or not os.path.isfile(b) or not filecmp.cmp(a, b, shallow=False):
            os.makedirs(os.path.dirname(b), exist_ok=True)
            if os.path.lexists(b):
                os.remove(b)
            shutil.copy(a, b, follow_symlinks=False)
for d, _, files in os.walk(dst):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), dst)
        if rel not in want and not rel.startswith("target" + os.sep):
            os.remove(os.path.join(dst, rel))
EOF
rm -rf "$STAGE"

# candle-core with cudarc dynamic-loading (copied once; mtimes kept so cargo does not rebuild it).
# A fresh CARGO_HOME has only the crates earlier builds needed (not candle-kernels/cudarc, which
# only the cuda feature pulls in): fetch the lock file's crates in the shadow workspace.
REG=${CARGO_HOME:-$HOME/.cargo}/registry/src
if ! ls -d "$REG"/*/candle-core-0.11.1 "$REG"/*/candle-kernels-0.11.1 >/dev/null 2>&1; then
  (cd "$WS" && cargo fetch)
fi
SRC=$(ls -d "$REG"/*/candle-core-0.11.1 | head -1)
DST=$ROOT/target/cuda-src/candle-core
if ! grep -q '"dynamic-loading"' "$DST/Cargo.toml" 2>/dev/null; then
  rm -rf "$DST" && mkdir -p "$(dirname "$DST")" && cp -a "$SRC" "$DST"
  sed -i 's/"dynamic-linking"/"dynamic-loading"/' "$DST/Cargo.toml"
  grep -q '"dynamic-loading"' "$DST/Cargo.toml" || { echo "candle-core patch failed" >&2; exit 1; }
fi

OUT=$ROOT/target/cuda
# cudaforge compiles the kernels on half the cores unless told otherwise
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
export PATH=$CU/bin:$PATH CUDA_HOME=$CU CUDA_ROOT=$CU CUDA_PATH=$CU CUDA_COMPUTE_CAP=90 \
  LIBRARY_PATH=$CU/lib${LIBRARY_PATH:+:$LIBRARY_PATH} CARGO_TARGET_DIR=$OUT
CFG=(--config "patch.crates-io.candle-core.path=\"$DST\"" --config 'profile.release.strip=true'
  --config 'profile.release.debug=false')
FEAT=(-p dspark-engine -p dspark-cli -p dspark-tests
  --features dspark-engine/cuda,dspark-cli/cuda,dspark-tests/cuda)
mkdir -p "$OUT"
cd "$WS"
if [ $MODE = check ]; then
  # The type-check needs no kernels: a copy of candle-kernels whose build script only declares
  # the PTX modules (empty) saves the 6+ min of nvcc on 2 cores. cudarc still asks the wheels'
  # nvcc for the CUDA version, so its bindings are the ones the real build uses.
  KSRC=$(ls -d "$REG"/*/candle-kernels-0.11.1 | head -1)
  KDST=$ROOT/target/cuda-src/candle-kernels-stub
  if [ ! -f "$KDST/stub" ]; then
    rm -rf "$KDST" && cp -a "$KSRC" "$KDST"
    python3 - "$KDST" <<'EOF'
import re, sys
d = sys.argv[1]
toml = open(f"{d}/Cargo.toml").read()
open(f"{d}/Cargo.toml", "w").write(re.sub(r"\n\[build-dependencies\.cudaforge\][^\[]*", "\n", toml))
open(f"{d}/build.rs", "w").write("""// type-check stub (scripts/build-cuda.sh --check): the PTX modules, empty; no nvcc
fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut names: Vec<String> = std::fs::read_dir("src").unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".cu") && !f.starts_with("moe_") && !f.starts_with("mmq_")
            && f != "mmvq_gguf.cu")
        .map(|f| f.trim_end_matches(".cu").to_uppercase())
        .collect();
    names.sort();
    let rs: String = names.iter().map(|n| format!("pub const {n}: &str = \\"\\";\\n")).collect();
    std::fs::write(out.join("ptx.rs"), rs).unwrap();
}
""")
open(f"{d}/stub", "w").write("")
EOF
  fi
  # The engine and the GPU test binaries only: all `cuda`-gated code lives in the engine (the
  # CLI's `cuda` feature only forwards to it), and leaving out the CLI skips checking the
  # server's HTTP stack, which the feature does not touch (2m58s cold in CI, 5-7 min with it).
  FEAT=(-p dspark-engine -p dspark-tests --features dspark-engine/cuda,dspark-tests/cuda)
  SEL=(--lib --test golden_tiny --test spec_greedy --test spec_golden --test batch_invariance
    --test draft_vocab --test lookup_greedy)
  if [ $LINT = 1 ]; then
    cargo clippy "${CFG[@]}" --config "patch.crates-io.candle-kernels.path=\"$KDST\"" "${FEAT[@]}" \
      "${SEL[@]}" -- -D warnings
  else
    cargo check "${CFG[@]}" --config "patch.crates-io.candle-kernels.path=\"$KDST\"" "${FEAT[@]}" "${SEL[@]}"
  fi
  exit 0
fi
# one cargo run for the CLI and the three test binaries, so every crate is built once
cargo build --release "${CFG[@]}" "${FEAT[@]}" --bin dspark --test golden_tiny --test spec_greedy \
  --test spec_golden --test batch_invariance --test draft_vocab --test lookup_greedy --message-format=json-render-diagnostics >"$OUT/build-messages.json"
mkdir -p "$OUT/bin"
python3 - "$OUT/build-messages.json" "$OUT/bin" <<'EOF'
import json, os, shutil, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    exe = m.get("executable") if m.get("reason") == "compiler-artifact" else None
    if exe:
        name = m["target"]["name"]
        shutil.copy2(exe, os.path.join(sys.argv[2], name))
        print(f"{name}: {os.path.getsize(exe) / 1e6:.1f} MB  ({exe})")
EOF
[ $PACK = 1 ] || exit 0
# one solid xz stream with a window larger than a binary, so the PTX and code the four binaries
# share is stored once (the carry limit is 64 MiB together with the working tree)
mkdir -p "$OUT/carry"
tar -C "$OUT/bin" -cf - dspark golden_tiny spec_greedy spec_golden batch_invariance draft_vocab lookup_greedy |
  xz -T1 --lzma2=preset=6,dict=256MiB >"$OUT/carry/cuda-bins.tar.xz"
ls -la "$OUT/carry/cuda-bins.tar.xz"
