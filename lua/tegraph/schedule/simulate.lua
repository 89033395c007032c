-- simulate.lua — times a valid plan under per-op costs: makespan, per-stage busy and idle time,
-- bubble fraction and peak in-flight activations.
local raise = require "tegraph.raise"
local plan_ = require "tegraph.schedule.plan"
local engine = require "tegraph.schedule.engine"
local validate = require "tegraph.schedule.validate"

-- simulate(plan [, costs]) -> result. costs = {F=1, B=1, W=1, comm=0} (any may be left out), or
-- a function(action, stage) -> time; costs.sends = "blocking" makes a send wait for its receive
-- (default: sends are posted and the data arrives comm later). A fused B (w = true) costs B + W.
-- result = {makespan, busy[s], idle[s] = makespan - busy[s], bubble = sum(idle)/(P*makespan),
-- peak[s] (microbatch-chunks whose F ran and W has not), peak_max, span[s] = {first start, last
-- finish}, gaps[s] (idle inside that span), events[s] = {{a, i, start, finish}...}}.
-- Raises when the plan does not validate.
return function(plan, costs)
  local sends = type(costs) == "table" and costs.sends or "buffered"
  local ok, err = validate(plan, { sends = sends })
  if not ok then raise("schedule.simulate: " .. err) end
  local cost = plan_.cost_fn(costs)
  local r = assert(engine.run(plan, cost, sends == "blocking"))
  local P = plan.stages
  r.idle = {}
  local idle = 0
  for s = 1, P do
    r.idle[s] = r.makespan - r.busy[s]
    idle = idle + r.idle[s]
  end
  r.bubble = r.makespan > 0 and idle / (P * r.makespan) or 0
  -- Idle inside each stage's own span (first start to last finish): what remains when the
  -- staggered start and end overlap with the neighbouring steps (ZB-V leaves none).
  r.span, r.gaps = {}, {}
  for s = 1, P do
    local ev = r.events[s]
    if #ev > 0 then
      r.span[s] = { ev[1].start, ev[#ev].finish }
      r.gaps[s] = ev[#ev].finish - ev[1].start - r.busy[s]
    else
      r.span[s], r.gaps[s] = { 0, 0 }, 0
    end
  end
  r.peak_max = 0
  for s = 1, P do
    if r.peak[s] > r.peak_max then r.peak_max = r.peak[s] end
  end
  return r
end
