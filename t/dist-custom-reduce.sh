#!/bin/sh
# dist-custom-reduce.sh — examples/custom_reduce.lua (bf16 + error feedback, local SGD, next to ddp) passes its own checks on 2 ranks.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
echo "1..4"
bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$SRCDIR/examples/custom_reduce.lua" >"$tmp/out" 2>&1
rc=$?
ok $rc "the example exits 0 on 2 ranks"
has "$tmp/out" "on 2 rank(s)" && ! has "$tmp/out" "FAIL"
ok $? "no check of the example failed"
[ "$(grep -c '^ok: ' "$tmp/out")" -eq 7 ]
ok $? "all 7 checks ran (ddp trains; bf16+ef agrees across ranks and follows ddp; local sgd syncs every K steps, drifts between)"
has "$tmp/out" "local sgd: the ranks drift apart between averaging steps"
ok $? "the multi-rank check of local sgd ran"
sed 's/^/# /' "$tmp/out"
finish
