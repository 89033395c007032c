#!/bin/bash
R=$PWD
export NCCL_NVLS_ENABLE=0
for f in .debs/*.deb; do dpkg -x $f /; done
command -v pkg-config >/dev/null || for f in .debs/opt/*.deb; do dpkg -x $f /; done
ldconfig
if [ ! -x /tmp/b/tegraph ]; then
  autoreconf -fi >/dev/null 2>&1; mkdir -p /tmp/b && cd /tmp/b && $R/configure --with-cuda-arch=sm_90 > /tmp/build.log 2>&1 && make -j32 >> /tmp/build.log 2>&1 || { grep -A3 error /tmp/build.log | head; exit 1; }
else
  cd /tmp/b && make -j32 > /tmp/build.log 2>&1 || { grep -A3 error /tmp/build.log | head; exit 1; }
fi
cd $R
export LUA_PATH="$R/lua/?.lua;$R/lua/?/init.lua;$R/t/lib/?.lua;$R/t/dist/?.lua;;" TEGRAPH_LUA_PATH=$R/lua
for s in pipeline-matches-single-process comm-ops ddp-matches-single-process zero1-matches-ddp; do
  timeout 120 /tmp/b/tegraph run -n 2 t/dist/$s.lua > /tmp/$s.out 2>&1; rc=$?
  echo "== tegraph run -n 2 t/dist/$s.lua: rc=$rc, $(grep -c '^ok' /tmp/$s.out) ok, $(grep -c '^not ok' /tmp/$s.out) not ok"
  grep -E "^not ok|rank [01]\]" /tmp/$s.out | head -8
done
