#!/bin/bash
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
stage "dist + graph + sched tests on 2 GPUs"
timeout 200 make -j8 check TESTS="$(cd $R && ls t/dist-*.sh t/dist-*.lua t/graph-*.lua t/sched-*.lua t/sched-*.sh t/cuda-*.c | sed "s/\.c$/.t/" 2>/dev/null | tr '\n' ' ')" > /tmp/check.log 2>&1; echo "rc=$?"
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)" test-suite.log; grep -E "^(FAIL|ERROR|SKIP)" test-suite.log | head -30
cp test-suite.log $OUT/
grep -A40 "^# --- ok:" t/dist-failing-rank-stops-the-job.log | head -60
stage "pipeline over tegraph run -n 2 (NCCL only)"
cd $R && timeout 60 /tmp/b/tegraph run -n 2 t/dist/pipeline-matches-single-process.lua 2>&1 | grep -E "^(not )?ok|rank|Error|error" | head -30
stage done; exit 0
./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
G="--data /tmp/d.bin --vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 30 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"
timeout 100 ./tegraph run $R/examples/gpt.lua $G 2>&1 | grep -E "trained"
timeout 100 ./tegraph run -n 2 $R/examples/gpt.lua $G 2>&1 | grep -E "trained|rank"
stage done
