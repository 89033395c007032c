-- graph-reuses-static-buffers-across-microbatches.lua — a graphed set whose order overlaps microbatches (all F then
-- all B, 1F1B, ZB-H1 with deferred W) keeps one set of graphs per microbatch but reuses the memory of static input,
-- output and gradient buffers whose last reader has run: less graph memory than with reuse = false, outputs,
-- gradients and hooks equal to eager bit for bit. With share = true, microbatches of a chunk whose lifetimes do not
-- overlap also replay one set of graphs (fewer graphs), equal to eager too. Letting buffers go too early (test
-- switch graph_reuse_early: at their microbatch's B, while the deferred W still reads the saved input and the output
-- gradient) trains wrong, with and without shared graphs, and this test sees it.
local tg = require "tegraph"
local t = require "tap"
local schedule = require "tegraph.schedule"

tg.hook_check(true)
local IN, H, OUT, ROWS, M = 6, 10, 4, 5, 4
tg.manual_seed(31)
local X, DY = {}, {}
for mb = 1, M do X[mb], DY[mb] = tg.randn({ ROWS, IN }), tg.randn({ ROWS, OUT }) end

local function chunks(delay)
  tg.manual_seed(9)
  local o = function(name) return { name = name, fuse_wgrad_accumulation = true, delay_wgrad = delay } end
  return { tg.nn.Linear(IN, H, o "c1"), tg.nn.Sequential { tg.nn.LayerNormMLP(H, 2 * H, o "c2.mlp"),
    tg.nn.Linear(H, OUT, o "c2.out"), name = "c2" } }
end

