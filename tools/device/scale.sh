#!/bin/bash
R=$PWD
export NCCL_NVLS_ENABLE=0
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
autoreconf -fi >/dev/null 2>&1; mkdir -p /tmp/b && cd /tmp/b && $R/configure --with-cuda-arch=sm_90 > /tmp/build.log 2>&1 && make -j32 >> /tmp/build.log 2>&1 || { grep -A3 error /tmp/build.log | head; exit 1; }
./tegraph run $R/examples/gpt.lua --make-data /tmp/d.bin --tokens 2000000 | tail -1
G="--data /tmp/d.bin --vocab 50257 --context 1024 --width 768 --heads 12 --layers 12 --batch 8 --microbatches 2 --steps 40 --warmup 2 --dtype bf16 --fuse-wgrad --quiet"
for i in 1 2; do
timeout 100 ./tegraph run $R/examples/gpt.lua $G 2>&1 | grep -E "trained|steady"
timeout 100 ./tegraph run -n 2 $R/examples/gpt.lua $G 2>&1 | grep -E "trained|steady|rank"
done
