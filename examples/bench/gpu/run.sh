#!/bin/bash
# run.sh — builds tegraph on a CUDA machine and runs the GPU tests and benchmarks named on the command line,
# with their PyTorch peers (examples/bench/peers/) where there are some. Run from anywhere:
#
#   examples/bench/gpu/run.sh [OPTIONS] STAGE...
#
# Stages, run in the order given:
#   tests      the CUDA test programs (t/cuda-*: kernels and modules against the CPU backend and PyTorch,
#              capture, allocator, events) and t/attention-is-causal.t; EXTRA_TESTS adds test names
#   launch     examples/bench/launch: host cost of an eager kernel, layer by layer
#   ops        examples/bench/ops.lua (per-kernel times) and peers/kernels.py (PyTorch SDPA backends, FP8 GEMM)
#   fp8        examples/bench/fp8_gemm (FP8 and bf16 GEMM 8192^3, cuBLASLt) and peers/fp8_gemm.py
#              (torch._scaled_mm), with the ratio of the two FP8 figures
#   layers     peers/layers.py, then examples/bench/layers.lua --torch (ratios to PyTorch per mode)
#   fp8train   FP8 training: t/cuda-fp8-matches-cpu.t, t/cuda-fp8-layer-matches-cpu.lua, the FP8 casts and scale
#              update alone (ops.lua --only fp8: ms, GB/s), the layer stacks in FP8 next to bf16
#              (layers.lua --fp8 delayed), GPT-2 124M steps in bf16 and with --fp8 delayed / current
#              (tokens/s), and, with FP8_TEXT=FILE (a real text file; FP8_TOKENIZER=DIR for GPT-2 BPE), the
#              training-quality run: FP8_STEPS (default 1000) steps in bf16 and in FP8 (delayed), the loss
#              curves as JSON lines and each run's mean loss over its last 100 steps
#   gpt2       peers/gpt2.py (GPT2_PEER_ARGS, default: eager and torch.compile, table 50304, 16 sequences a step)
#              and examples/gpt.lua at GPT-2 124M size on one GPU (8 x 2 sequences): tokens/s and peak memory
#   lmhead     the fused LM head: its GPU test, examples/bench/lm_head.lua (the head alone at GPT-2 size: ms, calls,
#              peak memory it adds, unfused and per chunk size), then gpt.lua at GPT-2 124M size (bf16, 8 x 2
#              sequences) with the fused loss off and on (LMHEAD_CHUNKS: rows a chunk to try, default
#              "auto 1024 2048 4096"): tokens/s, kernel and GEMM calls per step, peak memory (allocator high-water mark)
#   profile    kernel-time profile of one GPT-2 124M step (the gpt2 options: bf16, 8 x 2 sequences, fused wgrad),
#              eager and --graph: builds examples/bench/gpu/kprof.c (a CUPTI activity profiler, loaded with
#              CUDA_INJECTION64_PATH) with kprof-build.sh against the CUDA install's CUPTI, runs gpt.lua with
#              PROFILE_STEPS (default "4 14") steps and subtracts the short run from the long one, so the rows are
#              the mean of the steady steps (start-up, capture and the last step cancel); writes
#              bench-out/profile-<mode>.txt (every kernel: calls, ms, us, share per step; groups), prints the top
#              rows and, as an overhead check, gpt.lua's tokens/s with and without the profiler
#              (kprof-diff.sh BEFORE.txt AFTER.txt: two profiles side by side, per group and per kernel)
#   dp         gpt.lua at GPT-2 124M size on 1 GPU, on 2 GPUs (ddp), and on 2 GPUs with a trace (2 GPUs)
#   dpscale    examples/bench/dp_scaling.sh: GPT-2 124M on 1, 2, 4, ... GPUs (every power of two up to the GPUs
#              visible), eager and --graph, ddp and zero1: tokens/s, scaling, reduce and exposed reduce per step
#              (DP_BUCKETS: bucket sizes in MiB to sweep, default 25)
#   faults     examples/bench/dp_faults.sh: rank 1 SIGKILLed mid-step on 2, 4, ... GPUs, through tegraph run -n and
#              mpirun, ddp and zero1: time to stop, exit status, error naming rank 1, last checkpoint complete
#   pipeline   examples/zero_bubble.lua with GPT-2-medium-like layers (24, width 1024, 16 heads, 4 x 1024 tokens,
#              8 microbatches, bf16): on one GPU, each F/B/W timed on the device and the 4-stage step simulated;
#              with 4 GPUs or more also one stage per GPU (measured step vs simulated); with 8 or more, gpt.lua as
#              4 stages x 2 replicas (--graph, 1f1b and zb_h1: tokens/s and the trace's reduce/p2p overlap)
#   replay     examples/bench/graph_replay.lua: host time per microbatch, eager vs graphed
#   graphs     examples/bench/graph_memory.lua at GPT-2 124M size (graph pool memory and graph counts per order,
#              1F1B and ZB-H1 included: before, with the default buffer reuse, with share = true), then
#              examples/bench/graph_full_iteration.lua (tiny, small, gpt2) and gpt.lua at GPT-2 124M size eager,
#              --graph and --graph full (tokens/s)
#   allreduce  all-reduce bus bandwidth, examples/bench/allreduce.lua vs peers/allreduce.py (2 GPUs)
#   optim      examples/bench/optim.lua: AdamW step variants over GPT-2 124M's parameters
#   fork       the t/dist scripts under `tegraph run -n 2` (the fork launcher, NCCL; 2 GPUs)
#   sanit      compute-sanitizer memcheck, then racecheck, over the CUDA test programs (EXTRA_SANIT adds)
#   suite      the whole make check
#
# Options:
#   --build DIR     build directory (default: ./build-gpu under the current directory)
#   --out DIR       where logs and outputs go (default: ./bench-out)
#   --arch SM       CUDA architecture for configure (default: sm_90)
#   --debs DIR      first unpack every Debian package (*.deb) in DIR into /, for a machine that lacks what the
#                   build needs and cannot install it (Lua 5.4, libtool, pkg-config): fetch them elsewhere with
#                   `apt-get download lua5.4 liblua5.4-0 liblua5.4-dev libtool libltdl-dev libltdl7 pkg-config
#                   pkgconf pkgconf-bin libpkgconf3` (Debian 12 / Ubuntu names). Needs root. Also TG_BENCH_DEBS.
#   --budget SEC    stop starting stages once SEC seconds have passed; each stage's timeouts are capped to
#                   what is left (default: 3600)
#
# Environment knobs: EXTRA_TESTS, EXTRA_SANIT (more test programs), SANIT_CAP (seconds per sanitizer run,
# default 200), PROFILE_MODES (default "eager graph"), PROFILE_ARGS (more gpt.lua options for the profile, e.g.
# "--fused-lm-head 0"), PROFILE_TOP (rows printed, default 25), CUPTI_DIR (a CUPTI install to use),
# TORCH_MODES (layers.py modes, default "eager,compile,graphed"), GPT2_PADS (gpt.lua
# --vocab-pad values, default "64 1"), PYTHON (default python3), TORCHRUN (default torchrun).
# NCCL's NVLink SHARP (multicast) is switched off for every process started here (NCCL_NVLS_ENABLE=0).
set -o pipefail

