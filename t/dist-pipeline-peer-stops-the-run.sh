#!/bin/sh
# dist-pipeline-peer-stops-the-run.sh — when the peer stage is stuck or killed mid-schedule, the other rank's receive fails within the comm timeout, naming the transfer, and the job ends non-zero (no hang); a plan that deadlocks is refused on every rank before it runs, naming the action.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
LIMIT=30 # seconds each job may take (the comm timeout is 3 s)

# run CASE: sets rc, secs; output in $tmp/CASE.out
run() {
    t0=$(date +%s)
    bounded 90 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$SRCDIR/t/dist/pipeline-peer-stops.lua" "$1" >"$tmp/$1.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..11"
run none
ok $rc "a healthy 2-stage run exits 0"
has "$tmp/none.out" "stage 1 finished" && has "$tmp/none.out" "stage 2 finished"
ok $? "both stages finish"

run stuck
ok $((rc == 0)) "a stuck peer stage: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "a stuck peer stage: the job ends within $LIMIT s (took $secs s)"
grep '^\[rank 0\] ' "$tmp/stuck.out" | grep 'stage 1 action [0-9]* (recv_bwd chunk 2 mb [0-9]* from stage 2)' | grep -q 'did not complete within 3 s'
ok $? "a stuck peer stage: rank 0 names the receive it waited at and the timeout"

run kill
ok $((rc == 0)) "a killed peer stage: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "a killed peer stage: the job ends within $LIMIT s (took $secs s)"

for c in cycle sendsend; do
    run $c
    ok $((rc == 0)) "a deadlocking plan ($c): the job exits non-zero (rc $rc)"
    n0=$(grep -c '^\[rank 0\] .*schedule\.execute: stage 1 action [0-9]* (.*): deadlock (blocking sends)' "$tmp/$c.out")
    n1=$(grep -c '^\[rank 1\] .*schedule\.execute: stage 1 action [0-9]* (.*): deadlock (blocking sends)' "$tmp/$c.out")
    ok $((n0 == 0 || n1 == 0)) "a deadlocking plan ($c): both ranks refuse it before running, naming the action (not the comm timeout)"
done

for f in none stuck kill cycle sendsend; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -20
done
finish
