#!/usr/bin/env bash
# Runs on the GPU machine (no Rust there), from the repository root, what scripts/build-cuda.sh
# built and packed: the CUDA test binaries (golden_tiny, spec_greedy, spec_golden) and `dspark
# generate`/`bench` on the tiny fixtures; with --q8b, `dspark bench` on a random Qwen3-8B-shaped
# bf16 checkpoint (and random DFlash/DSpark-shaped drafters) written there by
# scripts/bench/make_qwen3_8b_random.py: baseline at 1024 and 8192 context, verify cost, oracle
# forced-tau spec runs, a per-op profile; with --hf, HF transformers on the same checkpoint
# (scripts/bench/hf_cuda_decode.py; needs no binaries).
# Usage: scripts/run-cuda.sh [--no-tests] [--q8b] [--hf] [--profile] [--pdl|--qkv1|--glu|--pre|--cluster|--h2] [--spec] [PACK]
#   --profile: only the per-op profile runs of --q8b (baseline, DFlash and DSpark oracle rounds
#            synced per op; then the host enqueue time per op of the baseline and both rounds)
#   --verify: only the baseline and verify-cost runs of --q8b at 1024 and 8192 context
#   --pdl: baseline decode and verify cost at 1024 and 8192 context with programmatic dependent
#          launch (the default) and without it (DSPARK_CUDA_PDL=0), one call; then
#          target/cuda/kbench/cuda_chain_bench when it was carried
#   --qkv1: the same with the one-launch attention inputs (the default) and without them
#          (DSPARK_CUDA_QKV1=0: two norm_rope launches and two cache writes per layer)
#   --glu: the same with the gate/up GEMM's SwiGLU epilogue (the default) and without it
#          (DSPARK_CUDA_GLU=0: the plain GEMM, then swiglu_bf16)
#   --pre: the same with the GEMMs' first weights loaded before the PDL wait (the default) and
#          without it (DSPARK_CUDA_PRE=0); the chain bench of the kernels before that change too
#          (target/cuda/kbench/cuda_chain_bench_head, when carried)
#   --cluster: the same with the tensor-core attention as clusters of its key splits that merge
#          them (the default, up to 16 splits) and without (DSPARK_CUDA_ATTN_CLUSTER=0: split
#          launch + combine launch), one call
#   --h2: the same with the decode steps' 8-warp tensor-core attention (the default) and without
#          (DSPARK_CUDA_ATTN_H2=0: 4 warps), one call
#   --graphs: the same with the fixed-shape steps replayed as CUDA graphs (DSPARK_CUDA_GRAPHS=1)
#          and without them (=0: every op launched by the host), plus both oracle runs (DFlash-
#          and DSpark-shaped drafters at tau 2, 4, 6.5) each way
#   --markov: the DSpark-shaped oracle runs (tau 2, 4, 6.5) with DSpark's greedy chain fused
#          (the default, one launch a draft row) and op by op (DSPARK_CUDA_MARKOV=0),
#          alternated twice in one call
#   --vocab: both oracle drafters (tau 2, 4, 6.5) with a draft vocabulary of 32,768 ids
#          (--draft-vocab 32768: their heads score a fifth of the 151,936 ids) plus each
#          prompt's ids (the default), without them (DSPARK_DRAFT_VOCAB_PROMPT=0), and with the
#          whole vocabulary (--draft-vocab 0), alternated VOCAB_REPS (2) times in one call
#   --demo: the demo model (the SmolLM2 GGUF: $DEMO_GGUF, else joined from /tmp/w/part_a..e) with
#          its trained DFlash b16 and DSpark b7 drafters at the default draft count, prompt
#          lookup off then on, on the chat-templated prompt ids $DEMO_IDS/ids-{mtbench,humaneval}.json
#          (default /tmp/w; written on the CPU machine by `dspark bench --emit-prompt-ids`);
#          the runs are joined into $OUT/demo.json
#   --spec: only the two oracle runs of --q8b (DFlash- and DSpark-shaped drafters, tau 2, 4, 6.5)
#   --vs-hf: dspark's baseline decode and HF transformers (static cache, then torch.compile
#            reduce-overhead) on the same checkpoint and ids at 1024 and 8192 context, one call
#   (PACK: default target/cuda/carry/cuda-bins.tar.xz)
# Logs go to $OUT (the device tool's result folder, which takes back at most 8 files) or to
# target/cuda/run.
set -uo pipefail
cd "$(dirname "$0")/.."
DEMO=0 Q8B=0 HF=0 TESTS=1 PROF=0 VSHF=0 VER=0 PDL=0 QKV1=0 GLU=0 PRE=0 GRAPHS=0 SPEC=0 CLU=0 H2=0 MARKOV=0 VOCAB=0 PACK=target/cuda/carry/cuda-bins.tar.xz
for a in "$@"; do
  case $a in
    --q8b) Q8B=1 ;;
    --hf) HF=1 ;;
    --no-tests) TESTS=0 ;;
    --profile) PROF=1 ;;
    --vs-hf) VSHF=1; TESTS=0 ;;
    --verify) VER=1; TESTS=0 ;;
    --pdl) PDL=1 ;;
    --qkv1) QKV1=1 ;;
    --glu) GLU=1 ;;
    --pre) PRE=1 ;;
    --graphs) GRAPHS=1 ;;
    --cluster) CLU=1 ;;
    --h2) H2=1 ;;
    --spec) SPEC=1 ;;
    --markov) MARKOV=1 ;;
    --vocab) VOCAB=1 ;;
    --demo) DEMO=1 ;;
    *) PACK=$a ;;
  esac
