#!/bin/sh
# dist-p2p-and-barrier-disagree.sh — a send whose shape or dtype differs from its matching recv fails on both
# ranks naming both ranks' arguments (checked at the first send and recv between two ranks, and at every one
# under the comm_check debug flag), without blocking a ring exchange or a blocking exchange of small messages; a barrier whose label or sequence number
# differs across the ranks fails naming both.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi

cat >"$tmp/p2p.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 60 }
local r = comm.rank()
local case = arg[1]
local function try(f)
  local ok, err = pcall(f)
  print(string.format("rank %d: %s", r, ok and "completed" or tostring(err)))
end
if case == "shape" then -- the same 6 elements, another shape
  try(function()
    if r == 0 then comm.send(tg.ones({ 2, 3 }), 1) else comm.recv(tg.zeros({ 3, 2 }), 0) end
  end)
elseif case == "dtype" then
  try(function()
    if r == 0 then comm.send(tg.ones({ 4 }), 1) else comm.recv(tg.zeros({ 4 }, { dtype = "bf16" }), 0) end
  end)
elseif case == "longer" then -- a recv buffer longer than the data sent: the transport alone would complete it
  try(function()
    if r == 0 then comm.send(tg.ones({ 4 }), 1, { name = "activations" }) else comm.recv(tg.zeros({ 6 }), 0) end
  end)
elseif case == "shorter" then -- a recv buffer shorter than the data sent: the transport alone would truncate
  try(function()
    if r == 0 then comm.send(tg.ones({ 6 }), 1) else comm.recv(tg.zeros({ 4 }), 0) end
  end)
elseif case == "later" then -- the second send differs: found under comm_check, with its count
  tg.debug("comm_check", true)
  if r == 0 then comm.send(tg.ones({ 4 }), 1) else comm.recv(tg.zeros({ 4 }), 0) end
  try(function()
    if r == 0 then comm.send(tg.ones({ 4 }), 1) else comm.recv(tg.zeros({ 5 }), 0) end
  end)
elseif case == "ring" then -- both ranks send first, then receive, async: checked, and no deadlock
  tg.debug("comm_check", true)
  local other = 1 - r
  for round = 1, 3 do
    local out, into = tg.full({ 3 }, 10 * r + round), tg.zeros({ 3 })
    local s = comm.send(out, other, { async = true })
    local q = comm.recv(into, other, { async = true })
    s:wait()
    q:wait()
    print(string.format("rank %d: round %d got %g", r, round, into:totable()[1]))
  end
elseif case == "exchange" or case == "exchange_bad" then
  -- both ranks send (blocking, small: MPI sends it eagerly), then receive: legal in plain MPI, so the checks of
  -- the first send and recv must not make it a deadlock; exchange_bad: rank 1's recv buffer has another shape
  local other = 1 - r
  try(function()
    for round = 1, 3 do
      local out = tg.full({ 4 }, 10 * r + round)
      local into = tg.zeros((case == "exchange_bad" and r == 1) and { 2, 2 } or { 4 })
      comm.send(out, other)
      comm.recv(into, other)
      print(string.format("rank %d: exchange %d got %g", r, round, into:totable()[1]))
    end
  end)
elseif case == "barrier_label" then
  try(function() comm.barrier { name = r == 0 and "epoch 1" or "epoch 2" } end)
elseif case == "barrier_seq" then -- rank 1 skips an all_reduce: its barrier meets rank 0's all_reduce
  tg.debug("comm_check", true)
  comm.all_reduce(tg.ones({ 4 }))
  try(function()
    if r == 0 then comm.all_reduce(tg.ones({ 4 })) end
    comm.barrier()
  end)
elseif case == "barrier_same" then
  tg.debug("comm_check", true)
  for i = 1, 3 do comm.barrier { name = "step " .. i } end
  local t = tg.ones({ 2 })
  comm.all_reduce(t)
  print(string.format("rank %d: after the barriers sum %g", r, t:totable()[1]))
end
LUA

run() { # run CASE ARGS...: output in $tmp/CASE.out, rc
    case_name=$1
    shift
    bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/p2p.lua" "$case_name" >"$tmp/$case_name.out" 2>&1
    rc=$?
}

echo "1..13"
run shape
both "$tmp/shape.out" "the ranks disagree: rank 0 has send #0 of f32 (2, 3) to rank 1; rank 1 has recv #0 of f32 (3, 2) from rank 0"
ok $? "a send and its recv of different shapes: both ranks fail naming both ranks' arguments"
grep -q "^rank 0: .*send: the ranks disagree" "$tmp/shape.out" && grep -q "^rank 1: .*recv: the ranks disagree" "$tmp/shape.out"
ok $? "each rank names its own op first (send on the sender, recv on the receiver)"
run dtype
both "$tmp/dtype.out" "rank 0 has send #0 of f32 (4) to rank 1; rank 1 has recv #0 of bf16 (4) from rank 0"
ok $? "different dtypes: named on both ranks"
run longer
both "$tmp/longer.out" "rank 0 has send #0 of f32 (4) to rank 1 'activations'; rank 1 has recv #0 of f32 (6) from rank 0"
ok $? "a longer recv buffer (which the transport fills in part) is refused on both ranks, the label named"
run shorter
both "$tmp/shorter.out" "rank 0 has send #0 of f32 (6) to rank 1; rank 1 has recv #0 of f32 (4) from rank 0"
ok $? "a shorter recv buffer is named on both ranks (not a truncation error)"
run later
both "$tmp/later.out" "rank 0 has send #1 of f32 (4) to rank 1; rank 1 has recv #1 of f32 (5) from rank 0"
ok $? "under comm_check a later send is checked, with its count"
run ring
ok $rc "async sends issued before their recvs on both ranks complete under comm_check (rc $rc)"
grep -q "^rank 0: round 3 got 13$" "$tmp/ring.out" && grep -q "^rank 1: round 3 got 3$" "$tmp/ring.out"
ok $? "and carry the other rank's values"
run exchange
grep -q "^rank 0: exchange 3 got 13$" "$tmp/exchange.out" && grep -q "^rank 1: exchange 3 got 3$" "$tmp/exchange.out"
ok $? "blocking sends issued before their recvs on both ranks (small messages) complete: no deadlock at the first check"
run exchange_bad
both "$tmp/exchange_bad.out" "the ranks disagree: rank 0 has send #0 of f32 (4) to rank 1; rank 1 has recv #0 of f32 (2, 2) from rank 0"
ok $? "and a mismatch there is still named on both ranks"
run barrier_label
both "$tmp/barrier_label.out" "barrier: the ranks disagree: rank 0 has call #0: barrier 'epoch 1'; rank 1 has call #0: barrier 'epoch 2'"
ok $? "barriers with different labels: both ranks fail naming both"
run barrier_seq
both "$tmp/barrier_seq.out" "the ranks disagree: rank 0 has call #1: all_reduce of 4 f32 (sum) on cpu; rank 1 has call #1: barrier"
ok $? "a barrier met by another rank's all_reduce: both fail naming the sequence numbers"
run barrier_same
both "$tmp/barrier_same.out" "after the barriers sum 2"
ok $? "matching labelled barriers under comm_check complete"

for f in shape dtype longer shorter later ring exchange exchange_bad barrier_label barrier_seq barrier_same; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -12
done
finish
