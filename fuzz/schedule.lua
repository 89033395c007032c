-- schedule.lua — fuzz driver: the input encodes a pipeline plan (stages, chunks, microbatches, and each
-- stage's actions: op, chunk, microbatch, fused W); the schedule validator judges it and, when valid,
-- the simulator times it with costs from the input and adds the transfers.
local schedule = require "tegraph.schedule"
local validate = require "tegraph.schedule.validate"

local OPS = { "F", "B", "W", "send_fwd", "recv_fwd", "send_bwd", "recv_bwd" }

return function(s)
  local i = 0
  local function byte()
    i = i + 1
    return s:byte(i) or 0
  end
  local P, V, Mb = byte() % 4 + 1, byte() % 3 + 1, byte() % 5 + 1
  local plan = { kind = "fuzz", stages = P, chunks = V, microbatches = Mb }
  for st = 1, P do plan[st] = {} end
  local kinds = { "F", "B", "W" }
  while i < #s do
    local st = byte() % P + 1
    local code = byte()
    local op = code < 200 and kinds[code % 3 + 1] or OPS[code % #OPS + 1]
    local a = { op = op, chunk = byte() % (V * P + 1), mb = byte() % (Mb + 2) }
    if op == "B" and byte() % 2 == 1 then a.w = true end
    if code % 17 == 0 then a.mb = -a.mb end
    local list = plan[st]
    list[#list + 1] = a
  end
  local sends = (#s % 2 == 0) and "blocking" or "buffered"
  -- the validator answers (true) or (false, why); raising instead is a finding
  local ok, valid, why = pcall(validate, plan, { sends = sends })
  if not ok then fuzz_finding("validate raised instead of answering: " .. tostring(valid)) end
  if valid then
    local costs = { F = (#s % 3) + 1, B = 2, W = 1, comm = #s % 2, sends = sends }
    local ok2, err = pcall(schedule.simulate, plan, costs)
    if not ok2 then fuzz_finding("simulate of a plan validate accepted raised: " .. tostring(err)) end
  elseif type(why) ~= "string" then
    fuzz_finding("validate refused a plan without saying why")
  end
end
