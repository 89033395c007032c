#!/bin/sh
# dist-rank-exit-with-a-request-in-flight.sh — os.exit() on a rank while its async all_reduce is in flight: the exit
# completes the request before the communicators are freed (the job ends 0 when the peer joins it), and when the peer
# never joins, the rank says so and leaves MPI to the launcher: the job ends non-zero within the comm timeout, never
# with a segfault in the exit-time finaliser.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-exit.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
LIMIT=30 # seconds each job may take (the comm timeout is 3 s)

cat >"$tmp/job.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 3 }
local r = comm.rank()
local t = tg.ones({ 1 << 16 })
local joined = arg[1] == "joined"
-- one all_reduce both ranks join first: the cross-rank argument check of the first all_reduce happens there
comm.all_reduce(tg.ones({ 1 }))
if joined or r == 0 then
  local h = comm.all_reduce(t, { async = true })
  if r == 0 then os.exit(0) end -- the request is still in flight
  h:wait()
  print("rank " .. r .. " sum " .. t:totable()[1])
else
  print("rank " .. r .. " never joins")
end
LUA

run() {
    t0=$(date +%s)
    bounded 90 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/job.lua" "$1" >"$tmp/$1.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..7"
run joined
ok $rc "the peer joins the all_reduce: the job exits 0 (rc $rc)"
has "$tmp/joined.out" "rank 1 sum 2"
ok $? "the peer's all_reduce completed with the exited rank's contribution"
! has "$tmp/joined.out" "Segmentation fault" && ! has "$tmp/joined.out" "signal"
ok $? "no crash in the exit-time finaliser"

run alone
ok $((rc == 0)) "the peer never joins: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "the peer never joins: the job ends within $LIMIT s (took $secs s)"
grep '^\[rank 0\] ' "$tmp/alone.out" | grep -q 'tegraph: rank 0 exits with a request that did not complete: all_reduce of 65536 f32'
ok $? "the exiting rank names the request that did not complete"
! has "$tmp/alone.out" "Segmentation fault" && ! has "$tmp/alone.out" "signal 11"
ok $? "no crash in the exit-time finaliser"

for f in joined alone; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -20
done
finish
