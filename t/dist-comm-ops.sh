#!/bin/sh
# dist-comm-ops.sh — every comm op gives the right values on 2 ranks (t/dist/comm-ops.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/comm-ops.lua"
