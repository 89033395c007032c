-- lua-microbatch-protocol.lua — one protocol for modules, Lua-table modules and graphed callables:
-- forward(x, mb), backward(dy, mb), backward_dw(mb). Graphed callables replay with it and match
-- eager; the old order (microbatch first) is an argument error saying so; backward_dw(mb) out of
-- B order names both microbatches and leaves the store as it was (also when make_graphed warms
-- up an order with W out of B order); a Lua-table module is told by the engine to overwrite on the
-- step's first wgrad and to add after it (delayed, not delayed, and in backward when it has no
-- backward_dw), so no step carries the previous step's gradient.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local t = require "tap"

local ops = tg.ops
local D, TOK, M = 4, 3, 2

tg.manual_seed(5)
local xs, dys = {}, {}
for s = 1, 2 do
  xs[s], dys[s] = {}, {}
  for mb = 1, M do xs[s][mb], dys[s][mb] = tg.randn { TOK, D }, tg.randn { TOK, D } end
end

local function linear(name, delay)
  tg.manual_seed(9)
  return nn.Linear { in_features = D, out_features = D, name = name, delay_wgrad = delay }
end

-- ------------------------------------------------------------ the old order is refused clearly
do
  local m = linear("old", true)
  local x, dy = xs[1][1], dys[1][1]
  t.error_like(function() m:forward(1, x) end, "bad argument #1 to 'forward' %(tegraph.Tensor expected, got number %(the microbatch comes last: forward%(x, mb%)%)%)",
    "m:forward(mb, x) is an argument error saying the microbatch comes last")
  t.error_like(function() m:forward(x, x) end, "bad argument #2 to 'forward' %(microbatch expected, got a tensor",
    "m:forward(x, x) names the microbatch argument")
  m:forward(x, 1)
  t.error_like(function() m:backward(1, dy) end, "bad argument #1 to 'backward' %(tegraph.Tensor expected, got number %(the microbatch comes last: backward%(dy, mb%)",
    "m:backward(mb, dy) is an argument error")
  t.error_like(function() m:backward_dw(dy) end, "bad argument #1 to 'backward_dw' %(microbatch expected, got a tensor",
    "m:backward_dw(dy) is an argument error")
  t.error_like(function() m:backward(dy, 0) end, "microbatch must be >= 1", "mb 0 is refused in Lua (omit it instead)")
  t.ok(m:backward(dy, 1) ~= nil, "after the refused calls the forward context is still there")
  m:backward_dw(1)

  local head = nn.LMHead { hidden_size = D, vocab_size = 5, name = "old_head" }
  t.error_like(function() head:backward(1, dy) end, "bad argument #2 to 'backward' %(microbatch expected, got a tensor",
    "an LM head's backward(mb, dy) is an argument error too (its number is d(loss))")

  local g = tg.graph.make_graphed(linear("old_g", true), { sample = x, microbatches = 1 })
  t.error_like(function() g:forward(1, x) end, "bad argument #1 to 'forward' %(tegraph.Tensor expected, got number",
    "graphed g:forward(mb, x) is an argument error")
  g:forward(x, 1)
  t.error_like(function() g:backward(1, dy) end, "bad argument #1 to 'backward' %(tegraph.Tensor expected, got number",
    "graphed g:backward(mb, dy) is an argument error")
  t.error_like(function() g:backward_dw(dy) end, "bad argument #1 to 'backward_dw' %(microbatch expected, got a tensor",
    "graphed g:backward_dw(dy) is an argument error")
end

