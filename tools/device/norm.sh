#!/bin/bash
# device run for the norm helper: build, CUDA norm ops/modules tests (ptxas spills), norm bench rows.
set -o pipefail
R=$PWD
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
autoreconf -fi >/dev/null 2>&1 || echo AUTORECONF FAILED
mkdir -p /tmp/b && cd /tmp/b
$R/configure -q --with-cuda-arch=sm_90 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
make -j16 >> $OUT/build.log 2>&1 || { grep -E -A3 "error" $OUT/build.log | head -60; exit 1; }
make -j16 t/cuda-nn-ops-match-cpu.t t/cuda-modules-match-cpu.t >> $OUT/build.log 2>&1 || exit 1
echo "=== nn ops"; timeout 300 ./t/cuda-nn-ops-match-cpu.t > $OUT/nnops.log 2>&1; echo rc=$?
grep -E "^not ok" $OUT/nnops.log | head -40; grep -c "^ok" $OUT/nnops.log
echo "=== modules"; timeout 200 ./t/cuda-modules-match-cpu.t > $OUT/mod.log 2>&1; echo rc=$?
grep -E "^not ok" $OUT/mod.log | head; grep -c "^ok" $OUT/mod.log
echo "=== bench"; timeout 120 ./tegraph run $R/examples/bench/ops.lua --only norm 2>&1
