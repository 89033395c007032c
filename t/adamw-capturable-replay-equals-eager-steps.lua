-- adamw-capturable-replay-equals-eager-steps.lua — optim.AdamW{capturable=true}: one captured step replayed N times,
-- with opt:set_lr changing the lr between replays, equals N eager steps under the same lr schedule bit for bit
-- (parameters, bf16 copies, m, v, the step count), multi-tensor and per-tensor; on the CPU it also equals
-- capturable=false bit for bit (on CUDA the device's pow may differ in the last bit: there it is only close).
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local tap = require "tap"
local fx = require "adamw_fixture"

local SPECS = fx.SPECS
local N = 6
local function make() return fx.make(100) end
local set_grads, same_state = fx.set_grads, fx.same_state
local lr_of = optim.cosine_schedule { lr = 1e-2, warmup = 2, total = N, min_lr = 1e-3 } -- a new lr every step




local function opts(foreach, capturable)
  return { lr = lr_of(1), weight_decay = 0.1, foreach = foreach, capturable = capturable }
end

for _, foreach in ipairs { true, false } do
  local path = foreach and "multi-tensor" or "per-tensor"
  local pa, pb, pc = make(), make(), make()
  local dev = pa[1].data.device
  local on_cpu = tostring(dev):match("^cpu") ~= nil
  local oa = optim.AdamW(pa, opts(foreach, true))  -- captured once, replayed
  local ob = optim.AdamW(pb, opts(foreach, true))  -- eager capturable steps
  local oc = optim.AdamW(pc, opts(foreach, false)) -- eager host-scalar steps (the reference)
  local g = tg.stream.capture(function() oa:step() end, { device = dev })
  -- count + one update (multi-tensor), count + one update per parameter (per-tensor)
  local want = foreach and 2 or 1 + #SPECS
  tap.is(g:size(), want, string.format("%s: the captured step is %d commands (step count, updates)", path, want))
  tap.is(oa:step_count(), 0, path .. ": capture ran nothing (the device step count is still 0)")
  tap.ok(same_state(oa, oc, 0), path .. ": ... and left the parameters alone")
  for t = 1, N do
    set_grads(pa, t)
    set_grads(pb, t)
    set_grads(pc, t)
    oa:set_lr(lr_of(t))
    g:replay()
    ob:step { lr = lr_of(t) }
    oc:step { lr = lr_of(t) }
    local okc, which = same_state(oa, ob, 0)
    tap.ok(okc, string.format("%s: replay %d (lr %.6g) equals eager capturable step %d bit for bit%s", path, t, lr_of(t),
      t, okc and "" or (" (differs at " .. which .. ")")))
    okc, which = same_state(oa, oc, on_cpu and 0 or 1e-6)
    tap.ok(okc, string.format("%s: replay %d equals the host-scalar step %s%s", path, t,
      on_cpu and "bit for bit" or "within 1e-6", okc and "" or (" (differs at " .. which .. ")")))
  end
  tap.is(oa:step_count(), N, string.format("%s: after %d replays the device step count is %d", path, N, N))
  tap.is(ob:step_count(), N, path .. ": ... as after as many eager steps")
  tap.is(oc:step_count(), N, path .. ": ... and the host count of the reference")
  tap.is(oa.lr, lr_of(N), path .. ": set_lr keeps the last lr on the optimizer")
end

-- one replay without set_lr uses the lr last set, not the one at capture time
do
  local pa, pb = make(), make()
  local dev = pa[1].data.device
  local oa, ob = optim.AdamW(pa, opts(true, true)), optim.AdamW(pb, opts(true, false))
  local g = tg.stream.capture(function() oa:step() end, { device = dev })
  oa:set_lr(0.5)
  set_grads(pa, 1)
  set_grads(pb, 1)
  g:replay()
  g:replay() -- same gradients, second step: only the step count differs between the two replays
  ob:step { lr = 0.5 }
  ob:step { lr = 0.5 }
  local okc = same_state(oa, ob, tostring(dev):match("^cpu") and 0 or 1e-6)
  tap.ok(okc, "lr set after the capture is what two replays use (steps 1 and 2 at lr 0.5)")
end

-- 300 parameters: more than one CUDA launch of the multi-tensor kernel, each reading the one step count
do
  local function many()
    local ps = {}
    for i = 1, 300 do
      tg.manual_seed(5000 + i)
      ps[i] = nn.Parameter("q" .. i, tg.randn({ 1 + i % 7 }))
    end
    return ps
  end
  local pa, pb = many(), many()
  local dev = pa[1].data.device
  local oa, ob = optim.AdamW(pa, opts(true, true)), optim.AdamW(pb, opts(true, false))
  local g = tg.stream.capture(function() oa:step() end, { device = dev })
  for t = 1, 3 do
    set_grads(pa, t)
    set_grads(pb, t)
    oa:set_lr(lr_of(t))
    g:replay()
    ob:step { lr = lr_of(t) }
  end
  local okc, which = same_state(oa, ob, tostring(dev):match("^cpu") and 0 or 1e-6)
  tap.ok(okc, "300 parameters: 3 replays equal 3 host-scalar steps" .. (okc and "" or (" (differs at " .. which .. ")")))
  tap.is(oa:step_count(), 3, "300 parameters: the step count advanced once per replay")
end

tap.done_testing()
