#!/bin/bash
# Device run, second session: build, then the stages named on the command line, in order:
#   tests     CUDA kernel/module tests (incl. PyTorch comparison) + GPU optimizer/epilogue tests
#   launch    examples/bench/launch (eager host cost per kernel, layer by layer)
#   ops       examples/bench/ops.lua (per-kernel times; attention v3 and v2)
#   layers    torch_layer.py and layers.lua in the same call (ratios)
#   variants  ops.lua / layers.lua with the env switches of older paths (bias-grad epilogue, cross-entropy, embedding)
#   gpt2      torch_gpt2.py and gpt.lua at GPT-2-124M size on one GPU
#   dp        gpt.lua 124M: 1 GPU vs 2 GPUs (ddp) with a trace of steps 4-5 (needs nvidia-h200-x2)
#   replay    examples/bench/graph_replay.lua (host cost of eager vs graphed microbatches)
#   allreduce all-reduce bus bandwidth of a GPT-2-sized buffer, tegraph vs PyTorch (needs nvidia-h200-x2)
#   sanit     compute-sanitizer memcheck, then racecheck, on every CUDA test program (EXTRA_SANIT adds)
#   prof      kernel-time profiles (tools/device/kprof.c): tegraph eager / graphed and PyTorch eager, one layer config (PROF_CFG)
#   suite     the whole make check
# Usage (device tool, carry [".debs"]): bash tools/device/s2.sh tests launch ops layers
set -o pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
T0=$(date +%s); BUDGET=${BUDGET:-580}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l=$(left); echo $(( l < $1 ? l : $1 )); }
stage() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
nvidia-smi -L
autoreconf -fi >/dev/null 2>&1 || echo AUTORECONF FAILED
mkdir -p /tmp/b && cd /tmp/b
stage configure
$R/configure --with-cuda-arch=sm_90 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
stage make
make -j$(nproc) >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -60; exit 1; }
stage built
B=/tmp/b
for s in "$@"; do
  case $s in
  tests)
    stage tests
    T="t/cuda-nn-ops-match-cpu.t t/cuda-modules-match-cpu.t t/cuda-modules-match-torch.sh t/cuda-ops-match-cpu.t t/cuda-capture-replay.t t/cuda-allocator-caches-blocks.t t/attention-is-causal.t $EXTRA_TESTS"
    timeout $(cap 240) make -j16 check TESTS="$T" > /tmp/check.log 2>&1
    for t in $T; do l=${t%.*}.log; echo "$t: $(grep -c '^ok' $l) ok, $(grep -c '^not ok' $l) not ok $(grep -m1 -E '^1\.\.0' $l)"; done
    grep -E "^(FAIL|ERROR)" /tmp/check.log | head -20
    for t in $T; do echo "##### $t"; cat ${t%.*}.log; done > $OUT/tests.log 2>&1
    grep -hE "^not ok|^Bail" t/*.log | head -40
    ;;
  launch)
    stage launch
    timeout $(cap 60) ./examples/bench/launch 2>&1 | tee $OUT/launch.txt
    ;;
  ops)
    stage ops
    timeout $(cap 90) ./tegraph run $R/examples/bench/ops.lua 2>&1 | tee $OUT/ops.txt
    TG_CUDA_ATTENTION=v2 timeout $(cap 40) ./tegraph run $R/examples/bench/ops.lua --only attention 2>&1 | tee $OUT/ops-v2.txt
    ;;
  layers)
    stage layers
    # TORCH_MODES="eager graphed": torch_layer.py without its eager+hooks runs (a third of its time)
    TM=$(python3 -c "import sys; print(', '.join('\"%s\"' % m for m in sys.argv[1:]))" ${TORCH_MODES:-eager eager+hooks graphed})
    (cd $R/.debs/bench && timeout $(cap 150) python3 -c "
exec(open('torch_layer.py').read().replace('for m in [\"eager\", \"eager+hooks\", \"graphed\"]', 'for m in [$TM]'))" > $OUT/torch_layer.out 2>&1; echo "torch_layer rc=$?")
    grep -v "^{" $OUT/torch_layer.out | head; grep "^{" $OUT/torch_layer.out
    timeout $(cap 170) ./tegraph run $R/examples/bench/layers.lua --torch $OUT/torch_layer.out 2>&1 | tee $OUT/layers.txt
    ;;
  variants)
    # the switches that keep an older path, against the default, in one call (VARIANT_LAYERS: layer configs too)
    stage "variants"
    IFS=';' read -ra VX <<< "${VARIANTS_EXTRA:-}" # more "ENV=VALUE|ops.lua flags" items, ';'-separated
    for v in "TG_CUDA_BGRAD=unfused|--only gemm" "TG_CUDA_BGRAD=fused|--only gemm" \
             "TG_CUDA_CROSS_ENTROPY=multipass|--cfg gpt2 --only cross_entropy" \
             "TG_CUDA_EMBEDDING=rows|--cfg gpt2 --only embedding" "${VX[@]}"; do
      echo "## ${v%%|*} ops.lua ${v#*|}"
      env ${v%%|*} timeout $(cap 40) ./tegraph run $R/examples/bench/ops.lua ${v#*|} 2>&1 | tail -n +2 | tee -a $OUT/variants.txt
    done
    for c in ${VARIANT_LAYERS:-gpt2-124M-like}; do
      for e in TG_CUDA_BGRAD=unfused TG_CUDA_BGRAD=fused; do
        echo "## $e layers.lua $c"
        env $e timeout $(cap 60) ./tegraph run $R/examples/bench/layers.lua --only $c --gemm 0 ${OUT:+--torch $OUT/torch_layer.out} 2>&1 | tail -n +3 | tee -a $OUT/variants.txt
      done
    done
    ;;
  gpt2)
    stage gpt2
    (cd $R/.debs/bench && timeout $(cap 120) python3 torch_gpt2.py 2>&1 | tail -8 | tee $OUT/torch_gpt2.out)
    ./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
    for pad in ${GPT2_PADS:-64 1}; do
      timeout $(cap 90) ./tegraph run $R/examples/gpt.lua --data /tmp/d.bin --vocab 50257 --vocab-pad $pad --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 30 --warmup 2 --dtype bf16 --fuse-wgrad --quiet 2>&1 | tail -6
    done
    ;;
  dp)
    stage dp
    [ -f /tmp/d.bin ] || ./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
    G="--data /tmp/d.bin --vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 20 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"
    timeout $(cap 90) ./tegraph run $R/examples/gpt.lua $G 2>&1 | grep -E "gpt:|steady|trained|trace"
    timeout $(cap 120) ./tegraph run -n 2 $R/examples/gpt.lua $G 2>&1 | grep -E "gpt:|steady|trained|rank|trace|overlap"
    timeout $(cap 120) ./tegraph run -n 2 $R/examples/gpt.lua $G --trace $OUT/gpt124m-trace.json --trace-steps 10:12 2>&1 | grep -E "gpt:|steady|trained|rank|trace|overlap"
    ;;
  replay)
    stage "graph replay overhead"
    timeout $(cap 60) ./tegraph run $R/examples/bench/graph_replay.lua --iters 50 2>&1 | tail -5
    ;;
  allreduce)
    stage "all-reduce bandwidth, 2 GPUs"
    timeout $(cap 60) ./tegraph run -n 2 $R/examples/bench/allreduce.lua 2>&1 | tail -3
    timeout $(cap 60) torchrun --nproc_per_node=2 $R/tools/device/torch_allreduce.py 2>&1 | grep -v Warning | tail -2
    ;;
  optim)
    stage optim
    timeout $(cap 90) ./tegraph run $R/examples/bench/optim.lua --iters 20 2>&1 | tee $OUT/optim.txt
    ;;
  fork)
    stage "t/dist scripts under tegraph run -n 2 (NCCL only)"
    export LUA_PATH="$R/lua/?.lua;$R/lua/?/init.lua;$R/t/lib/?.lua;$R/t/dist/?.lua;;" TEGRAPH_LUA_PATH=$R/lua
    for f in $R/t/dist/*.lua; do (cd $R && timeout $(cap 60) /tmp/b/tegraph run -n 2 $f > /tmp/f.log 2>&1; r=$?; cp /tmp/f.log $OUT/fork-$(basename $f .lua).log; echo "## $(basename $f) rc=$r ok=$(grep -cE '^(\[rank [0-9]+\] )?ok ' /tmp/f.log) notok=$(grep -cE 'not ok' /tmp/f.log) $(grep -m1 -E '^1\.\.|SKIP' /tmp/f.log)"; grep -E "not ok|rror" /tmp/f.log | head -5); done
    ;;
  sanit)
    # Every CUDA test program under memcheck, then under racecheck, all programs of a tool in
    # parallel. TG_CUDA_ALLOC=direct (a cudaMalloc per tensor) lets memcheck see an overrun of a
    # tensor that the caching allocator would hide inside a larger block; the allocator test
    # itself runs with its default (it tests the cache). racecheck skips the events test (nothing but
    # cuBLAS f32 GEMMs; hours under racecheck). It reports WAR hazards inside cuBLAS's nvjet kernels (Hopper
    # TMA / mbarrier pipelines, an ordering racecheck does not model); excluding them with
    # --kernel-name-exclude made the sanitizer itself fail ("failed to handle a hardware exception"), so
    # the reports are counted per kernel instead.
    SP="t/cuda-ops-match-cpu.t t/cuda-nn-ops-match-cpu.t t/cuda-modules-match-cpu.t t/cuda-capture-replay.t t/cuda-allocator-caches-blocks.t t/cuda-events-and-trace-time-device-work.t $EXTRA_SANIT"
    make -j$(nproc) $SP > /tmp/sanit-build.log 2>&1 || { tail -20 /tmp/sanit-build.log; continue; } # when no tests stage built them
    for tool in memcheck racecheck; do
      stage $tool
      c=$(( $(left) / 2 - 20 )); [ $tool = racecheck ] && c=$(( $(left) - 30 )); [ $c -gt ${SANIT_CAP:-200} ] && c=${SANIT_CAP:-200}
      for t in $SP; do
        n=$(basename $t .t); a=direct; [ $n = cuda-allocator-caches-blocks ] && a=
        opt="--leak-check no"; [ $tool = racecheck ] && opt="--racecheck-report hazard"
        [ $tool = racecheck ] && [ $n = cuda-events-and-trace-time-device-work ] && continue
        ( TG_CUDA_ALLOC=$a TG_TEST_SEED=5 timeout $c ./libtool --mode=execute compute-sanitizer --tool $tool $opt $t > /tmp/$tool-$n.log 2>&1
          echo "$tool $n rc=$? $(grep -c '^ok' /tmp/$tool-$n.log) ok, $(grep -c '^not ok' /tmp/$tool-$n.log) not ok; $(grep -hE '(ERROR|RACECHECK) SUMMARY' /tmp/$tool-$n.log | tr '\n' ' ')" ) &
      done
      wait
      cat /tmp/$tool-*.log > $OUT/$tool.log
      echo "$tool: kernels with reports (count):"; grep -ohE "(at|in) [A-Za-z_][A-Za-z_0-9<>:,]*\+0x" /tmp/$tool-*.log | sed 's/+0x//' | sort | uniq -c | head
      grep -h -B2 -A12 -E "^========= (Invalid|Error|Race|Warning)" /tmp/$tool-*.log | head -60
    done
    ;;
  prof)
    # Kernel-time profiles (tools/device/kprof.c through CUPTI; the image has no nsys) of 25 steps of one
    # layer-stack configuration (PROF_CFG, default gpt2): tegraph eager and graphed, PyTorch eager.
    CUPTI=$(find /usr/local/cuda*/ /usr/lib /usr/local/lib -name 'libcupti.so*' 2>/dev/null | head -1)
    [ -n "$CUPTI" ] || { echo "no libcupti"; continue; }
    gcc -shared -fPIC -O2 -I/usr/local/cuda/include $R/tools/device/kprof.c -o /tmp/kprof.so $CUPTI || continue
    export LD_LIBRARY_PATH=$(dirname $CUPTI):$LD_LIBRARY_PATH
    PC=${PROF_CFG:-gpt2-124M-like}
    for m in ${PROF_MODES:-eager graphed}; do
      stage "prof tegraph $m $PC"
      KPROF_OUT=$OUT/prof-$m.txt LD_PRELOAD=/tmp/kprof.so timeout $(cap 90) ./tegraph run $R/examples/bench/layers.lua --only $PC --modes $m --iters 10 --gemm 0 | tail -1
      head -${PROF_TOP:-28} $OUT/prof-$m.txt | c++filt | cut -c1-170
    done
    stage "prof torch eager $PC"
    (cd $R/.debs/bench && KPROF_OUT=$OUT/prof-torch.txt LD_PRELOAD=/tmp/kprof.so timeout $(cap 120) python3 -c "
src=open('torch_layer.py').read().split('N = 8192')[0].replace('iters=30', 'iters=10')
src=src.replace('for m in [\"eager\", \"eager+hooks\", \"graphed\"]', 'for m in [\"eager\"]')
exec(src.replace('cfgs = [', 'cfgs = [c for c in [').replace(']\nres = []', '] if c[\"name\"] == \"$PC\"]\nres = []', 1))" 2>&1 | tail -1)
    head -${PROF_TOP:-28} $OUT/prof-torch.txt | c++filt | cut -c1-170
    ;;
  suite)
    stage suite
    timeout $(( $(left) - 10 )) make -j16 check > /tmp/suite.log 2>&1; echo "make check rc=$?"
    grep -E "^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)" /tmp/suite.log | head -30; cp test-suite.log $OUT/suite.log 2>/dev/null
    ;;
  esac
done
stage done
