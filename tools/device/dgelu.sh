#!/bin/bash
# device run for the dgelu helper: build, CUDA gemm-epilogue (DGELU fused and forced unfused), modules and capture
# tests, the fc2 dgrad +dgelu bench rows against the plain fc2 dgrad + gelu_backward.
set -o pipefail
R=$PWD
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
autoreconf -fi >/dev/null 2>&1 || echo AUTORECONF FAILED
mkdir -p /tmp/b && cd /tmp/b
$R/configure -q --with-cuda-arch=sm_90 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
make -j16 >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -60; exit 1; }
make -j16 t/cuda-ops-match-cpu.t t/cuda-modules-match-cpu.t t/cuda-capture-replay.t >> $OUT/build.log 2>&1 || exit 1
echo "=== ops"; TG_TEST_SEED=7 timeout 300 ./t/cuda-ops-match-cpu.t > $OUT/ops.log 2>&1; echo rc=$?
grep -E "^not ok" $OUT/ops.log | head -40; grep -c "^ok" $OUT/ops.log
grep -E "gemm dgelu.*relative L2" $OUT/ops.log | head -40
echo "=== modules"; timeout 200 ./t/cuda-modules-match-cpu.t > $OUT/mod.log 2>&1; echo rc=$?
grep -E "^not ok" $OUT/mod.log | head; grep -c "^ok" $OUT/mod.log; grep -E "MLP\(gelu\)|TransformerLayer" $OUT/mod.log | head -20
echo "=== capture"; timeout 60 ./t/cuda-capture-replay.t > $OUT/cap.log 2>&1; echo rc=$?; grep -E "^not ok" $OUT/cap.log | head
# --only filters blocks by substring of their name ("gemm", "gelu"), then rows
echo "=== bench"; timeout 150 ./tegraph run $R/examples/bench/ops.lua --only gemm 2>&1
timeout 60 ./tegraph run $R/examples/bench/ops.lua --only gelu 2>&1
echo "--- forced unfused (GEMM + gelu_backward kernel)"
TG_CUDA_EPILOGUE=unfused timeout 150 ./tegraph run $R/examples/bench/ops.lua --only gemm 2>&1 | grep -E "fc2|fused"