-- Orders over two chunks: all F then all B; the orders of a process running both stages of 1F1B and ZB-H1.
local function order_of(kind)
  local o = {}
  if kind == "default" then
    for mb = 1, M do for c = 1, 2 do o[#o + 1] = { op = "F", chunk = c, mb = mb } end end
    for mb = M, 1, -1 do
      for c = 2, 1, -1 do
        o[#o + 1] = { op = "B", chunk = c, mb = mb }; o[#o + 1] = { op = "W", chunk = c, mb = mb }
      end
    end
    return o
  end
  local gen = kind == "1f1b" and schedule.one_f_one_b or schedule.zb_h1
  for _, a in ipairs(schedule.exec_order(gen { stages = 2, microbatches = M })) do
    o[#o + 1] = { op = a.op, chunk = a.chunk, mb = a.mb }
  end
  return o
end

-- One step through the order on callables cs (modules or graphed); returns chunk 2's outputs and the gradients.
local function step(cs, order, delay, mods)
  local h, y, dh = {}, {}, {}
  tg.step_begin { microbatches = M }
  for _, a in ipairs(order) do
    local c = cs[a.chunk]
    if a.op == "F" and a.chunk == 1 then h[a.mb] = c:forward(X[a.mb], a.mb)
    elseif a.op == "F" then y[a.mb] = c:forward(h[a.mb], a.mb):clone()
    elseif a.op == "B" and a.chunk == 2 then dh[a.mb] = c:backward(DY[a.mb], a.mb)
    elseif a.op == "B" then c:backward(dh[a.mb], a.mb)
    elseif delay then c:backward_dw(a.mb) end
  end
  tg.step_end()
  local grads = {}
  for _, m in ipairs(mods) do
    for _, p in ipairs(m:parameters()) do grads[#grads + 1] = p.main_grad:clone() end
  end
  return y, grads
end

local function same(xs, ys)
  for i = 1, #xs do
    if not tg.allclose(xs[i], ys[i], 0, 0) then return false end
  end
  return #xs == #ys
end

local function graphed(kind, delay, reuse, share)
  local mods = chunks(delay)
  local n = { 0 }
  for _, m in ipairs(mods) do m:register_wgrad_hook(function() n[1] = n[1] + 1 end) end
  local g = tg.graph.make_graphed(mods, { sample = { X[1], tg.zeros({ ROWS, H }) }, microbatches = M,
    order = order_of(kind), reuse = reuse, share = share })
  return g, mods, n
end

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed wgrad" or "wgrad not delayed"
  local nparams = 0
  for _, m in ipairs(chunks(delay)) do nparams = nparams + #m:parameters() end
  for _, kind in ipairs { "default", "1f1b", "zb_h1" } do
    local label = mode .. ", " .. kind .. " order"
    local emods = chunks(delay)
    local ey, eg = step(emods, order_of(kind), delay, emods)
    local g, mods, hooks = graphed(kind, delay, nil)
    local u = graphed(kind, delay, false)
    t.ok(g[1]:reused() and not g[1]:shared() and not u[1]:reused(), label .. ": reuse is the default (share is not possible)")
    local peak, upeak = g[1]:memory(), u[1]:memory()
    t.is(g[1]:graphs(), u[1]:graphs(), label .. ": as many graphs with reuse as without (one set per microbatch)")
    if kind == "default" then
      -- every microbatch's F comes before any B: nothing is free when the next F allocates; only input gradients
      -- and output gradients of finished microbatches come back
      t.ok(peak <= upeak, string.format("%s: graph memory %d bytes with reuse, %d without", label, peak, upeak))
    else
      t.ok(peak < upeak, string.format("%s: graph memory %d bytes with reuse, less than %d without", label, peak, upeak))
    end
    local ok = true
    for _ = 1, 2 do
      local y, gr = step(g, order_of(kind), delay, mods)
      ok = ok and same(y, ey) and same(gr, eg)
    end
    t.ok(ok, label .. ": outputs and gradients equal eager bit for bit in 2 steps, buffers reused")
    t.is(hooks[1], 2 * M * nparams, label .. ": every parameter's hooks fired once per microbatch")
    g:free()

    -- share = true: microbatches whose lifetimes do not overlap replay one set of graphs
    local sg, smods, shooks = graphed(kind, delay, nil, true)
    if kind == "default" then
      t.is(sg[1]:graphs(), u[1]:graphs(), label .. ", share = true: every lifetime overlaps, one set per microbatch")
    else
      t.ok(sg[1]:graphs() < u[1]:graphs(), string.format("%s, share = true: %d graphs, fewer than %d", label,
        sg[1]:graphs(), u[1]:graphs()))
    end
    ok = true
    for _ = 1, 2 do
      local y, gr = step(sg, order_of(kind), delay, smods)
      ok = ok and same(y, ey) and same(gr, eg)
    end
    t.ok(ok, label .. ", share = true: outputs and gradients equal eager bit for bit in 2 steps")
    t.is(shooks[1], 2 * M * nparams, label .. ", share = true: every parameter's hooks fired once per microbatch")
    sg:free()
    u:free()
  end
end

-- The reuse-too-early bug: buffers let go at their microbatch's B while the deferred W still reads them; a later
-- microbatch's F overwrites the saved input, and the weight gradients differ from eager.
for _, share in ipairs { false, true } do
  local kind = "zb_h1"
  local emods = chunks(true)
  local _, eg = step(emods, order_of(kind), true, emods)
  tg.debug("graph_reuse_early", true)
  local g, mods = graphed(kind, true, nil, share or nil)
  tg.debug("graph_reuse_early", false)
  local _, gr = step(g, order_of(kind), true, mods)
  t.ok(g[1]:reused() and not same(gr, eg), kind .. " order, delayed wgrad" .. (share and ", share = true" or "")
    .. ", buffers reused too early (graph_reuse_early): the gradients differ from eager")
  g:free()
end

local mods = chunks(false)
t.error_like(function() tg.graph.make_graphed(mods, { sample = { X[1], tg.zeros({ ROWS, H }) }, microbatches = M,
  reuse = "yes" }) end, "opts.reuse a boolean", "reuse must be a boolean")

t.done_testing()
