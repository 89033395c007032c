#!/bin/sh
# dist-captured-collective-replayed-alone-fails.sh — a rank that replays a graph holding a captured all_reduce while
# the other rank does not replay it fails loudly, naming the replayed collective: within seconds when the other
# rank's script ended (the departed-peer path), at the comm timeout when the other rank is busy elsewhere; the job
# ends non-zero in both cases instead of hanging.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi

cat >"$tmp/alone.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = tonumber(arg[2]) }
local r = comm.rank()
local x = tg.ones({ 4 }, { device = "cpu" })
local g = tg.stream.capture(function() comm.all_reduce(x) end, { device = "cpu" })
g:replay() -- both ranks: 2 each
print(string.format("rank %d: first replay %g", r, x:totable()[1]))
if r == 1 then
  if arg[1] == "busy" then os.execute("sleep 20") end
  return -- rank 1 does not replay again
end
local ok, err = pcall(function() g:replay() end)
print(string.format("rank %d: second replay %s", r, ok and "completed" or tostring(err)))
if not ok then error(err, 0) end
LUA

run() { # run CASE ARGS...: output in $tmp/CASE.out, rc, secs
    case_name=$1
    shift
    t0=$(date +%s)
    bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$@" >"$tmp/$case_name.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..6"
run depart "$tmp/alone.lua" depart 60
has "$tmp/depart.out" "rank 0: first replay 2" && has "$tmp/depart.out" "rank 1: first replay 2"
ok $? "a replay that both ranks make completes on both (1 + 1 = 2)"
has "$tmp/depart.out" "rank 0: second replay" &&
    has "$tmp/depart.out" "replay of a captured all_reduce: all_reduce of 4 f32 (sum) on cpu on rank 0 of 2 cannot complete: rank 1 left the job"
ok $? "rank 0 replaying alone after rank 1's script ended fails naming the captured all_reduce and rank 1"
ok $((rc == 0 || secs > 30)) "that job ends non-zero well within the 60 s timeout (rc $rc, $secs s)"

run busy "$tmp/alone.lua" busy 3
has "$tmp/busy.out" "replay of a captured all_reduce: all_reduce of 4 f32 (sum) on cpu on rank 0 of 2 did not complete within 3 s"
ok $? "rank 0 replaying alone while rank 1 is busy fails at the 3 s comm timeout naming the collective"
! has "$tmp/busy.out" "rank 0: second replay completed"
ok $? "the lone replay never reports success"
ok $((rc == 0 || secs > 18)) "that job ends non-zero before rank 1's 20 s sleep is over (rc $rc, $secs s)"

for f in depart busy; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -12
done
finish