-- ------------------------------------------------------------ graphed callables: forward(x, mb), backward(dy, mb), backward_dw(mb)
do
  local function run(callable, explicit_mb)
    local ys, dxs = {}, {}
    tg.step_begin { microbatches = M }
    for mb = 1, M do ys[mb] = callable:forward(xs[1][mb], explicit_mb and mb or nil):clone() end
    for mb = M, 1, -1 do -- make_graphed's default order: F in order, then B and W in reverse
      dxs[mb] = callable:backward(dys[1][mb], explicit_mb and mb or nil):clone()
      callable:backward_dw(explicit_mb and mb or nil)
    end
    tg.step_end()
    return ys, dxs
  end
  local eager = linear("e", true)
  local ye, dxe = run(eager, true)
  local we = eager:parameters()[1].grad:clone()
  for _, explicit in ipairs { true, false } do
    local what = explicit and "with mb" or "mb omitted"
    local m = linear("g", true)
    local g = tg.graph.make_graphed(m, { sample = xs[1][1], microbatches = M })
    local yg, dxg = run(g, explicit)
    local same = true
    for mb = 1, M do same = same and tg.allclose(yg[mb], ye[mb], 1e-6, 1e-7) and tg.allclose(dxg[mb], dxe[mb], 1e-6, 1e-7) end
    t.ok(same, "graphed (" .. what .. "): outputs and input gradients equal eager ones per microbatch")
    t.ok(tg.allclose(m:parameters()[1].grad, we, 1e-6, 1e-7), "graphed (" .. what .. "): the weight gradient equals eager")
    if not explicit then
      g:forward(xs[1][1])
      t.error_like(function() g:backward_dw() end, "out of order: expected F chunk 1 mb 2 .*got W chunk 1",
        "an omitted mb that is not the next action's op is refused naming the expected action")
    end
  end
end

