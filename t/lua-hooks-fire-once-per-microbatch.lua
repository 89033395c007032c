-- Lua wgrad hooks fire once per parameter per microbatch, after the wgrad (eager and delayed), with correct info;
-- a failing hook stops the backward with its FILE:LINE; the step check names a parameter whose hook was skipped;
-- a hook removed by the id register_hook gave stops firing, and removing an unknown id is refused naming the parameter.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local tap = require "tap"

tg.manual_seed(7)
local M = 3

-- A two-layer model; every hook call is logged with the phase it came in.
local function build(delay, prefix)
  return nn.Sequential {
    nn.Linear(4, 5, { name = prefix .. ".a", delay_wgrad = delay, chunk = 2 }),
    nn.Linear(5, 3, { name = prefix .. ".b", delay_wgrad = delay, chunk = 2 }),
    name = prefix,
  }
end

local function run_step(delay)
  local prefix = delay and "d" or "e"
  local m = build(delay, prefix)
  local params = m:parameters()
  local log, phase = {}, "none"
  m:register_wgrad_hook(function(p, info)
    log[#log + 1] = { p = p, name = p.name, mb = info.microbatch, last = info.last, chunk = info.chunk, step = info.step,
      phase = phase }
  end)
  local step = tg.step_begin { microbatches = M }
  local x = tg.randn({ 2, 4 })
  for mb = 1, M do
    m:forward(x)
    phase = "B" .. mb
    m:backward(tg.ones({ 2, 3 }))
    phase = "none"
  end
  for mb = 1, M do
    if delay then
      phase = "W" .. mb
      m:backward_dw()
      phase = "none"
    end
  end
  tg.step_end()
  return m, params, log, step
