-- optim-refuses-bad-arguments.lua — tegraph.optim refuses, at the caller's line and naming the argument, what it
-- used to take silently or fail on inside the library: the same parameter twice (updated twice a step), options
-- of the wrong type (betas = "0.9", foreach = "no", sync_norm = 0: defaults used instead), no_decay that is not a
-- function, clip_grad_norm of things that are not parameters, misspelt step options, a method called with a dot,
-- and cosine_schedule's unknown keys and out-of-range values.
local tap = require "tap"
local caller = require "caller"
local at, refused = caller.at, caller.refused
local tg = require "tegraph"
local optim = tg.optim

local m = tg.nn.Linear(4, 2)
local ps = m:parameters()

refused(function() optim.AdamW({ ps[1], ps[1] }) end,
  "AdamW: params%[1%] and params%[2%] are the same parameter %('weight'%): list each once", "the same parameter twice")
refused(function() optim.AdamW({ ps[1], ps[2], ps[1] }) end, "params%[1%] and params%[3%] are the same parameter",
  "... also apart")
refused(function() optim.AdamW(ps, { betas = "0.9" }) end,
  "AdamW: betas must be a list of two numbers {beta1, beta2}, got the string '0%.9'", "betas = \"0.9\"")
refused(function() optim.AdamW(ps, { betas = { 0.5 } }) end, "betas must be a list of two numbers .*got 1 entries",
  "betas with one entry")
refused(function() optim.AdamW(ps, { betas = { 0.5, 0.9 }, beta1 = 0.8 }) end, "give betas or beta1/beta2, not both",
  "betas and beta1")
refused(function() optim.AdamW(ps, { foreach = "no" }) end, "AdamW: foreach must be a boolean, got the string 'no'",
  "foreach = \"no\"")
refused(function() optim.AdamW(ps, { sync_norm = 0 }) end, "AdamW: sync_norm must be a boolean, got number 0",
  "sync_norm = 0")
refused(function() optim.AdamW(ps, { no_decay = 5 }) end, "AdamW: no_decay must be a function", "no_decay = 5")
refused(function() optim.AdamW(ps, 5) end, "AdamW: options must be a table, got number", "options that are a number")
refused(function() optim.clip_grad_norm({ 1, 2 }, 1) end,
  "optim%.clip_grad_norm: params%[1%] is a number, not a parameter", "clip_grad_norm of numbers")
refused(function() optim.clip_grad_norm(ps, -1) end, "optim%.clip_grad_norm: max_norm must be a finite number > 0, got %-1",
  "clip_grad_norm with a negative max_norm")
refused(function() optim.clip_grad_norm(ps) end, "optim%.clip_grad_norm: max_norm %(a finite number > 0%) is required",
  "clip_grad_norm without max_norm")
refused(function() optim.grad_norm("x") end, "optim%.grad_norm: needs a non%-empty list of parameters", "grad_norm of a string")
refused(function() optim.clip_factor("x", 1) end, "optim%.clip_factor: norm must be a number, got string",
  "clip_factor of a string")
refused(function() optim.clip_factor(1.5) end, "optim%.clip_factor: max_norm %(a finite number > 0%) is required",
  "clip_factor without max_norm (it returned 1)")
refused(function() optim.clip_factor(-1, 1) end, "optim%.clip_factor: norm must be >= 0", "clip_factor of a negative norm")
tap.error_like(function() tg.allclose(tg.zeros({ 2 }), tg.zeros({ 2 }), -1, -1) end, "allclose: rtol .* must be >= 0",
  "allclose refuses negative tolerances")

local o = optim.AdamW(ps)
m:forward(tg.ones { 3, 4 })
m:backward(tg.ones { 3, 2 })
local before = ps[1].data:totable()
refused(function() o:step { lrr = 5 } end,
  "AdamW:step: unknown option 'lrr' %(known: lr, max_norm, norm, sync_norm%)", "step{lrr=}")
refused(function() o:step { sync_norm = "yes" } end, "AdamW:step: sync_norm must be a boolean, got string",
  "step{sync_norm = \"yes\"}")
refused(function() o.step() end, "AdamW:step: call it as a method, opt:step%(%.%.%.%) %(got nil as self%)",
  "opt.step() with a dot")
refused(function() o.set_lr(0.1) end, "AdamW:set_lr: call it as a method", "opt.set_lr(v) with a dot")
tap.is_deeply(ps[1].data:totable(), before, "the refused steps changed nothing")
tap.lives_ok(function() o:step { lr = 1e-3 } end, "a good step still runs")
tap.is(o.t, 1, "... once")

refused(function() optim.cosine_schedule { lr = 1, total = 10, warmupp = 5 } end,
  "cosine_schedule: unknown option 'warmupp' %(known: lr, min_lr, total, warmup%)", "cosine_schedule{warmupp=}")
refused(function() optim.cosine_schedule { lr = 1, total = 0 } end, "cosine_schedule: total must be an integer >= 1",
  "cosine_schedule{total = 0}")
refused(function() optim.cosine_schedule { lr = 1, total = 10, warmup = -5 } end,
  "cosine_schedule: warmup must be an integer >= 0, got %-5", "cosine_schedule{warmup = -5}")
refused(function() optim.cosine_schedule { lr = 1e-3, total = 10, min_lr = 1 } end,
  "cosine_schedule: min_lr must be a finite number in %[0, lr%], got 1", "cosine_schedule{min_lr > lr}")
refused(function() optim.cosine_schedule { lr = 0 / 0, total = 10 } end, "cosine_schedule: lr must be a finite number",
  "cosine_schedule{lr = NaN}")
local f = optim.cosine_schedule { lr = 1.0, min_lr = 0.1, warmup = 2, total = 12 }
tap.is(f(1), 0.5, "a good schedule still warms up")
tap.near(f(12), 0.1, 1e-12, "... and decays to min_lr")

tap.done_testing()
