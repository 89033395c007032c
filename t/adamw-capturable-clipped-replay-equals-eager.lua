-- adamw-capturable-clipped-replay-equals-eager.lua — a capturable multi-tensor step with global-norm clipping (sum of
-- squares and clip factor on the device) captures whole; replayed with a new lr each time it equals eager steps bit
-- for bit, with clipping active and inactive, a non-finite gradient skips the update but still advances the device
-- step count, and grad_norm() reads each replay's norm. On the CPU it also equals capturable=false bit for bit.
local tg = require "tegraph"
local optim = require "tegraph.optim"
local tap = require "tap"
local fx = require "adamw_fixture"

local SPECS = {
  { "w1", { 16, 8 }, "f32", false }, { "b1", { 8 }, "f32", false }, { "w2", { 8, 5 }, "bf16", false },
  { "w3", { 3, 7 }, "bf16", true },
}
local function make() return fx.make(200, SPECS) end
local same_state = fx.same_state
-- amp scales the gradients (clipping on or off); nan poisons one element of w2
local function set_grads(ps, step, amp, nan) fx.set_grads(ps, step, amp, nan and 3 or nil) end




local pa, pb, pc = make(), make(), make()
local dev = pa[1].data.device
local on_cpu = tostring(dev):match("^cpu") ~= nil
local function opts(capturable)
  return { lr = 1e-2, weight_decay = 0.1, max_norm = 1.0, sync_norm = false, capturable = capturable }
end
local oa, ob, oc = optim.AdamW(pa, opts(true)), optim.AdamW(pb, opts(true)), optim.AdamW(pc, opts(false))
local g = tg.stream.capture(function() oa:step() end, { device = dev })
-- CPU: count, sum of squares, update; CUDA: the sum of squares is two kernels
local want = on_cpu and 3 or 4
tap.is(g:size(), want, string.format("the captured clipped step on %s is %d commands (count, sum of squares, update)",
  tostring(dev), want))
tap.is(oa:step_count(), 0, "capture ran nothing")

local CASES = { { 10.0, "clipping active" }, { 1e-3, "clipping inactive" }, { 1.0, "non-finite gradient", true },
  { 5.0, "clipping active again" } }
for r, c in ipairs(CASES) do
  local lr = 1e-2 / r
  for _, ps in ipairs { pa, pb, pc } do set_grads(ps, r, c[1], c[3]) end
  local before = {}
  for i, p in ipairs(pa) do before[i] = (p.master or p.data):clone() end
  oa:set_lr(lr)
  g:replay()
  ob:step { lr = lr }
  oc:step { lr = lr }
  local okc, which = same_state(oa, ob, 0)
  tap.ok(okc, string.format("replay %d (%s, lr %g) equals the eager capturable step bit for bit%s", r, c[2], lr,
    okc and "" or (" (differs at " .. which .. ")")))
  okc, which = same_state(oa, oc, on_cpu and 0 or 1e-6)
  tap.ok(okc, string.format("replay %d equals the host-scalar step %s%s", r, on_cpu and "bit for bit" or "within 1e-6",
    okc and "" or (" (differs at " .. which .. ")")))
  local na, nb = oa:grad_norm(), ob:grad_norm()
  if c[3] then
    tap.ok(na ~= na and nb ~= nb, string.format("replay %d: the norm read back is NaN", r))
    local same = true
    for i, p in ipairs(pa) do same = same and (p.master or p.data):max_abs_diff(before[i]) == 0 end
    tap.ok(same, string.format("replay %d: a non-finite gradient leaves the parameters unchanged", r))
  else
    tap.is(na, nb, string.format("replay %d: grad_norm() reads the replay's norm (%.6g)", r, nb))
  end
  tap.is(oa:step_count(), r, string.format("replay %d: the device step count is %d", r, r))
end

tap.done_testing()