SRC=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD=$PWD/build-gpu
OUT=$PWD/bench-out
ARCH=sm_90
DEBS=${TG_BENCH_DEBS:-}
BUDGET=3600
STAGES=()
usage() { sed -n '2,/^set -o/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --debs) DEBS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; usage 2 >&2 ;;
    *) STAGES+=("$1"); shift ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || { echo "run.sh: no stage given" >&2; usage 2 >&2; }
for s in "${STAGES[@]}"; do
  case $s in
    tests|launch|ops|fp8|layers|fp8train|gpt2|lmhead|profile|dp|dpscale|faults|pipeline|graphs|replay|allreduce|optim|fork|sanit|suite) ;;
    *) echo "run.sh: unknown stage '$s'" >&2; exit 2 ;;
  esac
done
mkdir -p "$BUILD" "$OUT" || exit 1
BUILD=$(cd "$BUILD" && pwd) OUT=$(cd "$OUT" && pwd)

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3} TORCHRUN=${TORCHRUN:-torchrun}
PEERS=$SRC/examples/bench/peers
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
stage() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }

if [ -n "$DEBS" ]; then
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { echo "run.sh: no .deb files in $DEBS" >&2; exit 1; }
  for f in "$DEBS"/*.deb; do dpkg -x "$f" / || exit 1; done
  ldconfig
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L

stage configure
(cd "$SRC" && { [ -x configure ] || autoreconf -fi; }) > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
cd "$BUILD" || exit 1
"$SRC/configure" --with-cuda-arch="$ARCH" >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
stage make
make -j"$(nproc)" >> "$OUT/build.log" 2>&1 || { grep -E -A3 "error" "$OUT/build.log" | head -60; exit 1; }

# one GPT-2 token file for the gpt2 and dp stages
data() { [ -f "$OUT/gpt2-tokens.bin" ] || ./tegraph run "$SRC/examples/gpt.lua" --make-data "$OUT/gpt2-tokens.bin" --tokens 2000000 | tail -1; }
GPT2="--vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"

for s in "${STAGES[@]}"; do
  [ "$(left)" -gt 10 ] || { echo "run.sh: budget spent, stopping before $s"; break; }
  case $s in
  tests)
    stage tests
    T="$(grep -ohE 't/cuda-[a-z0-9-]+\.(t|sh|lua)' "$SRC"/t/*.mk | sort -u) t/attention-is-causal.t $EXTRA_TESTS"
    timeout "$(cap 600)" make -j"$(nproc)" check TESTS="$T" > "$OUT/check.log" 2>&1
    for t in $T; do l=${t%.*}.log; echo "$t: $(grep -c '^ok' "$l") ok, $(grep -c '^not ok' "$l") not ok $(grep -m1 -E '^1\.\.0' "$l")"; done
    grep -E "^(FAIL|ERROR)" "$OUT/check.log" | head -20
    for t in $T; do echo "##### $t"; cat "${t%.*}.log"; done > "$OUT/tests.log" 2>&1
    ;;
  launch)
    stage launch
    timeout "$(cap 60)" ./examples/bench/launch 2>&1 | tee "$OUT/launch.txt"
    ;;
  ops)
    stage ops
    timeout "$(cap 120)" ./tegraph run "$SRC/examples/bench/ops.lua" 2>&1 | tee "$OUT/ops.txt"
    (cd "$PEERS" && timeout "$(cap 120)" "$PYTHON" kernels.py) 2>&1 | tee "$OUT/torch_kernels.txt"
    ;;
  fp8)
    stage "fp8 gemm"
    timeout "$(cap 120)" ./examples/bench/fp8_gemm 8192 20 2>&1 | tee "$OUT/fp8_gemm.txt"
    (cd "$PEERS" && timeout "$(cap 120)" "$PYTHON" fp8_gemm.py --n 8192 --iters 20) 2>&1 | tee "$OUT/torch_fp8_gemm.txt"
    t=$(grep -E '^fp8 e4m3 gemm' "$OUT/fp8_gemm.txt" | grep -oE '[0-9.]+ ms' | cut -d' ' -f1)
    p=$(grep -E '^fp8 e4m3 scaled_mm' "$OUT/torch_fp8_gemm.txt" | grep -oE '[0-9.]+ ms' | cut -d' ' -f1)
    [ -n "$t" ] && [ -n "$p" ] && awk -v t="$t" -v p="$p" 'BEGIN { printf "fp8 gemm 8192^3: tegraph / torch._scaled_mm throughput = %.3fx\n", p / t }'
    ;;
  layers)
    stage layers
    (cd "$PEERS" && timeout "$(cap 300)" "$PYTHON" layers.py --modes "${TORCH_MODES:-eager,compile,graphed}") > "$OUT/torch_layers.out" 2>&1
    echo "layers.py rc=$?"; grep -v "^{" "$OUT/torch_layers.out" | tail -5; grep "^{" "$OUT/torch_layers.out"
    timeout "$(cap 200)" ./tegraph run "$SRC/examples/bench/layers.lua" --torch "$OUT/torch_layers.out" 2>&1 | tee "$OUT/layers.txt"
    ;;
  fp8train)
    stage "fp8 training"
    timeout "$(cap 600)" make -j"$(nproc)" check TESTS="t/cuda-fp8-matches-cpu.t t/cuda-fp8-layer-matches-cpu.lua" > "$OUT/fp8-check.log" 2>&1
    for t in t/cuda-fp8-matches-cpu t/cuda-fp8-layer-matches-cpu; do
      echo "$t: $(grep -c '^ok' $t.log) ok, $(grep -c '^not ok' $t.log) not ok"
      grep -E "^not ok|^#" $t.log | head -20
    done
    timeout "$(cap 120)" ./tegraph run "$SRC/examples/bench/ops.lua" --only fp8 2>&1 | tee "$OUT/fp8-ops.txt"
    timeout "$(cap 300)" ./tegraph run "$SRC/examples/bench/layers.lua" --fp8 delayed --gemm 0 2>&1 | tee "$OUT/fp8-layers.txt"
    data
    for f in "" "--fp8 delayed" "--fp8 current"; do
      echo "--- bf16 $f"
      timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" --data "$OUT/gpt2-tokens.bin" $GPT2 --steps 30 --vocab-pad 64 \
        --samples 0 $f 2>&1 | grep -E "steady|issued|host time|rror"
    done | tee "$OUT/fp8-gpt2.txt"
    if [ -n "$FP8_TEXT" ]; then
      q="--text $FP8_TEXT ${FP8_TOKENIZER:+--tokenizer $FP8_TOKENIZER} --context 1024 --width 768 --heads 12 --layers 12"
      q="$q --batch 8 --microbatches 2 --dtype bf16 --fuse-wgrad --steps ${FP8_STEPS:-1000} --lr 6e-4 --min-lr 6e-5"
      q="$q --warmup 100 --vocab-pad 64 --sample-tokens 0 --quiet"
      for f in bf16 delayed; do
        a=""; [ "$f" = bf16 ] || a="--fp8 $f"
        timeout "$(cap 3000)" ./tegraph run "$SRC/examples/gpt.lua" $q $a --log "$OUT/fp8-quality-$f.jsonl" > "$OUT/fp8-quality-$f.txt" 2>&1
        echo "$f: rc=$? last-100-step mean loss $(grep -o '"loss":[0-9.eE+-]*' "$OUT/fp8-quality-$f.jsonl" | cut -d: -f2 |
          tail -100 | awk '{ s += $1; n++ } END { if (n) printf "%.4f over %d steps", s / n, n }')"
      done | tee "$OUT/fp8-quality.txt"
    fi
    ;;
  gpt2)
    stage gpt2
    (cd "$PEERS" && timeout "$(cap 240)" "$PYTHON" gpt2.py ${GPT2_PEER_ARGS:---modes eager,compile --vocab-pad 64 --batch 16}) 2>&1 |
      tee "$OUT/torch_gpt2.txt"
    data
    for pad in ${GPT2_PADS:-64 1}; do
      timeout "$(cap 120)" ./tegraph run "$SRC/examples/gpt.lua" --data "$OUT/gpt2-tokens.bin" $GPT2 --steps 30 --vocab-pad "$pad" --samples 0 2>&1 |
        grep -E "gpt:|steady|host time|issued|rror"
    done | tee "$OUT/gpt2.txt"
    ;;
  lmhead)
    stage "fused LM head"
    timeout "$(cap 300)" make -j"$(nproc)" check TESTS=t/cuda-lm-head-fused-matches-cpu.lua > "$OUT/lmhead-check.log" 2>&1
    echo "t/cuda-lm-head-fused-matches-cpu.lua: $(grep -c '^ok' t/cuda-lm-head-fused-matches-cpu.log) ok, $(grep -c '^not ok' t/cuda-lm-head-fused-matches-cpu.log) not ok"
    grep -E "^not ok|^#" t/cuda-lm-head-fused-matches-cpu.log | head -20
    timeout "$(cap 120)" ./tegraph run "$SRC/examples/bench/lm_head.lua" --chunks "off,auto,${LMHEAD_CHUNKS_BENCH:-512,1024,2048,4096,8192}" 2>&1 |
      tee "$OUT/lmhead-bench.txt"
    data
    for c in off ${LMHEAD_CHUNKS:-auto 1024 2048 4096}; do
      case $c in off) f="--fused-lm-head 0" ;; auto) f="--fused-lm-head 1" ;; *) f="--fused-lm-head 1 --lm-head-chunk $c" ;; esac
      echo "--- $f"
      timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" --data "$OUT/gpt2-tokens.bin" $GPT2 --steps 30 $f 2>&1 |
        grep -E "steady|host time|issued|rror"
    done | tee "$OUT/lmhead.txt"
    ;;
  profile)
    stage "kernel-time profile (kprof)"
    sh "$SRC/examples/bench/gpu/kprof-build.sh" "$BUILD/kprof.so" "$(sed -n 's/^NVCC = //p' Makefile)" || continue
    data
    read -r pa pb <<< "${PROFILE_STEPS:-4 14}"
    [ "$pa" -lt "$pb" ] 2>/dev/null || { echo "run.sh: PROFILE_STEPS must be two step counts a < b (got '${PROFILE_STEPS}')"; continue; }
    for mode in ${PROFILE_MODES:-eager graph}; do
      case $mode in eager) f="" ;; graph) f="--graph" ;; *) echo "run.sh: PROFILE_MODES: unknown mode '$mode' (eager, graph)"; continue ;; esac
      G="--data $OUT/gpt2-tokens.bin $GPT2 --samples 0 $f $PROFILE_ARGS"
      echo "--- $mode: gpt.lua $G"
      rm -f "$OUT/profile-$mode-base.raw" "$OUT/profile-$mode.txt"
      timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" $G --steps "$pb" 2>&1 | grep -E "steady|issued|rror" | sed 's/^/without kprof: /'
      CUDA_INJECTION64_PATH=$BUILD/kprof.so KPROF_RAW=$OUT/profile-$mode-base.raw KPROF_OUT=/dev/null \
        timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" $G --steps "$pa" 2>&1 | grep -E "rror|kprof"
      CUDA_INJECTION64_PATH=$BUILD/kprof.so KPROF_BASELINE=$OUT/profile-$mode-base.raw KPROF_STEPS=$(( pb - pa )) KPROF_TOP=0 \
        KPROF_OUT=$OUT/profile-$mode.txt timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" $G --steps "$pb" 2>&1 |
        grep -E "steady|rror|kprof" | sed 's/^steady/with kprof: steady/'
      if [ -s "$OUT/profile-$mode.txt" ]; then
        sed -n "1,$(( 5 + ${PROFILE_TOP:-25} ))p" "$OUT/profile-$mode.txt"
        sed -n '/^ *total ms *% *calls  group$/,$p' "$OUT/profile-$mode.txt"
      else
        echo "run.sh: profile: no table in $OUT/profile-$mode.txt"
      fi
    done 2>&1 | tee "$OUT/profile.txt"
    ;;
  dp)
    stage dp
    data
    G="--data $OUT/gpt2-tokens.bin $GPT2 --steps 20"
    timeout "$(cap 120)" ./tegraph run "$SRC/examples/gpt.lua" $G 2>&1 | grep -E "gpt:|steady|trained|trace"
    timeout "$(cap 150)" ./tegraph run -n 2 "$SRC/examples/gpt.lua" $G 2>&1 | grep -E "gpt:|steady|trained|rank|trace|overlap"
    timeout "$(cap 150)" ./tegraph run -n 2 "$SRC/examples/gpt.lua" $G --trace "$OUT/gpt2-ddp-trace.json" --trace-steps 10:12 2>&1 |
      grep -E "gpt:|steady|trained|rank|trace|overlap"
    ;;
  graphs)
    stage "graph memory and full-iteration capture"
    timeout "$(cap 300)" ./tegraph run "$SRC/examples/bench/graph_memory.lua" --layers 12 --hidden 768 --heads 12 \
      --seq 1024 --batch 4 --microbatches 8 --stages 4 --dtype bf16 --delay 2>&1 | tee "$OUT/graph_memory.txt"
    for p in tiny small gpt2; do
      timeout "$(cap 200)" ./tegraph run "$SRC/examples/bench/graph_full_iteration.lua" --preset "$p" --iters 20 2>&1 | tail -5
    done | tee "$OUT/graph_full_iteration.txt"
    data
    for f in "" "--graph" "--graph full"; do
      echo "--- gpt.lua $f"
      timeout "$(cap 150)" ./tegraph run "$SRC/examples/gpt.lua" --data "$OUT/gpt2-tokens.bin" $GPT2 --steps 30 $f 2>&1 |
        grep -E "steady|host time|trained|rror"
    done | tee "$OUT/gpt2-graph-full.txt"
    ;;
  dpscale)
    stage "data-parallel scaling"
    BUCKETS=${DP_BUCKETS:-25} TEGRAPH=$BUILD/tegraph timeout "$(cap 2400)" sh "$SRC/examples/bench/dp_scaling.sh" \
      "$OUT/dp_scaling" 2>&1 | tee "$OUT/dp_scaling.txt"
    ;;
  faults)
    stage "a rank killed mid-step"
    TEGRAPH=$BUILD/tegraph timeout "$(cap 1200)" sh "$SRC/examples/bench/dp_faults.sh" "$OUT/dp_faults" 2>&1 |
      tee "$OUT/dp_faults.txt"
    ;;
  pipeline)
    stage "pipeline schedules, GPT-2-medium-like layers"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    Z="--layers 24 --width 1024 --heads 16 --tokens 1024 --batch 4 --microbatches 8 --steps 3 --dtype bf16"
    for g in "" --graphed; do
      timeout "$(cap 300)" ./tegraph run "$SRC/examples/zero_bubble.lua" --stages 4 $Z $g --svg "$OUT/zb1${g:+-graphed}" 2>&1 |
        tee "$OUT/pipeline-1gpu${g:+-graphed}.txt" | grep -E "^[A-Za-z0-9-]+: step|measured costs|device|bit-identical"
    done
    if [ "$ngpu" -ge 4 ]; then
      for g in "" --graphed; do
        timeout "$(cap 300)" ./tegraph run -n 4 "$SRC/examples/zero_bubble.lua" $Z $g --svg "$OUT/zb4${g:+-graphed}" 2>&1 |
          tee "$OUT/pipeline-4gpu${g:+-graphed}.txt"
      done
    else
      echo "run.sh: pipeline: $ngpu GPU(s): the 4-GPU schedules need 4"
    fi
    if [ "$ngpu" -ge 8 ]; then
      data
      P="--data $OUT/gpt2-tokens.bin --vocab 50257 --vocab-pad 64 --context 1024 --width 1024 --heads 16 --layers 24
        --batch 4 --microbatches 8 --dtype bf16 --quiet --samples 0 --warmup 2 --steps 20 --pipeline 4 --graph"
      for sch in 1f1b zb_h1; do
        timeout "$(cap 600)" ./tegraph run -n 8 "$SRC/examples/gpt.lua" $P --schedule $sch --trace "$OUT/pp4x2-$sch.json" \
          --trace-steps 10:12 2>&1 | tee "$OUT/pp4x2-$sch.txt" | grep -E "gpt:|pipeline|steady|rank 0|rror"
      done
    else
      echo "run.sh: pipeline: $ngpu GPU(s): the 4 x 2 graphed run needs 8"
    fi
    ;;
  replay)
    stage "graph replay"
    timeout "$(cap 90)" ./tegraph run "$SRC/examples/bench/graph_replay.lua" --iters 50 2>&1 | tail -5
    ;;
  allreduce)
    stage "all-reduce, 2 GPUs"
    timeout "$(cap 90)" ./tegraph run -n 2 "$SRC/examples/bench/allreduce.lua" 2>&1 | tail -3
    (cd "$PEERS" && timeout "$(cap 90)" "$TORCHRUN" --nproc_per_node=2 allreduce.py) 2>&1 | grep -v Warning | tail -2
    ;;
  optim)
    stage optim
    timeout "$(cap 120)" ./tegraph run "$SRC/examples/bench/optim.lua" --iters 20 2>&1 | tee "$OUT/optim.txt"
    ;;
  fork)
    stage "t/dist scripts under tegraph run -n 2"
    export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;$SRC/t/lib/?.lua;$SRC/t/dist/?.lua;;"
    for f in "$SRC"/t/dist/*.lua; do
      n=$(basename "$f" .lua)
      (cd "$SRC" && timeout "$(cap 90)" "$BUILD/tegraph" run -n 2 "$f" > "$OUT/fork-$n.log" 2>&1)
      r=$?
      echo "$n rc=$r ok=$(grep -cE '^(\[rank [0-9]+\] )?ok ' "$OUT/fork-$n.log") not-ok=$(grep -cE 'not ok' "$OUT/fork-$n.log") $(grep -m1 -E '^1\.\.|SKIP' "$OUT/fork-$n.log")"
      grep -E "not ok|rror" "$OUT/fork-$n.log" | head -5
    done
    ;;
  sanit)
    # Every CUDA test program under memcheck, then racecheck, the programs of one tool in parallel.
    # TG_DEBUG=alloc_direct (one cudaMalloc per tensor) lets memcheck see an overrun that the caching
    # allocator would hide inside a larger block; the allocator test keeps its default (it tests the cache).
    # racecheck leaves out the events test (cuBLAS f32 GEMMs only; hours under racecheck) and reports the
    # kernels it flags with their counts: cuBLAS's Hopper GEMM kernels show hazards on an ordering
    # (TMA / mbarrier pipelines) that racecheck does not model.
    SP="$(grep -ohE 't/cuda-[a-z0-9-]+\.t' "$SRC"/t/*.mk | sort -u) $EXTRA_SANIT"
    make -j"$(nproc)" $SP > "$OUT/sanit-build.log" 2>&1 || { tail -20 "$OUT/sanit-build.log"; continue; }
    for tool in memcheck racecheck; do
      stage "$tool"
      c=$(( $(left) / 2 - 20 )); [ "$tool" = racecheck ] && c=$(( $(left) - 30 ))
      [ "$c" -gt "${SANIT_CAP:-200}" ] && c=${SANIT_CAP:-200}
      for t in $SP; do
        n=$(basename "$t" .t); a=alloc_direct; [ "$n" = cuda-allocator-caches-blocks ] && a=
        opt="--leak-check no"; [ "$tool" = racecheck ] && opt="--racecheck-report hazard"
        [ "$tool" = racecheck ] && [ "$n" = cuda-events-and-trace-time-device-work ] && continue
        ( TG_DEBUG=$a timeout "$c" ./libtool --mode=execute compute-sanitizer --tool "$tool" $opt "$t" > "$OUT/$tool-$n.log" 2>&1
          echo "$tool $n rc=$? $(grep -c '^ok' "$OUT/$tool-$n.log") ok, $(grep -c '^not ok' "$OUT/$tool-$n.log") not ok; $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$OUT/$tool-$n.log" | tr '\n' ' ')" ) &
      done
      wait
      echo "$tool: kernels with reports (count):"
      grep -ohE "(at|in) [A-Za-z_][A-Za-z_0-9<>:,]*\+0x" "$OUT"/$tool-*.log | sed 's/+0x//' | sort | uniq -c | head
    done
    ;;
  suite)
    stage suite
    timeout "$(( $(left) - 10 ))" make -j"$(nproc)" check > "$OUT/suite.log" 2>&1; echo "make check rc=$?"
    grep -E "^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)" "$OUT/suite.log" | head -30
    cp test-suite.log "$OUT/test-suite.log" 2>/dev/null
    ;;
  esac
done
stage done
