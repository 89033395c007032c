-- adamw-capturable-bad-use-errors.lua — misuse of a capturable AdamW and of the ops under it fails with an error that
-- names the problem: a non-number or non-finite lr, setting the lr inside a capture (set_lr or step{lr=}), a
-- non-boolean capturable, a per-tensor clipped step (host norm) captured, and device lr / step tensors of the wrong
-- kind; after a refused capture the optimizer still steps.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local ops = require("tegraph.core").ops
local tap = require "tap"

local function params()
  tg.manual_seed(7)
  return { nn.Parameter("w", tg.randn({ 4, 3 })), nn.Parameter("b", tg.randn({ 3 })) }
end

local ps = params()
local dev = ps[1].data.device
local opt = optim.AdamW(ps, { lr = 1e-2, capturable = true })

tap.error_like(function() opt:set_lr("0.1") end, "AdamW:set_lr: lr must be a finite number %(got string%)",
  "set_lr with a string names lr and the type")
tap.error_like(function() opt:set_lr(nil) end, "AdamW:set_lr: lr must be a finite number %(got nil%)",
  "set_lr with nothing names lr")
tap.error_like(function() opt:set_lr(0 / 0) end, "AdamW:set_lr: lr must be a finite number %(got number", "set_lr with NaN")
tap.error_like(function() opt:set_lr(math.huge) end, "lr must be a finite number", "set_lr with inf")
tap.error_like(function() opt:step { lr = "fast" } end, "AdamW:step{lr=}: lr must be a finite number %(got string%)",
  "step{lr=} with a string names lr")
tap.is(opt:step_count(), 0, "... and a refused step did not count")
tap.error_like(function() optim.AdamW(params(), { capturable = "yes" }) end, "AdamW: capturable must be a boolean",
  "capturable must be a boolean")
tap.error_like(function() optim.AdamW(params(), { lr = "1e-3", capturable = true }) end,
  "AdamW: lr must be a finite number %(got string%)", "the constructor's lr must be a number, and says what it got")
tap.error_like(function() optim.AdamW(params(), { lr = 1e-3 }):set_lr({}) end,
  "AdamW:set_lr: lr must be a finite number %(got table%)", "set_lr checks its value without capturable too")

-- the lr written inside a capture would be replayed forever: refused, and it says what to do instead
tap.error_like(function() tg.stream.capture(function() opt:set_lr(0.1) end, { device = dev }) end,
  "AdamW:set_lr: .* is capturing; a capturable optimizer's lr is a device value, set it between replays",
  "set_lr inside a capture is refused")
tap.error_like(function() tg.stream.capture(function() opt:step { lr = 0.1 } end, { device = dev }) end,
  "AdamW:step{lr=}: .* is capturing", "step{lr=} inside a capture is refused")
tap.is(opt.lr, 1e-2, "... and neither changed the lr")
for _, q in ipairs(ps) do q.wgrad = tg.ones(q.shape, { dtype = "f32" }) end -- an eager step needs a gradient
tap.lives_ok(function() opt:step { lr = 2e-2 } end, "after the refused captures an eager step works")
tap.is(opt:step_count(), 1, "... and counts once")
tap.is(opt.lr, 2e-2, "... and step{lr=} outside a capture sets the lr")

-- per-tensor clipping reads the norm on the host: its capture fails clearly instead of baking a norm in
local pc = optim.AdamW(params(), { lr = 1e-2, capturable = true, foreach = false, max_norm = 1.0 })
tap.error_like(function() tg.stream.capture(function() pc:step() end, { device = dev }) end, "capturing",
  "a per-tensor clipped capturable step cannot be captured (host norm) and says so")

-- the device-clip step with sync_norm reads the norm on the host: captured, it is refused before anything is
-- issued, saying to capture with sync_norm = false; with it the step captures
local pn = params()
local on = optim.AdamW(pn, { lr = 1e-2, capturable = true, max_norm = 1.0 })
for _, q in ipairs(pn) do q.wgrad = tg.ones(q.shape, { dtype = "f32" }) end
tap.error_like(function() tg.stream.capture(function() on:step() end, { device = dev }) end,
  "AdamW:step: .* is capturing and sync_norm reads the gradient norm on the host; capture the step with sync_norm = false",
  "a clipped step with sync_norm inside a capture is refused, saying what to do")
tap.is(on:step_count(), 0, "... before its step count advanced")
local graph
tap.lives_ok(function() graph = tg.stream.capture(function() on:step { sync_norm = false } end, { device = dev }) end,
  "with sync_norm = false the clipped capturable step captures")

-- a device step count never advanced (0) leaves everything unchanged instead of dividing by 1 - b^0 = 0
do
  local q = tg.full({ 3 }, 0.5)
  local ez = { p = q, g = tg.full({ 3 }, 1.0), m = tg.zeros({ 3 }), v = tg.zeros({ 3 }) }
  ops.adamw_multi({ ez }, { lr = tg.full({ 1 }, 0.1), step = tg.zeros({ 1 }, { dtype = "i32" }) })
  ops.adamw_step(q, nil, ez.g, ez.m, ez.v, { lr = tg.full({ 1 }, 0.1), step = tg.zeros({ 1 }, { dtype = "i32" }) })
  local got = q:totable()
  tap.ok(got[1] == 0.5 and got[2] == 0.5 and got[3] == 0.5 and ez.m:max_abs() == 0,
    "a device step count of 0 changes no parameter or moment (no NaN)")
end

-- the ops under it
local p = tg.zeros({ 3 })
local e = { p = p, g = tg.zeros({ 3 }), m = tg.zeros({ 3 }), v = tg.zeros({ 3 }) }
local lr_t, step_t = tg.full({ 1 }, 0.1), tg.zeros({ 1 }, { dtype = "i32" })
tap.error_like(function() ops.adamw_multi({ e }, { lr = lr_t, step = 1 }) end,
  "adamw_multi: options 'lr' and 'step' must both be numbers, or both tensors", "adamw_multi: lr tensor, step number")
tap.error_like(function() ops.adamw_step(p, nil, e.g, e.m, e.v, { lr = 0.1, step = step_t }) end,
  "adamw_step: options 'lr' and 'step' must both be numbers, or both tensors", "adamw_step: lr number, step tensor")
tap.error_like(function() ops.adamw_step(p, nil, e.g, e.m, e.v, { lr = lr_t, step = tg.zeros({ 1 }) }) end,
  "adamw_step: step %[1%] f32 must hold one i32", "adamw_step: an f32 step tensor is named")
tap.error_like(function() ops.adamw_multi({ e }, { lr = step_t, step = step_t }) end,
  "adamw_multi: lr %[1%] i32 must hold one f32", "adamw_multi: an i32 lr tensor is named")
tap.error_like(function() ops.adamw_multi({ e }, { lr = tg.zeros({ 2 }), step = step_t }) end,
  "adamw_multi: lr %[2%] f32 must hold one f32", "adamw_multi: a lr tensor of two elements is named")
tap.error_like(function() ops.adamw_count(tg.zeros({ 1 })) end, "adamw_count: step %[1%] f32 must hold one i32",
  "adamw_count names a step tensor of the wrong dtype")
tap.error_like(function() ops.adamw_count(3) end, "tegraph.Tensor expected", "adamw_count needs a tensor")
tap.is(step_t:totable()[1], 0, "the refused calls changed no step count")

tap.done_testing()
