#!/bin/bash
# lead's device run: full suite on GPU (graphs, dist over 2 GPUs), replay overhead, DP scaling, all-reduce bandwidth.
set -o pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
T0=$(date +%s); BUDGET=${BUDGET:-570}
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
grep -A12 "configured" $OUT/build.log | head -12
stage make
make -j32 >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -60; exit 1; }
./tegraph info 2>&1 | head -12
stage "graph replay overhead (cuda:0)"
timeout $(cap 60) ./tegraph run $R/examples/bench/graph_replay.lua --iters 50 2>&1 | tail -5
stage "all-reduce bandwidth, 2 GPUs"
timeout $(cap 60) ./tegraph run -n 2 $R/examples/bench/allreduce.lua 2>&1 | tail -3
timeout $(cap 60) torchrun --nproc_per_node=2 $R/tools/device/torch_allreduce.py 2>&1 | grep -v Warning | tail -2
stage "gpt 124M-size: 1 GPU vs 2 GPUs (ddp)"
./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
G="--data /tmp/d.bin --vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 12 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"
timeout $(cap 90) ./tegraph run $R/examples/gpt.lua $G 2>&1 | grep -E "gpt:|device|trained"
timeout $(cap 90) ./tegraph run -n 2 $R/examples/gpt.lua $G 2>&1 | grep -E "gpt:|device|trained|rank"
stage "full suite on the GPU machine (default device cuda:0; mpirun tests over 2 GPUs)"
timeout $(cap 330) make -j16 check > /tmp/check.log 2>&1; echo "make check rc=$?"
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)" test-suite.log; grep -E "^(FAIL|ERROR|SKIP)" test-suite.log | head -30
cp test-suite.log $OUT/ 2>/dev/null; for f in t/graph-*.log t/dist-*.log t/sched-*.log; do cat $f; done > $OUT/graph-dist-sched.log 2>/dev/null
grep -E "^not ok" t/graph-*.log t/dist-*.log | head -20
stage done
