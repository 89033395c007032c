#!/bin/sh
# dist-fp8-amax-reduce-makes-the-scales-agree.sh — tg.fp8.amax_reduce gives every rank the same FP8 scales (t/dist/fp8-amax-reduce.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/fp8-amax-reduce.lua"
