-- graph-chain-hands-outputs-on-without-copies.lua — make_graphed{chain = true} over consecutive chunks: chunk 2's
-- static input is chunk 1's static output and chunk 1's static output gradient is chunk 2's input gradient (same
-- memory, per microbatch), so handing results on copies nothing; outputs, input gradients, parameter gradients and
-- hooks equal eager bit for bit over two steps with overlapping microbatches (all F, then all B and W), and equal
-- the unchained set's. An input for chunk 2 that is not chunk 1's output is copied into the shared buffer.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local IN, H, OUT, ROWS, M = 6, 10, 4, 5, 3
tg.manual_seed(31)
local X, DY = {}, {}
for mb = 1, M do X[mb], DY[mb] = tg.randn({ ROWS, IN }), tg.randn({ ROWS, OUT }) end

local function chunks()
  tg.manual_seed(9)
  local o = function(name) return { name = name, fuse_wgrad_accumulation = true, delay_wgrad = true } end
  return { tg.nn.Linear(IN, H, o "c1"), tg.nn.Sequential { tg.nn.LayerNormMLP(H, 2 * H, o "c2.mlp"),
    tg.nn.Linear(H, OUT, o "c2.out"), name = "c2" } }
end

local function values(t_) return t_:totable() end

-- one step over M microbatches: all F, then B and W in reverse; returns outputs, chunk-1 input grads, params' grads
local function run(call, ms)
  local fired = 0
  for _, m in ipairs(ms) do m:register_wgrad_hook(function() fired = fired + 1 end) end
  local res = {}
  for step = 1, 2 do
    local ys, dxs = {}, {}
    tg.step_begin { microbatches = M }
    for mb = 1, M do
      local h = call.f(1, X[mb], mb)
      ys[mb] = values(call.f(2, h, mb))
    end
    for mb = M, 1, -1 do
      local dh = call.b(2, DY[mb], mb); call.w(2, mb)
      dxs[mb] = values(call.b(1, dh, mb)); call.w(1, mb)
    end
    tg.step_end()
    local grads = {}
    for _, m in ipairs(ms) do for _, p in ipairs(m:parameters()) do grads[#grads + 1] = values(p.main_grad) end end
    res[step] = { ys = ys, grads = grads }
  end
  res.fired = fired
  return res
end

local function eager_calls(ms)
  return {
    f = function(c, x, mb) return ms[c]:forward(x, mb) end,
    b = function(c, dy, mb) return ms[c]:backward(dy, mb) end,
    w = function(c, mb) ms[c]:backward_dw(mb) end,
  }
end
local function graphed_calls(g)
  return {
    f = function(c, x, mb) return g[c]:forward(x, mb) end,
    b = function(c, dy, mb) return g[c]:backward(dy, mb) end,
    w = function(c, mb) g[c]:backward_dw(mb) end,
  }
end
local order = {}
for mb = 1, M do order[#order + 1] = { op = "F", chunk = 1, mb = mb }; order[#order + 1] = { op = "F", chunk = 2, mb = mb } end
for mb = M, 1, -1 do
  for _, a in ipairs { { "B", 2 }, { "W", 2 }, { "B", 1 }, { "W", 1 } } do order[#order + 1] = { op = a[1], chunk = a[2], mb = mb } end
end
local function sample_h() return tg.zeros({ ROWS, H }) end

local em = chunks()
local ref = run(eager_calls(em), em)

local cm = chunks()
local gc = tg.graph.make_graphed(cm, { sample = { X[1], sample_h() }, microbatches = M, order = order, chain = true, warmup = 1 })
local got = run(graphed_calls(gc), cm)
t.is_deeply(got[1], ref[1], "chained: step 1's outputs and gradients equal eager bit for bit")
t.is_deeply(got[2], ref[2], "chained: step 2's outputs and gradients equal eager bit for bit")
t.is(got.fired, ref.fired, "chained: the hooks fired as often as eager's (" .. ref.fired .. ")")

local um = chunks()
local gu = tg.graph.make_graphed(um, { sample = { X[1], sample_h() }, microbatches = M, order = order, warmup = 1 })
local plain = run(graphed_calls(gu), um)
t.is_deeply(plain[2], got[2], "the unchained set gives the same results")

-- same memory: a chained set's chunk 1 output is the buffer chunk 2 reads; an unchained set's is not
local other = tg.randn({ ROWS, H })
local function probe(chain)
  local ms = chunks()
  local g = tg.graph.make_graphed(ms, { sample = { X[1], sample_h() }, microbatches = 1, chain = chain, warmup = 1 })
  tg.step_begin { microbatches = 1 }
  local y = g[1]:forward(X[1], 1)
  local before = values(y)
  g[2]:forward(other, 1) -- not chunk 1's output: copied into chunk 2's static input
  local after = values(y)
  local dx = g[2]:backward(DY[1], 1); g[2]:backward_dw(1); g[1]:backward(dx, 1); g[1]:backward_dw(1)
  tg.step_end()
  return before, after
end
local before, after = probe(true)
t.is_deeply(after, values(other), "chained: an input for chunk 2 that is not chunk 1's output lands in the shared buffer")
t.ok(before[1][1] ~= after[1][1], "(it replaced chunk 1's output there)")
before, after = probe(false)
t.is_deeply(after, before, "unchained: chunk 2's input is a buffer of its own (chunk 1's output unchanged)")
t.error_like(function() tg.graph.make_graphed(chunks(), { sample = { X[1], sample_h() }, chain = 1 }) end,
  "opts.chain a boolean", "chain must be a boolean")
t.done_testing()
