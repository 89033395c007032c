-- interleaved.lua — Megatron's interleaved 1F1B: V model chunks per stage, microbatches run
-- depth-first in groups of P (all chunks of a group before the next group); W fused into B.
local raise = require "tegraph.raise"
local plan_ = require "tegraph.schedule.plan"

-- interleaved{stages = P, chunks_per_stage = V (or chunks), microbatches = M [, costs]} -> plan.
-- Stage s holds chunks s, s+P, ..., s+(V-1)P. M must be a multiple of P. Virtual microbatch k
-- (0-based, M*V per stage) runs local chunk (k mod PV) div P forward (reversed for backward) on
-- microbatch (k div PV)*P + k mod P + 1. Warmup per Megatron: 2(P-s) + (V-1)P forwards (all of
-- them when M == P). With per-chunk costs 1/V of a stage's, the bubble is (P-1)/(V*M+P-1).
return function(t)
  local P, Mb, V = plan_.args(t, "interleaved")
  if Mb % P ~= 0 then
    raise(string.format("schedule.interleaved: microbatches (%d) must be a multiple of stages (%d)", Mb, P))
  end
  local owner = {}
  for s = 1, P do
    for v = 0, V - 1 do owner[v * P + s] = s end
  end
  local plan = plan_.new("interleaved", P, V, Mb, owner)
  local total, group = Mb * V, P * V
  local function mb_of(k) return (k // group) * P + k % P + 1 end
  for s = 1, P do
    local function fwd(k)
      local v = (k % group) // P
      plan_.push(plan, s, "F", v * P + s, mb_of(k))
    end
    local function bwd(k)
      local v = V - 1 - (k % group) // P
      plan_.push(plan, s, "B", v * P + s, mb_of(k), true)
    end
    local warmup
    if Mb == P then
      warmup = total
    else
      warmup = math.min((P - s) * 2 + (V - 1) * P, total)
    end
    for k = 0, warmup - 1 do fwd(k) end
    for i = 0, total - warmup - 1 do
      fwd(warmup + i)
      bwd(i)
    end
    for k = total - warmup, total - 1 do bwd(k) end
  end
  return plan_.add_comm(plan, t.costs)
end
