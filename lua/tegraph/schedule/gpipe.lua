-- gpipe.lua — GPipe: every stage runs all forwards, then all backwards (W fused into B).
local plan_ = require "tegraph.schedule.plan"

-- gpipe{stages = P, microbatches = M [, costs = ...]} -> plan. Stage s holds chunk s. Each B
-- carries w = true (dgrad and wgrad in one action, costed B + W), so the bubble is
-- (P-1)/(M+P-1) and every stage holds M activations at the peak.
return function(t)
  local P, Mb = plan_.args(t, "gpipe", 1)
  local owner = {}
  for s = 1, P do owner[s] = s end
  local plan = plan_.new("gpipe", P, 1, Mb, owner)
  for s = 1, P do
    for m = 1, Mb do plan_.push(plan, s, "F", s, m) end
    for m = 1, Mb do plan_.push(plan, s, "B", s, m, true) end
  end
  return plan_.add_comm(plan, t.costs)
end
