-- schedule-generators-pass-validate.lua — every built-in schedule, for several (stages,
-- microbatches[, chunks]), is a complete plan that validates with blocking and buffered sends.
local tap = require "tap"
local S = require "tegraph.schedule"

local cases = {
  { "gpipe", S.gpipe, { { 1, 1 }, { 2, 3 }, { 4, 8 }, { 5, 2 } } },
  { "1f1b", S.one_f_one_b, { { 1, 4 }, { 2, 1 }, { 3, 7 }, { 4, 8 }, { 6, 4 } } },
  { "interleaved", S.interleaved, { { 2, 2, 2 }, { 2, 6, 3 }, { 4, 8, 2 }, { 4, 4, 2 }, { 3, 9, 4 } } },
  { "zb_h1", S.zb_h1, { { 1, 3 }, { 2, 2 }, { 4, 8 }, { 4, 3 }, { 5, 11 } } },
  { "zb_v", S.zb_v, { { 1, 2 }, { 2, 4 }, { 4, 8 }, { 3, 2 }, { 4, 13 } } },
}

-- Counts compute actions per (op, chunk, mb), fused B counting as a W too.
local function census(plan)
  local n = {}
  for s = 1, plan.stages do
    for _, a in ipairs(plan[s]) do
      if a.op == "F" or a.op == "B" or a.op == "W" then
        local k = a.op .. ":" .. a.chunk .. ":" .. a.mb
        n[k] = (n[k] or 0) + 1
        if a.w then n["W:" .. a.chunk .. ":" .. a.mb] = (n["W:" .. a.chunk .. ":" .. a.mb] or 0) + 1 end
      end
    end
  end
  return n
end

for _, case in ipairs(cases) do
  local name, gen = case[1], case[2]
  for _, pmv in ipairs(case[3]) do
    local P, Mb, V = pmv[1], pmv[2], pmv[3]
    local tag = string.format("%s P=%d M=%d%s", name, P, Mb, V and (" V=" .. V) or "")
    local plan = gen { stages = P, microbatches = Mb, chunks_per_stage = V }
    local ok, err = S.validate(plan)
    tap.ok(ok, tag .. ": validates with blocking sends")
    if not ok then tap.diag(err) end
    ok, err = S.validate(plan, { sends = "buffered" })
    tap.ok(ok, tag .. ": validates with buffered sends")
    if not ok then tap.diag(err) end
    local C = P * plan.chunks
    local n, all_once = census(plan), true
    for c = 1, C do
      for m = 1, Mb do
        for _, op in ipairs({ "F", "B", "W" }) do
          if n[op .. ":" .. c .. ":" .. m] ~= 1 then all_once = false end
        end
      end
    end
    tap.ok(all_once, tag .. ": every (chunk, mb) has exactly one F, B and W")
    local orders_ok = true
    for s = 1, P do
      local order = S.to_order(plan, s)
      local computes = 0
      for _, a in ipairs(plan[s]) do
        if a.op == "F" or a.op == "B" or a.op == "W" then computes = computes + 1 end
      end
      if #order ~= computes then orders_ok = false end
      for _, a in ipairs(order) do
        if plan.owner[a.chunk] ~= s then orders_ok = false end
      end
    end
    tap.ok(orders_ok, tag .. ": to_order lists each stage's own computes, transfers left out")
  end
end

-- Placement.
local zv = S.zb_v { stages = 4, microbatches = 8 }
tap.is_deeply({ zv.owner[1], zv.owner[8], zv.owner[4], zv.owner[5], zv.owner[2], zv.owner[7] }, { 1, 1, 4, 4, 2, 2 },
  "zb_v: stage s holds chunks s and 2P+1-s")
tap.is(zv.chunks, 2, "zb_v: two chunks per stage")
local il = S.interleaved { stages = 4, chunks_per_stage = 3, microbatches = 8 }
tap.is_deeply({ il.owner[1], il.owner[5], il.owner[9], il.owner[12] }, { 1, 1, 1, 4 },
  "interleaved: stage s holds chunks s, s+P, s+2P")

-- Characteristic orders.
local function tokens(plan, s, k)
  local t = {}
  for i, a in ipairs(S.to_order(plan, s)) do
    if i > k then break end
    t[i] = a.op .. a.mb .. (plan.chunks > 1 and ("c" .. a.chunk) or "")
  end
  return table.concat(t, " ")
end
local ob = S.one_f_one_b { stages = 4, microbatches = 8 }
tap.is(tokens(ob, 1, 7), "F1 F2 F3 F4 B1 F5 B2", "1f1b: stage 1 warms up with P-1 forwards, then alternates")
tap.is(tokens(ob, 4, 4), "F1 B1 F2 B2", "1f1b: the last stage alternates from the start")
tap.ok(S.to_order(ob, 1)[5].w, "1f1b: B carries w = true (W fused)")
local zh = S.zb_h1 { stages = 4, microbatches = 8 }
tap.is(tokens(zh, 1, 9), "F1 F2 F3 F4 B1 W1 F5 B2 W2", "zb_h1: stage 1 runs F, B, W steps after its warmup")
tap.is(tokens(zh, 4, 9), "F1 B1 F2 B2 F3 B3 F4 B4 W1", "zb_h1: the last stage defers W by P-1 steps")
tap.is(tokens(il, 1, 5), "F1c1 F2c1 F3c1 F4c1 F1c5", "interleaved: groups of P microbatches per chunk (depth-first)")

-- Transfers name the producing chunk at both ends.
local first = ob[1]
local sends = {}
for _, a in ipairs(first) do
  if a.op == "send_fwd" then sends[#sends + 1] = a end
end
tap.is(#sends, 8, "1f1b: stage 1 sends one activation per microbatch")
tap.ok(sends[1].chunk == 1 and sends[1].peer == 2 and sends[1].mb == 1, "send_fwd names the producing chunk and the peer")

-- add_comm turns a user's compute-only order into a valid plan.
local user = { kind = "mine", stages = 2, microbatches = 2 }
user[1] = { { op = "F", chunk = 1, mb = 1 }, { op = "F", chunk = 1, mb = 2 },
  { op = "B", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 2 },
  { op = "W", chunk = 1, mb = 1 }, { op = "W", chunk = 1, mb = 2 } }
user[2] = { { op = "F", chunk = 2, mb = 1 }, { op = "B", chunk = 2, mb = 1, w = true },
  { op = "F", chunk = 2, mb = 2 }, { op = "B", chunk = 2, mb = 2, w = true } }
S.add_comm(user)
tap.ok(S.validate(user), "add_comm makes a compute-only plan valid")
tap.is(#user[1], 10, "add_comm adds 2 sends and 2 receives to stage 1")

-- Misuse raises.
tap.error_like(function() S.interleaved { stages = 4, chunks_per_stage = 2, microbatches = 6 } end,
  "multiple of stages", "interleaved: microbatches must be a multiple of stages")
tap.error_like(function() S.one_f_one_b { stages = 0, microbatches = 4 } end, "stages must be >= 1",
  "stages must be positive")
tap.error_like(function() S.gpipe { stages = 2, microbatches = 1.5 } end, "microbatches must be an integer",
  "microbatches must be an integer")

tap.done_testing()