end

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed" or "eager"
  local m, params, log, step = run_step(delay)
  tap.is(#params, 4, mode .. ": two weights and two biases")
  tap.is(#log, #params * M, mode .. ": one firing per parameter per microbatch")
  local count, okinfo, okphase, same = {}, true, true, true
  for _, e in ipairs(log) do
    count[e.name] = count[e.name] or {}
    count[e.name][e.mb] = (count[e.name][e.mb] or 0) + 1
    if e.chunk ~= 2 or e.step ~= step or e.last ~= (e.mb == M) then okinfo = false end
    if e.phase ~= (delay and "W" or "B") .. e.mb then okphase = false end
    local found = false
    for _, p in ipairs(params) do found = found or rawequal(p, e.p) end
    same = same and found
  end
  local once = true
  for _, p in ipairs(params) do
    for mb = 1, M do once = once and count[p.name] and count[p.name][mb] == 1 end
  end
  tap.ok(once, mode .. ": each parameter fired exactly once for each of microbatches 1.." .. M)
  tap.ok(okinfo, mode .. ": info.chunk = 2, info.step = the step index, info.last only on microbatch " .. M)
  tap.ok(okphase, mode .. (delay and ": fired inside backward_dw, never in backward" or ": fired inside backward of the same microbatch"))
  tap.ok(same, mode .. ": the hook gets the same Parameter objects as m:parameters()")
  tap.is(m:need_backward_dw(), false, mode .. ": nothing left queued")
end

-- A hook that reads the gradient sees the complete wgrad of that microbatch
-- (the sum over microbatches so far), for plain and fused accumulation.
for _, fused in ipairs { false, true } do
  for _, delay in ipairs { false, true } do
    local what = (fused and "main_grad" or "grad") .. (delay and ", delayed" or "")
    local lin = nn.Linear(3, 2, { name = "g", fuse_wgrad_accumulation = fused, delay_wgrad = delay })
    local W = lin:parameters()[1]
    local seen = {}
    W:register_hook(function(p, info) seen[info.microbatch] = p.wgrad:clone() end)
    local xs, dys = {}, {}
    tg.step_begin { microbatches = M }
    for mb = 1, M do
      xs[mb], dys[mb] = tg.randn({ 4, 3 }), tg.randn({ 4, 2 })
      lin:forward(xs[mb], mb)
      lin:backward(dys[mb], mb)
    end
    while lin:need_backward_dw() do lin:backward_dw() end
    tg.step_end()
    local worst = 0
    local ref = tg.zeros({ 2, 3 })
    for mb = 1, M do
      ref = ref + tg.ops.matmul(dys[mb], xs[mb], true, false) -- dW = sum dy^T x
      local ok, diff = tg.allclose(seen[mb], ref, 1e-5, 1e-6)
      if not ok then worst = math.max(worst, diff) end
    end
    tap.is(worst, 0, what .. ": the hook of microbatch m reads sum over 1..m of dy^T x")
    tap.ok(W.grad:same_memory(W.wgrad) ~= fused, what .. ": the wgrad went to " .. (fused and "main_grad" or "grad"))
  end
end

-- Outside steps every firing is the last one, with step 0.
do
  local lin = nn.Linear(2, 2, { name = "o", bias = false })
  local infos = {}
  lin:register_wgrad_hook(function(_, info) infos[#infos + 1] = info end)
  lin:forward(tg.ones({ 1, 2 }))
  lin:backward(tg.ones({ 1, 2 }))
  tap.ok(#infos == 1 and infos[1].step == 0 and infos[1].last == true and infos[1].microbatch == 1,
    "outside steps: one firing, step 0, last = true")
end

-- A failing hook aborts the backward; the error carries the hook's FILE:LINE.
do
  local lin = nn.Linear(2, 2, { name = "bad" })
  lin:parameters()[2]:register_hook(function(p) error("boom from the hook of " .. p.name) end)
  lin:forward(tg.ones({ 1, 2 }))
  local err = tap.error_like(function() lin:backward(tg.ones({ 1, 2 })) end,
    "lua%-hooks%-fire%-once%-per%-microbatch%.lua:%d+: boom from the hook of bad%.bias",
    "a hook's error propagates with its file:line")
  tap.like(err or "", "bad%.bias", "... and names the parameter")
  local lin2 = nn.Linear(2, 2, { name = "bad2" })
  lin2:register_wgrad_hook(function() error({}) end)
  lin2:forward(tg.ones({ 1, 2 }))
  tap.error_like(function() lin2:backward(tg.ones({ 1, 2 })) end, "error object is a table",
    "a non-string error object is described")
end

-- The step check: the forward of microbatch 2 ran but its backward did not.
do
  local m = build(false, "k")
  m:register_wgrad_hook(function() end)
  tg.step_begin { microbatches = 2 }
  local x = tg.randn({ 2, 4 })
  m:forward(x, 1)
  m:forward(x, 2)
  m:backward(tg.ones({ 2, 3 }), 1)
  tap.error_like(function() tg.step_end() end, "k%.a%.weight fired %[1,0%]", "the step check names the skipped parameter")
  tap.is(tg.step_open(), false, "a failed step_end still closes the step")

  local prev = tg.hook_check(false)
  tap.is(prev, true, "the hook check is on by default")
  tg.step_begin { microbatches = 2 }
  m:forward(x, 1)
  m:backward(tg.ones({ 2, 3 }), 1)
  tap.lives_ok(function() tg.step_end() end, "with hook_check(false) the same step ends quietly")
  tg.hook_check(true)
  m:drop_saved()
end

-- Removal: register_hook returns the parameter and the hook's id; remove_hook(id) stops that hook only.
do
  local lin = nn.Linear { in_features = 3, out_features = 2, name = "rm" }
  local W = lin:parameters()[1]
  local a, b = 0, 0
  local same, id = W:register_hook(function() a = a + 1 end)
  local _, id2 = W:register_hook(function() b = b + 1 end)
  tap.ok(rawequal(same, W) and math.type(id) == "integer" and id2 ~= id, "register_hook returns the parameter and a new id")
  local function one_step()
    tg.step_begin { microbatches = 1 }
    lin:forward(tg.randn({ 2, 3 }), 1)
    lin:backward(tg.randn({ 2, 2 }), 1)
    tg.step_end()
  end
  one_step()
  W:remove_hook(id)
  tap.is(W.nhooks, 1, "remove_hook leaves the other hook")
  one_step()
  tap.ok(a == 1 and b == 2, string.format("the removed hook fired only before its removal (%d), the other in both steps (%d)", a, b))
  tap.error_like(function() W:remove_hook(id) end, "rm%.weight: no hook with id " .. id, "removing it again names the parameter")
  tap.error_like(function() W:remove_hook(0) end, "rm%.weight has no hook with id 0", "so does an id never given")
end

tap.done_testing()
