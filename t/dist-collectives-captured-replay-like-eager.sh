#!/bin/sh
# dist-collectives-captured-replay-like-eager.sh — collectives captured on the CPU replay like eager calls on 2
# ranks (t/dist/comm-capture.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/comm-capture.lua"
