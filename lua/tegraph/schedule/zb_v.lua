-- zb_v.lua — ZB-V from "Zero Bubble Pipeline Parallelism" (section 6): two chunks per stage
-- placed in a V (down the stages, then back up), B split from W, Ws filling the bubbles.
local plan_ = require "tegraph.schedule.plan"

-- zb_v{stages = P, microbatches = M [, costs]} -> plan. Stage s holds chunks s and 2P+1-s, so
-- chunk 2P (the loss) sits on stage 1 next to chunk 1. Per stage (r = s-1), with
-- n = max(M, 2P-1) microbatches (those past M are dropped at the end):
--   warmup: 2(P-r)-1 x F(down); r x [F(up), F(down)]; (P-r) x [F(up), B(up), W(up)]
--   steady: [F(down) while any left, B(down), W(down), F(up), B(up), W(up)] until all Fs ran
--   cooldown: r x [B(down), B(up)]; (P-r) x [B(down), W(down)]; remaining W(up), W(down).
-- With F = B = W it keeps every stage busy from its first F to the end, except the P-1 steps
-- the first microbatch needs to reach the last stage.
return function(t)
  local P, Mb = plan_.args(t, "zb_v", 2)
  local owner = {}
  for s = 1, P do owner[s], owner[2 * P + 1 - s] = s, s end
  local plan = plan_.new("zb_v", P, 2, Mb, owner)
  local n = math.max(Mb, 2 * P - 1)
  for s = 1, P do
    local r = s - 1
    local down, up = s, 2 * P + 1 - s
    local list = {}
    local next_mb = { F = {}, B = {}, W = {} }
    local function act(op, chunk)
      local m = (next_mb[op][chunk] or 0) + 1
      next_mb[op][chunk] = m
      list[#list + 1] = { op, chunk, m }
    end
    local function count(op, chunk) return next_mb[op][chunk] or 0 end
    for _ = 1, 2 * (P - r) - 1 do act("F", down) end
    for _ = 1, r do act("F", up); act("F", down) end
    for _ = 1, P - r do act("F", up); act("B", up); act("W", up) end
    while count("F", up) < count("F", down) or count("F", down) < n do
      if count("F", down) < n then act("F", down) end
      act("B", down); act("W", down)
      act("F", up); act("B", up); act("W", up)
    end
    for _ = 1, r do act("B", down); act("B", up) end
    for _ = 1, P - r do act("B", down); act("W", down) end
    while count("W", up) < count("B", up) do act("W", up) end
    while count("W", down) < count("B", down) do act("W", down) end
    for _, x in ipairs(list) do
      if x[3] <= Mb then plan_.push(plan, s, x[1], x[2], x[3]) end
    end
  end
  return plan_.add_comm(plan, t.costs)
end
