-- graph-shares-microbatch-graphs-only-when-lifetimes-allow.lua — a graphed set whose order runs the microbatches
-- one after another (no pipeline) captures microbatch 1's graphs only and replays them, with one set of static
-- buffers, for every microbatch: fewer graphs, less graph memory, gradients, outputs and hooks equal to eager bit for
-- bit. An order in which microbatches overlap (all F then all B, 1F1B's warm-up) keeps a graph set per microbatch;
-- forcing the sharing there (test switch graph_share_any_order: microbatch 2's F overwrites microbatch 1's saved
-- input before microbatch 1's B reads it) trains wrong, and this test sees it.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local IN, H, OUT, ROWS, M = 6, 10, 4, 5, 3
tg.manual_seed(21)
local X, DY = {}, {}
for mb = 1, M do X[mb], DY[mb] = tg.randn({ ROWS, IN }), tg.randn({ ROWS, OUT }) end

local function chunks(delay)
  tg.manual_seed(8)
  local o = function(name) return { name = name, fuse_wgrad_accumulation = true, delay_wgrad = delay } end
  return { tg.nn.Linear(IN, H, o "c1"), tg.nn.Sequential { tg.nn.LayerNormMLP(H, 2 * H, o "c2.mlp"),
    tg.nn.Linear(H, OUT, o "c2.out"), name = "c2" } }
end

-- Orders over two chunks: "sequential" (mb by mb), "default" (all F, then all B), "1f1b" (F1 F2 B1 F3 B2 B3).
local function order_of(kind)
  local o = {}
  local function F(mb) o[#o + 1] = { op = "F", chunk = 1, mb = mb }; o[#o + 1] = { op = "F", chunk = 2, mb = mb } end
  local function B(mb)
    o[#o + 1] = { op = "B", chunk = 2, mb = mb }; o[#o + 1] = { op = "W", chunk = 2, mb = mb }
    o[#o + 1] = { op = "B", chunk = 1, mb = mb }; o[#o + 1] = { op = "W", chunk = 1, mb = mb }
  end
  if kind == "sequential" then
    for mb = 1, M do F(mb); B(mb) end
  elseif kind == "default" then
    for mb = 1, M do F(mb) end
    for mb = M, 1, -1 do B(mb) end
  else
    F(1); F(2); B(1); F(3); B(2); B(3)
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

local function count_hooks(mods)
  local n = { 0 }
  for _, m in ipairs(mods) do m:register_wgrad_hook(function() n[1] = n[1] + 1 end) end
  return n
end

local function graphed(kind, delay, share, reuse)
  local mods = chunks(delay)
  local hooks = count_hooks(mods)
  local g = tg.graph.make_graphed(mods, { sample = { X[1], tg.zeros({ ROWS, H }) }, microbatches = M,
    order = order_of(kind), share = share, reuse = reuse })
  return g, mods, hooks
end

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed wgrad" or "wgrad not delayed"
  local nparams = 0
  for _, m in ipairs(chunks(delay)) do nparams = nparams + #m:parameters() end
  for _, kind in ipairs { "sequential", "default", "1f1b" } do
    local emods = chunks(delay)
    local ey, eg = step(emods, order_of(kind), delay, emods)
    local g, mods, hooks = graphed(kind, delay, nil)
    local shared = g[1]:shared()
    if kind == "sequential" then
      t.ok(shared, mode .. ", sequential order: every microbatch replays microbatch 1's graphs")
      local per_mb = delay and 3 or 2
      t.is(g[1]:graphs(), 2 * per_mb, mode .. ", sequential order: one F, B" .. (delay and ", W" or "")
        .. " per chunk, not one per microbatch")
      local u = graphed(kind, delay, false, false) -- a graph set and static buffers per microbatch, none reused
      local peak, upeak = g[1]:memory(), u[1]:memory()
      t.ok(not u[1]:shared() and u[1]:graphs() == M * 2 * per_mb and peak < upeak, string.format(
        "%s, sequential order: graph memory %d bytes shared against %d with share = false, reuse = false (%d graphs)", mode, peak,
        upeak, u[1]:graphs()))
      u:free()
    else
      t.ok(not shared, mode .. ", " .. kind .. " order: microbatches overlap, so each keeps its own graphs and buffers")
    end
    local ok = true
    for s = 1, 2 do
      local y, gr = step(g, order_of(kind), delay, mods)
      ok = ok and same(y, ey) and same(gr, eg)
    end
    t.ok(ok, mode .. ", " .. kind .. " order: outputs and gradients equal eager bit for bit in 2 steps")
    t.is(hooks[1], 2 * M * nparams, mode .. ", " .. kind .. " order: every parameter's hooks fired once per microbatch")
    g:free()
  end

  -- The reuse-too-early bug: sharing where microbatches overlap trains wrong, and the comparison catches it.
  for _, kind in ipairs { "default", "1f1b" } do
    local emods = chunks(delay)
    local _, eg = step(emods, order_of(kind), delay, emods)
    tg.debug("graph_share_any_order", true)
    local g, mods = graphed(kind, delay, nil)
    tg.debug("graph_share_any_order", false)
    local _, gr = step(g, order_of(kind), delay, mods)
    t.ok(g[1]:shared() and not same(gr, eg), mode .. ", " .. kind .. " order forced to share (graph_share_any_order): "
      .. "a later microbatch's F overwrites buffers an earlier one's B still reads, and the gradients differ from eager")
    g:free()
  end
end

local mods = chunks(false)
t.error_like(function() tg.graph.make_graphed(mods, { sample = { X[1], tg.zeros({ ROWS, H }) }, microbatches = M,
  share = "yes" }) end, "opts.share a boolean", "share must be a boolean")

t.done_testing()
