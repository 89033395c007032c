-- zb_h1.lua — ZB-H1 from "Zero Bubble Pipeline Parallelism" (Qi et al., 2023): B (dgrad) split
-- from W (wgrad); the Ws lag behind so they fill the cooldown bubble, with 1F1B's peak memory.
local plan_ = require "tegraph.schedule.plan"

-- zb_h1{stages = P, microbatches = M [, costs]} -> plan. Stage s holds chunk s. In step x
-- (0-based, x = 0 .. M+P-2) stage s runs F of microbatch x, B of microbatch x-(P-s) and W of
-- microbatch x-(P-1), each when it exists. Ws trail Fs by P-1 steps, so at most P activations
-- are alive on any stage (1F1B's peak). With F = B = W the idle time is a third of 1F1B's:
-- (P-1)(F+B-W) instead of (P-1)(F+B+W).
return function(t)
  local P, Mb = plan_.args(t, "zb_h1", 1)
  local owner = {}
  for s = 1, P do owner[s] = s end
  local plan = plan_.new("zb_h1", P, 1, Mb, owner)
  for s = 1, P do
    for x = 0, Mb + P - 2 do
      if x < Mb then plan_.push(plan, s, "F", s, x + 1) end
      local b = x - (P - s)
      if b >= 0 and b < Mb then plan_.push(plan, s, "B", s, b + 1) end
      local w = x - (P - 1)
      if w >= 0 and w < Mb then plan_.push(plan, s, "W", s, w + 1) end
    end
  end
  return plan_.add_comm(plan, t.costs)
end
