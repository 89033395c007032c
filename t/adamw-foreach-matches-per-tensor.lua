-- adamw-foreach-matches-per-tensor.lua — optim.AdamW's multi-tensor path (device-side clipping) leaves the same bits
-- as foreach=false, its clip factor is optim.clip_factor's, a non-finite norm skips the step, the step captures and
-- replays, sync_norm=false returns no norm until asked, and ops.adamw_multi / sumsq_multi errors name the problem.
local tg = require "tegraph"
local optim = require "tegraph.optim"
local ops = require("tegraph.core").ops
local tap = require "tap"
local fx = require "adamw_fixture"

local function make() return fx.make(100) end
local set_grads = fx.set_grads



local function same(pa, pb)
  for i = 1, #pa do
    local a, b = pa[i].master or pa[i].data, pb[i].master or pb[i].data
    local okc = tg.allclose(a, b, 0, 0) and tg.allclose(pa[i].data, pb[i].data, 0, 0)
    if not okc then return false, pa[i].name end
  end
  return true
end

-- foreach (device clip) vs per-tensor, over steps with clipping active and inactive
do
  local pa, pb = make(), make()
  local oa = optim.AdamW(pa, { lr = 1e-2, weight_decay = 0.1, max_norm = 1.0 })
  local ob = optim.AdamW(pb, { lr = 1e-2, weight_decay = 0.1, max_norm = 1.0, foreach = false })
  local amps = { 10.0, 1e-3, 5.0, 1e-4 } -- clip, no clip, clip, no clip
  for step, amp in ipairs(amps) do
    set_grads(pa, step, amp)
    set_grads(pb, step, amp)
    local na, nb = oa:step(), ob:step()
    tap.is(na, nb, string.format("step %d: both paths return the same norm (%.6g)", step, na))
    local okc, which = same(pa, pb)
    tap.ok(okc, string.format("step %d (clipping %s): foreach equals per-tensor bit for bit%s", step,
      na > 1.0 and "active" or "inactive", okc and "" or (" (differs at " .. which .. ")")))
  end
  -- without clipping too
  local pc, pd = make(), make()
  local oc, od = optim.AdamW(pc, { lr = 1e-2 }), optim.AdamW(pd, { lr = 1e-2, foreach = false })
  for step = 1, 2 do
    set_grads(pc, step, 1.0)
    set_grads(pd, step, 1.0)
    tap.is(oc:step(), nil, "no clipping: step returns no norm")
    od:step()
  end
  tap.ok(same(pc, pd), "no clipping: foreach equals per-tensor bit for bit")
end

-- the factor the update kernel uses is optim.clip_factor of the norm: passing that factor as grad_scale (no
-- device clip) gives the same bits, at the edges too (exactly max_norm, just above, far above)
do
  for _, case in ipairs { { "norm == max_norm", 1.0 }, { "just above", 1.0 + 1e-6 }, { "far above", 1e3 } } do
    local pa, pb = make(), make()
    set_grads(pa, 1, 1.0)
    set_grads(pb, 1, 1.0)
    local gs = {}
    for i, p in ipairs(pa) do gs[i] = p.wgrad end
    local sq = ops.sumsq_multi(gs)
    local norm = math.sqrt(sq:totable()[1])
    local max_norm = norm / case[2]
    local f = optim.clip_factor(norm, max_norm)
    local function entries(ps, o)
      local e = {}
      for i, p in ipairs(ps) do
        e[i] = { p = p.master or p.data, lowp = p.master and p.data or nil, g = p.wgrad,
          m = tg.zeros(p.shape), v = tg.zeros(p.shape), weight_decay = 0.1 }
      end
      return e
    end
    ops.adamw_multi(entries(pa), { lr = 0.1, step = 1, clip_sumsq = sq, max_norm = max_norm })
    ops.adamw_multi(entries(pb), { lr = 0.1, step = 1, grad_scale = f })
    tap.ok(same(pa, pb), string.format("%s: the device clip factor is optim.clip_factor (%.9g)", case[1], f))
  end
end

