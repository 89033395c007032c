#!/bin/sh
# dist-ddp-matches-single-process.sh — ddp gradients equal the single-process gradient, hooks once per microbatch (t/dist/ddp-matches-single-process.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/ddp-matches-single-process.lua"
