#!/bin/sh
# dist-trace-shows-reduce-per-bucket.sh — a ddp trace on 2 ranks: a span per module backward, one per bucket all-reduce per step, a consistent overlap summary (t/dist/trace-ddp.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/trace-ddp.lua"