-- a non-finite gradient with clipping: the step changes nothing, on both paths
for _, foreach in ipairs { true, false } do
  local ps, ref = make(), make()
  local o = optim.AdamW(ps, { lr = 1e-2, max_norm = 1.0, foreach = foreach })
  set_grads(ps, 1, 1.0)
  local g = ps[3].wgrad:totable()
  g[2][3] = 0 / 0
  ps[3].wgrad:copy_(g)
  local n = o:step()
  tap.ok(n ~= n, string.format("foreach=%s: a NaN gradient gives a NaN norm", tostring(foreach)))
  tap.ok(same(ps, ref), string.format("foreach=%s: ... and the step leaves the parameters unchanged", tostring(foreach)))
  local s = o.state[3]
  tap.ok(tg.allclose(s.m, tg.zeros(ps[3].shape), 0, 0) and tg.allclose(s.v, tg.zeros(ps[3].shape), 0, 0),
    string.format("foreach=%s: ... and the moments", tostring(foreach)))
end

-- sync_norm=false: no host read in step; grad_norm() reads it on request
do
  local pa, pb = make(), make()
  local oa = optim.AdamW(pa, { lr = 1e-2, max_norm = 1.0, sync_norm = false })
  local ob = optim.AdamW(pb, { lr = 1e-2, max_norm = 1.0 })
  set_grads(pa, 1, 3.0)
  set_grads(pb, 1, 3.0)
  tap.is(oa:step(), nil, "sync_norm=false: step returns no norm")
  local nb = ob:step()
  tap.is(oa:grad_norm(), nb, "sync_norm=false: grad_norm() reads the same norm afterwards")
  tap.ok(same(pa, pb), "sync_norm=false: the same update")
end

-- the whole clipped step captures on the parameters' device and replays like eager steps with the same
-- step count: on the CPU 2 commands (sum of squares, update); on CUDA 3 graph nodes (the sum of squares
-- is a partial-sums kernel and a final-sum kernel)
do
  local pa, pb = make(), make()
  local dev = pa[1].data.device
  local oa = optim.AdamW(pa, { lr = 1e-2, max_norm = 1.0, sync_norm = false })
  local ob = optim.AdamW(pb, { lr = 1e-2, max_norm = 1.0, sync_norm = false })
  local g = tg.stream.capture(function() oa:step() end, { device = dev })
  local want = dev:match("^cpu") and 2 or 3
  tap.is(g:size(), want, string.format("a captured clipped step on %s is %d commands (sum of squares, update)", dev, want))
  tap.ok(same(pa, pb), "capture ran nothing")
  for r, amp in ipairs { 10.0, 1e-3 } do
    set_grads(pa, r, amp)
    set_grads(pb, r, amp)
    g:replay()
    ob.t = 0 -- the captured step count is 1 at every replay
    ob:step()
    tap.ok(same(pa, pb), string.format("replay %d equals the eager step bit for bit", r))
  end
  tap.is(oa:grad_norm(), ob:grad_norm(), "after a replay grad_norm() reads the replayed norm")
end

-- errors name the problem
do
  local p = tg.zeros({ 3 })
  local ok_entry = { p = p, g = tg.zeros({ 3 }), m = tg.zeros({ 3 }), v = tg.zeros({ 3 }) }
  tap.error_like(function() ops.adamw_multi({ ok_entry, { p = p, g = tg.zeros({ 4 }), m = p, v = p } }, { lr = 1, step = 1 }) end,
    "adamw_multi: param 2: p %[3%] f32 vs g %[4%] f32", "a gradient of another shape names the parameter")
  tap.error_like(function() ops.adamw_multi({ { p = p, m = p, v = p } }, { lr = 1, step = 1 }) end,
    "params%[1%]%.g is required", "a missing gradient is named")
  tap.error_like(function() ops.adamw_multi({ ok_entry }, { step = 1 }) end, "option 'lr' is required",
    "lr is required")
  tap.error_like(function() ops.adamw_multi({ ok_entry }, { lr = 1, step = 1, clip_sumsq = tg.zeros({ 1 }) }) end,
    "option 'max_norm' is required", "clip_sumsq needs max_norm")
  tap.error_like(function() ops.sumsq_multi({ p, 3 }) end, "element 2 of the list is not a tensor",
    "sumsq_multi names a non-tensor")
end

tap.done_testing()
