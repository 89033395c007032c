-- engine.lua — runs a plan's action lists against each other, one clock per stage: computes
-- take their cost, a recv waits for its send (buffered sends) or both ends meet (blocking sends).
-- validate uses it to prove the plan cannot deadlock; simulate uses its times.
local plan_ = require "tegraph.schedule.plan"

local M = {}

local PAIR = { send_fwd = "recv_fwd", recv_fwd = "send_fwd", send_bwd = "recv_bwd", recv_bwd = "send_bwd" }

-- The transfer a send/recv on stage s belongs to, the same string on both ends.
local function xfer_key(a, s)
  local dir = a.op:sub(6)
  local from, to = s, a.peer
  if a.op:sub(1, 4) == "recv" then from, to = a.peer, s end
  return dir .. ":" .. a.chunk .. ":" .. a.mb .. ":" .. from .. ":" .. to
end
M.xfer_key = xfer_key

-- Runs plan (already statically valid) with cost(action, stage) -> seconds. blocking: a send
-- completes only when the peer reaches the matching recv (rendezvous); otherwise sends are
-- posted and the sender moves on. Returns {makespan, events[s] = {{a, i, start, finish}...},
-- busy[s], peak[s]}, or nil, s, i, message when no stage can move (deadlock).
function M.run(plan, cost, blocking)
  local P = plan.stages
  local pc, clock, busy, alive, peak, events = {}, {}, {}, {}, {}, {}
  for s = 1, P do pc[s], clock[s], busy[s], alive[s], peak[s], events[s] = 1, 0, 0, 0, 0, {} end
  local posted = {} -- transfer key -> arrival time (buffered sends)

  local function step(s)
    local i = pc[s]
    local a = plan[s][i]
    if plan_.COMPUTE[a.op] then
      local d = cost(a, s)
      events[s][#events[s] + 1] = { a = a, i = i, start = clock[s], finish = clock[s] + d }
      clock[s] = clock[s] + d
      busy[s] = busy[s] + d
      if a.op == "F" then
        alive[s] = alive[s] + 1
        if alive[s] > peak[s] then peak[s] = alive[s] end
      elseif a.op == "W" or a.w then
        alive[s] = alive[s] - 1
      end
      pc[s] = i + 1
      return true
    end
    if blocking then
      local q = a.peer
      local b = plan[q][pc[q]]
      if not (b and b.op == PAIR[a.op] and b.peer == s and b.chunk == a.chunk and b.mb == a.mb) then
        return false
      end
      local t = math.max(clock[s], clock[q]) + cost(a, s)
      clock[s], clock[q] = t, t
      pc[s], pc[q] = i + 1, pc[q] + 1
      return true
    end
    local key = xfer_key(a, s)
    if a.op:sub(1, 4) == "send" then
      posted[key] = clock[s] + cost(a, s)
    else
      local t = posted[key]
      if not t then return false end
      if t > clock[s] then clock[s] = t end
    end
    pc[s] = i + 1
    return true
  end

  -- A worklist of stages that may move: each stage runs until it blocks; a blocked stage is woken
  -- by the event it waits for (the matching send posted, or its peer meeting it), so the whole run
  -- is O(actions + stages).
  local queue, queued, head = {}, {}, 1
  local waiting = {} -- buffered: transfer key -> the stage whose recv waits for it
  local function wake(s)
    if not queued[s] then
      queued[s] = true
      queue[#queue + 1] = s
    end
  end
  for s = 1, P do wake(s) end
  local function step_and_wake(s)
    local i = pc[s]
    local a = plan[s][i]
    local q = a.peer
    local qpc = q and plan[q] and pc[q]
    if not step(s) then
      if not blocking and a.op:sub(1, 4) == "recv" then waiting[xfer_key(a, s)] = s end
      return false
    end
    if blocking and q and plan[q] and pc[q] ~= qpc then
      wake(q) -- the rendezvous moved the peer too
    elseif not blocking and a.op:sub(1, 4) == "send" then
      local key = xfer_key(a, s)
      local w = waiting[key]
      if w then
        waiting[key] = nil
        wake(w)
      end
    end
    return true
  end
  while head <= #queue do
    local s = queue[head]
    head = head + 1
    queued[s] = nil
    while pc[s] <= #plan[s] and step_and_wake(s) do end
  end

  local first
  for s = 1, P do
    if pc[s] <= #plan[s] then first = s break end
  end
  if first then
    -- Follow who waits for whom from the first stuck stage until a stage repeats: that's the cycle.
    local seen, s = {}, first
    while not seen[s] do
      seen[s] = true
      s = plan[s][pc[s]].peer
    end
    local low, q = s, plan[s][pc[s]].peer
    while q ~= s do
      if q < low then low = q end
      q = plan[q][pc[q]].peer
    end
    -- Describe the cycle from its lowest stage.
    local parts = {}
    s = low
    repeat
      q = plan[s][pc[s]].peer
      parts[#parts + 1] = string.format("stage %d waits at action %d (%s) for stage %d", s, pc[s],
        plan_.describe(plan[s][pc[s]]), q)
      s = q
    until s == low
    local msg = string.format("deadlock (%s sends): %s", blocking and "blocking" or "buffered",
      table.concat(parts, "; "))
    return nil, low, pc[low], msg
  end

  local makespan = 0
  for s = 1, P do
    if clock[s] > makespan then makespan = clock[s] end
  end
  return { makespan = makespan, events = events, busy = busy, peak = peak }
end

return M