-- ------------------------------------------------------------ eager backward_dw follows B order
do
  local m = linear("h.0.fc", true)
  local w = m:parameters()[1]
  local fired = {}
  m:register_wgrad_hook(function(p, info) fired[#fired + 1] = p.name .. "@" .. info.microbatch end)
  tg.step_begin { microbatches = M }
  for mb = 1, M do m:forward(xs[1][mb], mb) end
  for mb = 1, M do m:backward(dys[1][mb], mb) end
  t.error_like(function() m:backward_dw(2) end,
    "Linear 'h.0.fc' backward_dw %(microbatch 2%): the wgrad store's head is microbatch 1 %(W must follow B order%)",
    "backward_dw(2) with microbatch 1 at the store's head names both")
  t.is(#fired, 0, "no hook fired")
  t.is(w.grad:max_abs(), 0.0, "and no gradient was written")
  t.lives_ok(function() m:backward_dw(1); m:backward_dw(2) end, "the store is intact: W in B order then runs")
  t.lives_ok(function() tg.step_end() end, "and the step check passes")
  t.is_deeply(fired, { "h.0.fc.weight@1", "h.0.fc.bias@1", "h.0.fc.weight@2", "h.0.fc.bias@2" }, "hooks fired per microbatch in B order")
end

-- make_graphed warms the order up eagerly: W out of B order is refused there
do
  local order = { { op = "F", mb = 1 }, { op = "F", mb = 2 }, { op = "B", mb = 1 }, { op = "B", mb = 2 },
    { op = "W", mb = 2 }, { op = "W", mb = 1 } }
  t.error_like(function()
    tg.graph.make_graphed(linear("wo", true), { sample = xs[1][1], microbatches = M, order = order })
  end, "make_graphed warm%-up: Linear 'wo' backward_dw %(microbatch 2%): the wgrad store's head is microbatch 1",
    "make_graphed with W out of B order fails in its warm-up naming both microbatches")
end

-- ------------------------------------------------------------ Lua-table modules: the engine says overwrite or add
-- y = x W^T; the wgrad dW = dy^T x overwrites (accumulate false) or adds (true) as the engine says.
local function recording_linear(name, delay, in_backward)
  local W = nn.Parameter(name .. ".weight", linear(name .. "_init", false):parameters()[1].data:clone())
  local self = { name = name, params = { W }, delay_wgrad = delay, saved = {}, pending = {}, flags = {} }
  local function wgrad(mb, x, dy, accumulate)
    self.flags[#self.flags + 1] = mb .. ":" .. tostring(accumulate)
    ops.gemm(W.wgrad, dy, true, x, false, 1.0, accumulate and 1.0 or 0.0)
  end
  function self:forward(x, mb)
    self.saved[mb] = x
    return ops.matmul(x, W.data, false, true)
  end
  if in_backward then
    function self:backward(dy, mb, accumulate)
      local x = self.saved[mb]
      self.saved[mb] = nil
      wgrad(mb, x, dy, accumulate)
      return ops.matmul(dy, W.data)
    end
  else
    function self:backward(dy, mb, extra)
      self.extra = self.extra or extra
      local x = self.saved[mb]
      self.saved[mb] = nil
      self.pending[mb] = { x, dy }
      return ops.matmul(dy, W.data)
    end
    function self:backward_dw(mb, accumulate)
      local p = self.pending[mb]
      self.pending[mb] = nil
      wgrad(mb, p[1], p[2], accumulate)
    end
  end
  return self
end

for _, case in ipairs {
  { "eager, not delayed", false, false }, { "eager, delayed", true, false }, { "wgrad in backward (no backward_dw)", false, true },
} do
  local what, delay, in_backward = case[1], case[2], case[3]
  local tbl = recording_linear("r", delay, in_backward)
  local lm = nn.Module(tbl)
  local ref = linear("ref", false)
  local W = lm:parameters()[1]
  W.grad:copy_(tg.ones { D, D }) -- left over from before: the first wgrad of a step must overwrite it
  for s = 1, 2 do
    tg.step_begin { microbatches = M }
    for mb = 1, M do
      lm:forward(xs[s][mb], mb)
      ref:forward(xs[s][mb], mb)
    end
    for mb = M, 1, -1 do
      lm:backward(dys[s][mb], mb)
      ref:backward(dys[s][mb], mb)
    end
    if delay then for mb = M, 1, -1 do lm:backward_dw(mb) end end
    tg.step_end()
    t.ok(tg.allclose(W.grad, ref:parameters()[1].grad, 1e-6, 1e-7),
      string.format("%s: after step %d the gradient is that step's alone (as the C Linear's)", what, s))
  end
  t.is_deeply(tbl.flags, { "2:false", "1:true", "2:false", "1:true" },
    what .. ": accumulate is false on each step's first wgrad, true on the next")
  if not in_backward then t.is(tbl.extra, nil, what .. ": backward gets no accumulate when backward_dw computes the wgrad") end
  tbl.flags = {}
  lm:forward(xs[1][1])
  lm:backward(dys[1][1])
  if delay then lm:backward_dw() end
  t.is_deeply(tbl.flags, { "1:true" }, what .. ": outside steps the wgrad adds")
end

-- nn.LuaLinear uses the engine's flag: graphed and eager agree over two steps
do
  local function build()
    tg.manual_seed(3)
    return nn.LuaLinear { in_features = D, out_features = D, name = "ll", delay_wgrad = true }
  end
  local eager, gm = build(), build()
  local g = tg.graph.make_graphed(gm, { sample = xs[1][1], microbatches = M })
  for s = 1, 2 do
    tg.step_begin { microbatches = M }
    for mb = 1, M do eager:forward(xs[s][mb], mb); g:forward(xs[s][mb], mb) end
    for mb = M, 1, -1 do
      eager:backward(dys[s][mb], mb); eager:backward_dw(mb)
      g:backward(dys[s][mb], mb); g:backward_dw(mb)
    end
    tg.step_end()
  end
  local ok = true
  for i, p in ipairs(eager:parameters()) do ok = ok and tg.allclose(p.grad, gm:parameters()[i].grad, 1e-6, 1e-7) end
  t.ok(ok, "LuaLinear: graphed and eager gradients agree after two steps (each the last step's alone)")
  local ref = linear("llref", false)
  for i, p in ipairs(ref:parameters()) do p.data:copy_(eager:parameters()[i].data) end
  tg.step_begin { microbatches = M }
  for mb = 1, M do ref:forward(xs[2][mb], mb) end
  for mb = M, 1, -1 do ref:backward(dys[2][mb], mb) end
  tg.step_end()
  ok = true
  for i, p in ipairs(ref:parameters()) do ok = ok and tg.allclose(p.grad, eager:parameters()[i].grad, 1e-5, 1e-6) end
  t.ok(ok, "LuaLinear: the gradients equal the C Linear's for the last step")
end

t.done_testing()