done
LOG=${OUT:-$PWD/target/cuda/run}
mkdir -p "$LOG"
M=/tmp/q8b
checkpoint() { # the random 8B-shaped target, drafters and prompt ids (1024 and 8192 tokens)
  [ -f $M/dspark-b7/config.json ] && return 0
  ( time timeout 200 python3 scripts/bench/make_qwen3_8b_random.py $M --seed 0 --context 1024 \
    --prompts 2 --long-context 8192 --drafters --decisive ) 2>&1 | tee -a "$LOG/q8b.txt"
}
if [ $HF = 1 ]; then
  checkpoint
  timeout 420 python3 scripts/bench/hf_cuda_decode.py $M "$LOG/hf.json" $M/prompt_ids.json \
    $M/prompt_ids_8192.json:static 2>&1 | grep -v Warning | tail -20 | tee -a "$LOG/q8b.txt"
  [ $Q8B = 1 ] || [ $TESTS = 1 ] || exit 0
fi
BIN=/tmp/dspark-cuda
. scripts/cuda-run-env.sh
mkdir -p $BIN && unxz "$PACK" | tar -xf - -C $BIN || exit 1
cuda_lib_path
export DSPARK_TESTS_DIR=$PWD/tests
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  ldd $BIN/dspark | grep -i "cuda\|not found"
} 2>&1 | tee -a "$LOG/tests.txt"
fails=0
for t in $([ $TESTS = 1 ] && echo golden_tiny spec_greedy spec_golden batch_invariance draft_vocab lookup_greedy); do
  echo "== $t" | tee -a "$LOG/tests.txt"
  # batch_invariance, draft_vocab: their CUDA tests only (the others read CPU artefacts the GPU
  # box lacks)
  f=; case $t in batch_invariance | draft_vocab) f=cuda_ ;; esac
  ( time timeout 150 $BIN/$t $f --test-threads=1 --nocapture ) >>"$LOG/tests.txt" 2>&1 || fails=$((fails + 1))
  grep -E "^test result|FAILED|panicked|on candle cuda" "$LOG/tests.txt" | tail -20
