#!/bin/sh
# dist-ranks-disagree-or-depart.sh — collectives whose ranks pass different sizes, dtypes or ops fail on every
# rank naming both ranks' arguments (checked at the first call of each kind and label, and at every call under
# the comm_check debug flag); a rank whose script returns while another waits for it in a collective makes
# the waiting rank fail within seconds naming the departed rank, not at the comm timeout. A split is checked at
# every call the same way (made by some ranks only, a departed rank, split{dp=,pp=} with different layouts).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi

cat >"$tmp/disagree.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 60 }
local r = comm.rank()
local case = arg[1]
local function try(f)
  local ok, err = pcall(f)
  print(string.format("rank %d: %s", r, ok and "completed" or tostring(err)))
end
if case == "shape" then
  try(function() comm.all_reduce(tg.ones({ r == 0 and 4 or 6 })) end)
elseif case == "dtype" then
  try(function() comm.all_reduce(tg.ones({ 4 }, { dtype = r == 0 and "f32" or "bf16" })) end)
elseif case == "op" then
  try(function() comm.all_reduce(tg.ones({ 4 }), { op = r == 0 and "sum" or "max" }) end)
elseif case == "kind" then
  try(function()
    if r == 0 then comm.broadcast(tg.ones({ 4 }), 0) else comm.all_reduce(tg.ones({ 4 })) end
  end)
elseif case == "later" then -- the second call of a kind differs: found only under comm_check
  if arg[2] == "check" then tg.debug("comm_check", true) end
  comm.all_reduce(tg.ones({ 4 }))
  try(function() comm.all_reduce(tg.ones({ 4 }), { op = r == 0 and "sum" or "min" }) end)
elseif case == "bucket" then -- a new label is checked on its first use
  try(function() comm.all_reduce(tg.ones({ r == 0 and 8 or 12 }), { name = "ddp bucket 3" }) end)
elseif case == "split_some" then -- a split made by rank 0 only (a blocking MPI split would wait forever)
  try(function()
    if r == 0 then comm.split(0) end
    comm.barrier()
  end)
elseif case == "split_layout" then -- the ranks ask for different layouts
  try(function() comm.split(r == 0 and { dp = 2 } or { pp = 2 }) end)
elseif case == "same" then
  tg.debug("comm_check", true)
  local t = tg.ones({ 4 })
  for _ = 1, 3 do comm.all_reduce(t) end
  print(string.format("rank %d: sum %g", r, t:totable()[1]))
end
LUA

cat >"$tmp/depart.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 60 }
local t = tg.ones({ 4 })
comm.all_reduce(t)
if comm.rank() == 1 then return end -- rank 1's script ends here
comm.all_reduce(t) -- rank 0 waits for rank 1
print("rank 0 survived")
LUA

cat >"$tmp/split_depart.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 60 }
comm.all_reduce(tg.ones({ 4 }))
if comm.rank() == 1 then return end -- rank 1's script ends without making the split
comm.split(0)
print("rank 0 survived")
LUA

run() { # run CASE ARGS...: output in $tmp/CASE.out, rc, secs
    case_name=$1
    shift
    t0=$(date +%s)
    bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$@" >"$tmp/$case_name.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..14"
run shape "$tmp/disagree.lua" shape
both "$tmp/shape.out" "all_reduce: the ranks disagree: rank 0 has call #0: all_reduce of 4 f32 (sum) on cpu; rank 1 has call #0: all_reduce of 6 f32 (sum) on cpu"
ok $? "different sizes: both ranks fail naming both ranks' arguments"
run dtype "$tmp/disagree.lua" dtype
both "$tmp/dtype.out" "rank 0 has call #0: all_reduce of 4 f32 (sum) on cpu; rank 1 has call #0: all_reduce of 4 bf16 (sum) on cpu"
ok $? "different dtypes: named on both ranks"
run op "$tmp/disagree.lua" op
both "$tmp/op.out" "all_reduce of 4 f32 (sum) on cpu; rank 1 has call #0: all_reduce of 4 f32 (max) on cpu"
ok $? "different reduce ops: named on both ranks"
run kind "$tmp/disagree.lua" kind
has "$tmp/kind.out" "rank 0 has call #0: broadcast of 4 f32 (root 0) on cpu; rank 1 has call #0: all_reduce of 4 f32 (sum) on cpu"
ok $? "different collectives: a broadcast against an all_reduce is named"
run later "$tmp/disagree.lua" later check
both "$tmp/later.out" "rank 0 has call #1: all_reduce of 4 f32 (sum) on cpu; rank 1 has call #1: all_reduce of 4 f32 (min) on cpu"
ok $? "under comm_check a later call is checked too, with its sequence number"
run bucket "$tmp/disagree.lua" bucket
both "$tmp/bucket.out" "all_reduce of 8 f32 (sum) on cpu 'ddp bucket 3'; rank 1 has call #0: all_reduce of 12 f32 (sum) on cpu 'ddp bucket 3'"
ok $? "a labelled call (a bucket) is checked at its first use and its label named"
run same "$tmp/disagree.lua" same
ok $rc "matching calls under comm_check complete (rc $rc)"
both "$tmp/same.out" "sum 8"
ok $? "and their results are right (1 -> 2 -> 4 -> 8)"

run depart "$tmp/depart.lua"
has "$tmp/depart.out" "all_reduce of 4 f32 (sum) on cpu on rank 0 of 2 cannot complete: rank 1 left the job (its script ended)" &&
    ! has "$tmp/depart.out" "rank 0 survived"
ok $? "a departed rank: the waiting rank fails naming it"
ok $((rc == 0 || secs > 30)) "a departed rank: the job ends non-zero well within the 60 s timeout (rc $rc, $secs s)"

run split_some "$tmp/disagree.lua" split_some
both "$tmp/split_some.out" "the ranks disagree: rank 0 has call #0: split; rank 1 has call #0: barrier"
ok $? "a split made by one rank only (the other in a barrier): both ranks fail naming both calls"
run split_layout "$tmp/disagree.lua" split_layout
both "$tmp/split_layout.out" "comm split: the ranks disagree: rank 0 has call #0: split 'dp=2 pp=1'; rank 1 has call #0: split 'dp=1 pp=2'"
ok $? "split{dp=,pp=} with different layouts on the ranks: both ranks fail naming both layouts"
run split_depart "$tmp/split_depart.lua"
has "$tmp/split_depart.out" "comm split: comparing the ranks' arguments: all_gather of 16 i32 on cpu on rank 0 of 2 cannot complete: rank 1 left the job" &&
    ! has "$tmp/split_depart.out" "rank 0 survived"
ok $? "a split whose other rank's script ended fails naming the departed rank (not a hang)"
ok $((rc == 0 || secs > 30)) "and the job ends non-zero well within the 60 s timeout (rc $rc, $secs s)"

for f in shape dtype op kind later bucket same depart split_some split_layout split_depart; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -12
done
finish
