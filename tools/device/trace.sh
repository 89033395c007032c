#!/bin/bash
# trace.sh (nvidia-h200-x2) — events and traces on GPUs: the event/trace tests, the NCCL dist tests (the comm stream now
# orders itself with backend events), then GPT-2 124M data parallel on 2 GPUs with a trace of steps 10..12 per rank.
set -o pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
T0=$(date +%s); stage() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
autoreconf -fi >/dev/null 2>&1 || echo AUTORECONF FAILED
mkdir -p /tmp/b && cd /tmp/b
$R/configure --with-cuda-arch=sm_90 > $OUT/build.log 2>&1 && make -j32 >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -40; exit 1; }
stage "event + trace tests, dist tests (mpirun: MPI + NCCL)"
timeout 240 make -j8 check TESTS="t/event-times-stream-work-and-captured-replays.t t/cuda-events-and-trace-time-device-work.t t/trace-has-a-span-per-module-phase.lua $(cd $R && ls t/dist-*.sh | tr '\n' ' ') t/cuda-capture-replay.t" > /tmp/check.log 2>&1; echo "rc=$?"
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)" test-suite.log; grep -E "^(FAIL|ERROR|SKIP)" test-suite.log | head -30
cp test-suite.log t/cuda-events-and-trace-time-device-work.log t/trace-has-a-span-per-module-phase.log t/dist-trace-shows-reduce-per-bucket.log $OUT/ 2>/dev/null
stage "t/dist/trace-ddp.lua under tegraph run -n 2 (NCCL only)"
cd $R && timeout 60 /tmp/b/tegraph run -n 2 t/dist/trace-ddp.lua 2>&1 | grep -E "^(not )?ok|rank|rror" | head -30
stage "GPT-2 124M, 2 GPUs, ddp, trace of steps 10..12"
cd /tmp/b && ./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
G="--data /tmp/d.bin --vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 40 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"
timeout 150 ./tegraph run -n 2 $R/examples/gpt.lua $G --trace $OUT/gpt124m-trace.json --trace-steps 10:12 2>&1 | grep -E "trace|trained|steady|rank|rror"
stage "the same without --trace (tracing off must not cost throughput)"
timeout 150 ./tegraph run -n 2 $R/examples/gpt.lua $G 2>&1 | grep -E "trained|steady|rror"
ls -la $OUT; stage done; exit 0
