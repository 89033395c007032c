#!/bin/sh
# dist-dp-faults-bench-reports-the-lost-rank.sh — examples/bench/dp_faults.sh on 2 CPU ranks (a tiny gpt.lua): rank 1 is
# SIGKILLed mid-run and the row reports a non-zero exit within the limit, an error naming rank 1 and a complete last
# checkpoint, with exit 0; a rank count that leaves no rank 1 to kill exits 2.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
B="$SRCDIR/examples/bench/dp_faults.sh"
TINY="--width 16 --layers 1 --heads 2 --batch 4 --context 16 --vocab 64 --dtype f32"
echo "1..4"
RANKS=2 LAUNCHERS=mpirun MODES=ddp KILL_AT=4 SAVE_EVERY=2 TEGRAPH="$TEGRAPH" MPIRUN="$TG_MPIRUN --oversubscribe" \
    bounded 300 sh "$B" "$tmp/o" $TINY >"$tmp/out" 2>&1
ok $? "dp_faults.sh exits 0"
row=$(awk '$1 == 2 && $2 == "mpirun" && $3 == "ddp"' "$tmp/out" | tail -1)
echo "$row" | awk '$4 + 0 <= 60 && $5 != 0 && $6 == "yes" && $7 == "complete" && $NF == "ok" { f = 1 } END { exit !f }'
ok $? "the row: stopped within 60 s, non-zero exit, an error naming rank 1, a complete checkpoint ($row)"
grep -q "process rank 1 .*exited on signal 9" "$tmp/o/n2-mpirun-ddp/out"
ok $? "the job's own output names rank 1 as killed by signal 9"
RANKS=1 TEGRAPH="$TEGRAPH" sh "$B" "$tmp/bad" >"$tmp/bad.out" 2>&1
rc=$?
ok $([ $rc -eq 2 ] && grep -q "RANKS: integers of at least 2" "$tmp/bad.out"; echo $?) "RANKS=1 exits 2 (rc $rc)"
sed 's/^/# /' "$tmp/out"
finish
