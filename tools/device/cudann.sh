#!/bin/bash
# device run for the CUDA transformer-kernels helper (not part of the project): build, tests, benches, sanitizers.
set -o pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
BUDGET=${BUDGET:-575}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
stage() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
nvidia-smi -L; nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader; uname -r
if command -v autoreconf >/dev/null && command -v automake >/dev/null; then
  autoreconf -fi >/dev/null 2>&1 || echo AUTORECONF FAILED
else
  touch aclocal.m4; sleep 1; touch configure Makefile.in config.h.in
fi
mkdir -p /tmp/b && cd /tmp/b
stage configure
$R/configure --with-cuda-arch=sm_90 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
stage make
make -j16 >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -60; exit 1; }
./tegraph info 2>&1 | head -20

stage tests
MINE="t/cuda-nn-ops-match-cpu.t t/cuda-modules-match-cpu.t t/cuda-modules-match-torch.sh t/cuda-ops-match-cpu.t t/cuda-capture-replay.t t/cuda-allocator-caches-blocks.t"
timeout $(( $(left) < 200 ? $(left) : 200 )) make -j16 check TESTS="$MINE" > /tmp/check.log 2>&1
grep -E "^(PASS|FAIL|SKIP|ERROR|XFAIL)" /tmp/check.log
for t in $MINE; do l=${t%.*}.log; echo "##### $l"; cat $l; done > $OUT/tests.log 2>&1
grep -hE "^not ok|^Bail|^# (random|tegraph device)" t/cuda-*.log | head -40
grep -h "relative L2" t/cuda-nn-ops-match-cpu.log | grep -E "attention|embedding_backward" | sed 's/^ok [0-9]* - //' | head -40

stage benches
cd $R/.debs/bench
timeout $(( $(left) < 150 ? $(left) : 150 )) python3 torch_layer.py > $OUT/torch_layer.out 2>&1; echo "torch_layer rc=$?"
cat $OUT/torch_layer.out
cd /tmp/b
timeout $(( $(left) < 170 ? $(left) : 170 )) ./tegraph run $R/examples/bench/layers.lua --torch $OUT/torch_layer.out 2>&1 | tee $OUT/bench.txt

stage gpt.lua
timeout 45 ./tegraph run $R/examples/gpt.lua --dtype bf16 --steps 100 --every 50 2>&1 | tail -12

stage memcheck
if [ $(left) -gt 40 ]; then
  TG_CUDA_ALLOC=direct TG_TEST_SEED=5 timeout $(( $(left) < 110 ? $(left) - 10 : 100 )) compute-sanitizer --tool memcheck --leak-check no t/cuda-nn-ops-match-cpu.t > /tmp/mc.log 2>&1
  echo "memcheck rc=$? $(grep -c '^ok' /tmp/mc.log) ok, $(grep -c '^not ok' /tmp/mc.log) not ok; $(grep -E 'ERROR SUMMARY' /tmp/mc.log)"
  tail -5 /tmp/mc.log; cat /tmp/mc.log > $OUT/sanitizer.log
fi
stage racecheck
if [ $(left) -gt 40 ]; then
  TG_NN_OPS=attention,norms,cross_entropy TG_TEST_SEED=5 timeout $(( $(left) < 90 ? $(left) - 10 : 80 )) compute-sanitizer --tool racecheck t/cuda-nn-ops-match-cpu.t > /tmp/rc.log 2>&1
  echo "racecheck rc=$? $(grep -c '^ok' /tmp/rc.log) ok, $(grep -c '^not ok' /tmp/rc.log) not ok; $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' /tmp/rc.log)"
  tail -5 /tmp/rc.log; cat /tmp/rc.log >> $OUT/sanitizer.log
fi
stage suite
if [ $(left) -gt 30 ]; then
  timeout $(( $(left) - 5 )) make -j16 check > /tmp/suite.log 2>&1
  grep -E "^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)" /tmp/suite.log | head -30; cp test-suite.log $OUT/suite.log 2>/dev/null
fi
stage done
