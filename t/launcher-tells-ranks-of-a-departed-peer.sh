#!/bin/sh
# launcher-tells-ranks-of-a-departed-peer.sh — `tegraph run -n` (fork launcher) tells the ranks still running
# which rank's script ended: tg.comm.departed() names it within seconds (the NCCL watchdog fails an op waiting
# on that rank the same way); a rank that did not leave is never reported, and nothing is reported outside a job.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
cat >"$tmp/job.lua" <<'LUA'
local tg = require "tegraph"
local r = tonumber(os.getenv("TG_RANK"))
if r == 1 then return end -- rank 1's script ends at once
local t0 = os.time()
while tg.comm.departed() == nil and os.time() < t0 + 20 do end
print(string.format("rank %d: departed %s after <= %d s", r, tostring(tg.comm.departed()), os.time() - t0))
LUA
cat >"$tmp/stay.lua" <<'LUA'
local tg = require "tegraph"
local t0 = os.time()
while os.time() < t0 + 1 do end -- both ranks run 3 s and look after 1 s, while neither has left
local d = tg.comm.departed()
while os.time() < t0 + 3 do end
print(string.format("rank %s: departed %s", os.getenv("TG_RANK"), tostring(d)))
LUA
echo "1..4"
TG_LAUNCHER=fork TG_DEVICE=cpu "$TEGRAPH" run -n 3 "$tmp/job.lua" >"$tmp/job.out" 2>&1
ok $? "a job whose rank 1 returns at once exits 0"
grep -q "^rank 0: departed 1 after" "$tmp/job.out" && grep -q "^rank 2: departed 1 after" "$tmp/job.out"
ok $? "every rank still running learns that rank 1 left"
TG_LAUNCHER=fork TG_DEVICE=cpu "$TEGRAPH" run -n 2 "$tmp/stay.lua" >"$tmp/stay.out" 2>&1
grep -q "^rank 0: departed nil" "$tmp/stay.out" && grep -q "^rank 1: departed nil" "$tmp/stay.out"
ok $? "ranks that are all still there hear of no departure"
"$TEGRAPH" run -e 'print("alone: departed " .. tostring(tg.comm.departed()))' >"$tmp/alone.out" 2>&1
grep -q "^alone: departed nil" "$tmp/alone.out"
ok $? "outside a job nothing has departed"
sed 's/^/# /' "$tmp/job.out" "$tmp/stay.out" "$tmp/alone.out"
[ "$fails" -eq 0 ]
