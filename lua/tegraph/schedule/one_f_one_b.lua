-- one_f_one_b.lua — 1F1B (PipeDream-flush): a warmup of forwards, then one forward per
-- backward, then the remaining backwards; W fused into B.
local plan_ = require "tegraph.schedule.plan"

-- one_f_one_b{stages = P, microbatches = M [, costs = ...]} -> plan. Stage s holds chunk s and
-- warms up with min(P-s, M) forwards, so at most P-s+1 activations are alive on it (P on
-- stage 1). Each B carries w = true (costed B + W), which gives the bubble (P-1)/(M+P-1).
return function(t)
  local P, Mb = plan_.args(t, "one_f_one_b", 1)
  local owner = {}
  for s = 1, P do owner[s] = s end
  local plan = plan_.new("1f1b", P, 1, Mb, owner)
  for s = 1, P do
    local warmup = math.min(P - s, Mb)
    for m = 1, warmup do plan_.push(plan, s, "F", s, m) end
    for i = 1, Mb - warmup do
      plan_.push(plan, s, "F", s, warmup + i)
      plan_.push(plan, s, "B", s, i, true)
    end
    for m = Mb - warmup + 1, Mb do plan_.push(plan, s, "B", s, m, true) end
  end
  return plan_.add_comm(plan, t.costs)
end
