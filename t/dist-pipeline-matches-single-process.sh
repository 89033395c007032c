#!/bin/sh
# dist-pipeline-matches-single-process.sh — pipeline stages on 2 ranks give each rank's parameters the gradients of the single-process run of the same plan, hooks once per microbatch; mismatched plans fail clearly (t/dist/pipeline-matches-single-process.lua under mpirun).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
mpirun_tap 2 "$SRCDIR/t/dist/pipeline-matches-single-process.lua"