done
echo "test binaries failing: $fails" | tee -a "$LOG/tests.txt"
T=tests/fixtures/spec/models
{
  $BIN/dspark generate --model $T/target --device cuda --dtype f32 --no-chat-template \
    --prompt "<t5> <t9> <t11>" --max-tokens 48
  $BIN/dspark generate --model $T/target --device cuda --dtype f32 --no-chat-template \
    --prompt "<t5> <t9> <t11>" --max-tokens 48 --mode dflash --drafter $T/dflash-accept
  python3 -c 'import json; print(json.dumps([[5, 9, 11, 13, 17, 19, 23, 29]] * 3))' >/tmp/ids.json
  $BIN/dspark bench --model $T/target --device cuda --dtype f32 --mode dflash \
    --drafter $T/dflash-accept --prompt-ids /tmp/ids.json --max-tokens 64 --mem-bandwidth-gbs 4130 \
    --out /tmp/bench_tiny.json
} >>"$LOG/tests.txt" 2>&1
tail -25 "$LOG/tests.txt"
if [ $DEMO = 1 ]; then
  G=${DEMO_GGUF:-/tmp/w/demo.gguf}
  [ -f "$G" ] || cat /tmp/w/part_a /tmp/w/part_b /tmp/w/part_c /tmp/w/part_d /tmp/w/part_e >"$G" || exit 3
  md5sum "$G" | tee -a "$LOG/demo.txt"
  mkdir -p /tmp/demo
  for set in mtbench humaneval; do
    for run in "dflash assets/drafters/smollm2-135m-dflash-b16" "dspark assets/drafters/smollm2-135m-dspark-b7"; do
      read -r mode drafter <<<"$run"
      for lk in false true; do
        echo "== $set $mode lookup $lk" >>"$LOG/demo.txt"
        timeout 150 $BIN/dspark bench --model "$G" --device cuda --mode $mode --drafter $drafter \
          --prompt-ids "${DEMO_IDS:-/tmp/w}/ids-$set.json" --max-tokens 128 --lookup $lk \
          --mem-bandwidth-gbs "${DEMO_BW:-3350}" --out /tmp/demo/$set-$mode-$lk.json >>"$LOG/demo.txt" 2>&1
        tail -2 "$LOG/demo.txt"
      done
    done
  done
  python3 - "$LOG/demo.json" /tmp/demo/*.json <<'PY'
import json, os, sys
runs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sys.argv[2:]}
for r in runs.values():
    r["baseline"].pop("ids", None)
json.dump(runs, open(sys.argv[1], "w"), indent=1)
PY
fi
if [ $Q8B = 1 ] || [ $SPEC = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -12 "$LOG/q8b.txt"; }
  # 1024 context: baseline, verify 4/8/16, DFlash-shaped drafter under the oracle at tau 2, 4, 6.5
  q $B --max-tokens 128 --prompt-ids $M/prompt_ids.json --mode dflash --drafter $M/dflash-b16 --baseline-only \
    --verify-cost 4,8,16 --oracle-tau 2,4,6.5 --out "$LOG/bench_q8b_dflash.json"
  # the DSpark-shaped drafter (block 7; no confidence truncation, so the oracle's block is whole)
  q $B --max-tokens 128 --prompt-ids $M/prompt_ids.json --mode dspark --drafter $M/dspark-b7 --confidence-threshold 0 \
    --baseline-only --oracle-tau 2,4,6.5 --out "$LOG/bench_q8b_dspark.json"
fi
if [ $Q8B = 1 ]; then
  # the same baseline and verify cost on candle's own CUDA ops (our kernels off), same call
  q env DSPARK_CUDA_KERNELS=0 $B --max-tokens 128 --prompt-ids $M/prompt_ids.json --mode baseline \
    --verify-cost 4,8,16 --out "$LOG/bench_q8b_candle_ops.json"
  # exactness without margins: a plain N(0, 0.02) 8-layer checkpoint (no --decisive), whose
  # near-ties flip on any rounding difference between verify rows and decode steps; greedy
  # identity of oracle rounds with our batch-invariant kernels and with candle's own ops
  P=/tmp/q8b-plain
  [ -f $P/dflash-b16/config.json ] || ( time timeout 200 python3 scripts/bench/make_qwen3_8b_random.py $P \
    --seed 1 --context 1024 --prompts 4 --layers 8 --drafters ) >>"$LOG/q8b.txt" 2>&1
  PB="$BIN/dspark bench --model $P --device cuda --dtype bf16 --max-tokens 128 --prompt-ids $P/prompt_ids.json \
    --mode dflash --drafter $P/dflash-b16 --baseline-only --oracle-tau 6.5"
  q $PB --out /tmp/bench_plain_ours.json
  q env DSPARK_CUDA_KERNELS=0 $PB --out /tmp/bench_plain_candle.json
  # 8192 context: baseline and verify cost
  q $B --max-tokens 128 --prompt-ids $M/prompt_ids_8192.json --mode baseline --verify-cost 4,8,16 \
    --out "$LOG/bench_q8b_8192.json"
fi
if [ $MARKOV = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130 --max-tokens 128 \
    --prompt-ids $M/prompt_ids.json --mode dspark --drafter $M/dspark-b7 --confidence-threshold 0 \
    --baseline-only --oracle-tau 2,4,6.5"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -8 "$LOG/q8b.txt"; }
  for r in 1 2; do
    for e in 1 0; do q env DSPARK_CUDA_MARKOV=$e $B --out "$LOG/bench_markov${e}_$r.json"; done
  done
fi
if [ $VOCAB = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130 --max-tokens 128 \
    --prompt-ids $M/prompt_ids.json --confidence-threshold 0 --baseline-only --oracle-tau 2,4,6.5"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -8 "$LOG/q8b.txt"; }
  mkdir -p /tmp/vocab
  for r in $(seq 1 "${VOCAB_REPS:-2}"); do
    t=$(date +%H%M%S)
    for way in 32768:1 32768:0 0:1; do
      k=${way%:*} p=${way#*:}
      for d in dflash-b16 dspark-b7; do
        q env DSPARK_DRAFT_VOCAB_PROMPT=$p $B --mode ${d%-*} --drafter $M/$d --draft-vocab $k \
          --out "/tmp/vocab/bench_vocab${k}_p${p}_${d%-*}_$t.json"
      done
    done
  done
  tar -cf "$LOG/vocab.tar" -C /tmp vocab
fi
if [ $VER = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130 --mode baseline --max-tokens 64"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -8 "$LOG/q8b.txt"; }
  q $B --prompt-ids $M/prompt_ids.json --verify-cost 4,8,16 --out "$LOG/bench_verify_1024.json"
  q $B --prompt-ids $M/prompt_ids_8192.json --verify-cost 4,8,16 --out "$LOG/bench_verify_8192.json"
fi
if [ $PDL = 1 ] || [ $QKV1 = 1 ] || [ $GLU = 1 ] || [ $PRE = 1 ] || [ $GRAPHS = 1 ] || [ $CLU = 1 ] || [ $H2 = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130 --mode baseline --max-tokens 128"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -8 "$LOG/q8b.txt"; }
  # the default against the switch turned off, side by side in one call
  on=  # the switch's value for the first run of each pair (default: the binary's default)
  if [ $PDL = 1 ]; then off=DSPARK_CUDA_PDL tag=pdl
  elif [ $QKV1 = 1 ]; then off=DSPARK_CUDA_QKV1 tag=qkv1
  elif [ $PRE = 1 ]; then off=DSPARK_CUDA_PRE tag=pre
  elif [ $GRAPHS = 1 ]; then off=DSPARK_CUDA_GRAPHS tag=graphs on=DSPARK_CUDA_GRAPHS=1
  elif [ $CLU = 1 ]; then off=DSPARK_CUDA_ATTN_CLUSTER tag=cluster
  elif [ $H2 = 1 ]; then off=DSPARK_CUDA_ATTN_H2 tag=h2
  else off=DSPARK_CUDA_GLU tag=glu; fi
  for c in 1024 8192; do
    ids=$M/prompt_ids.json; [ $c = 8192 ] && ids=$M/prompt_ids_8192.json
    q env $on $B --prompt-ids $ids --verify-cost 4,8,16 --out "$LOG/bench_${tag}_$c.json"
    q env $off=0 $B --prompt-ids $ids --verify-cost 4,8,16 --out "$LOG/bench_no${tag}_$c.json"
  done
  if [ $GRAPHS = 1 ]; then
    S="$B --prompt-ids $M/prompt_ids.json --baseline-only --oracle-tau 2,4,6.5"
    for e in 1 0; do
      q env DSPARK_CUDA_GRAPHS=$e ${S/--mode baseline /} --mode dflash --drafter $M/dflash-b16 --out "$LOG/bench_graphs${e}_dflash.json"
      q env DSPARK_CUDA_GRAPHS=$e ${S/--mode baseline /} --mode dspark --drafter $M/dspark-b7 --confidence-threshold 0 \
        --out "$LOG/bench_graphs${e}_dspark.json"
    done
  fi
  for K in target/cuda/kbench/cuda_chain_bench_head target/cuda/kbench/cuda_chain_bench; do
    if [ -x $K ]; then echo "== $K" >>"$LOG/q8b.txt"; timeout 150 $K >>"$LOG/q8b.txt" 2>&1; tail -40 "$LOG/q8b.txt"; fi
  done
fi
if [ $VSHF = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130 --mode baseline --max-tokens 128"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -4 "$LOG/q8b.txt"; }
  q $B --prompt-ids $M/prompt_ids.json --out "$LOG/bench_vs_hf_1024.json"
  q $B --prompt-ids $M/prompt_ids_8192.json --out "$LOG/bench_vs_hf_8192.json"
  timeout 300 python3 scripts/bench/hf_cuda_decode.py $M "$LOG/hf.json" $M/prompt_ids.json \
    $M/prompt_ids_8192.json 2>&1 | grep -v Warning | tail -20 | tee -a "$LOG/q8b.txt"
fi
if [ $Q8B = 1 ] || [ $PROF = 1 ]; then
  checkpoint
  B="$BIN/dspark bench --model $M --device cuda --dtype bf16 --mem-bandwidth-gbs 4130"
  q() { echo "== $*" >>"$LOG/q8b.txt"; ( time timeout 150 "$@" ) >>"$LOG/q8b.txt" 2>&1; tail -40 "$LOG/q8b.txt"; }
  # where a decode step's and a spec round's time goes: per-op wall time, the device synced at
  # each op's ends (baseline, then DFlash-shaped oracle rounds at tau 6.5)
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[:1]))' $M/prompt_ids.json >/tmp/one.json
  DSPARK_PROFILE=1 q $B --prompt-ids /tmp/one.json --mode dflash --drafter $M/dflash-b16 --baseline-only \
    --oracle-tau 6.5 --max-tokens 64 --out "$LOG/bench_q8b_profile.json"
  # the host's time to enqueue each op (no waits; to_host then holds the wait for the device)
  DSPARK_PROFILE=host q $B --prompt-ids /tmp/one.json --mode baseline --max-tokens 64 \
    --out "$LOG/bench_q8b_host_profile.json"
  # and of a DFlash-shaped spec round (the draft pass is host-bound)
  DSPARK_PROFILE=host q $B --prompt-ids /tmp/one.json --mode dflash --drafter $M/dflash-b16 \
    --baseline-only --oracle-tau 6.5 --max-tokens 64 --out "$LOG/bench_q8b_host_profile_dflash.json"
  # the same two for a DSpark-shaped round (block 7, no confidence truncation)
  DSPARK_PROFILE=1 q $B --prompt-ids /tmp/one.json --mode dspark --drafter $M/dspark-b7 \
    --confidence-threshold 0 --baseline-only --oracle-tau 6.5 --max-tokens 64 \
    --out "$LOG/bench_q8b_profile_dspark.json"
  DSPARK_PROFILE=host q $B --prompt-ids /tmp/one.json --mode dspark --drafter $M/dspark-b7 \
    --confidence-threshold 0 --baseline-only --oracle-tau 6.5 --max-tokens 64 \
    --out "$LOG/bench_q8b_host_profile_dspark.json"
fi
