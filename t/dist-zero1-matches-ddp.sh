#!/bin/sh
# dist-zero1-matches-ddp.sh — zero1 leaves the same parameters as ddp + AdamW (t/dist/zero1-matches-ddp.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/zero1-matches-ddp.lua"
