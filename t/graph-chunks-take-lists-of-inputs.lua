-- graph-chunks-take-lists-of-inputs.lua — make_graphed with tuple = true: a Lua-table module whose forward takes a
-- list {a, b, ids} (two float inputs and i32 token ids) and returns two outputs {y1, y2}, graphed with a static
-- buffer per input, output and gradient, equals eager bit for bit (outputs, the gradients of a and b, the weight
-- gradients, the hooks) over two steps of three microbatches, on an overlapping and a sequential order, with
-- delayed wgrad on and off; the ids get no gradient (nil); calls with the wrong inputs are refused, naming them.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local B, T, D, V, M = 2, 3, 4, 7, 3
tg.manual_seed(17)
local A, Bs, IDS, DY2, DZ = {}, {}, {}, {}, {}
for mb = 1, M do
  A[mb], Bs[mb], DY2[mb], DZ[mb] = tg.randn({ B, T, D }), tg.randn({ B, T, D }), tg.randn({ B, T, D }), tg.randn({ B, T, D })
  local ids = {}
  for i = 1, B do
    ids[i] = {}
    for j = 1, T do ids[i][j] = (i * 3 + j * 5 + mb) % V end
  end
  IDS[mb] = tg.tensor(ids, { dtype = "i32" })
end

-- y1 = (a + E[ids]) W^T, y2 = (a + E[ids]) * b; backward gives {da, db, nil}
local function tuple_module(delay)
  local W = tg.nn.Parameter("mix.weight", tg.randn({ D, D }), { fuse_wgrad_accumulation = true })
  local E = tg.nn.Parameter("mix.table", tg.randn({ V, D }), { fuse_wgrad_accumulation = true })
  local self = { name = "mix", params = { W, E }, delay_wgrad = delay, saved = {}, pending = {} }
  function self:forward(x, mb)
    local a, b, ids = x[1], x[2], x[3]
    local h = a + tg.ops.embedding_forward(ids, E.data)
    self.saved[mb] = { h, b, ids }
    return { tg.ops.matmul(h:view(-1, D), W.data, false, true):view(B, T, D), h * b }
  end
  function self:backward(dy, mb)
    local h, b, ids = table.unpack(self.saved[mb])
    self.saved[mb] = nil
    local dy1 = dy[1]:view(-1, D)
    local dh = tg.ops.matmul(dy1, W.data):view(B, T, D) + dy[2] * b
    self.pending[mb] = { h:view(-1, D), dy1, dh, ids }
    return { dh, dy[2] * h, nil }
  end
  function self:backward_dw(mb, accumulate)
    local h2, dy1, dh, ids = table.unpack(self.pending[mb])
    self.pending[mb] = nil
    tg.ops.gemm(W.wgrad, dy1, true, h2, false, 1.0, accumulate and 1.0 or 0.0)
    tg.ops.embedding_backward_dw(E.wgrad, nil, dh, ids, accumulate and 1 or 0)
  end
  return tg.nn.Module(self)
end

local function chunks(delay)
  tg.manual_seed(5)
  return { tuple_module(delay), tg.nn.Linear(D, D, { name = "out", fuse_wgrad_accumulation = true, delay_wgrad = delay }) }
end

local orders = { overlapping = {}, sequential = {} }
do
  local o = orders.overlapping
  for mb = 1, M do for c = 1, 2 do o[#o + 1] = { op = "F", chunk = c, mb = mb } end end
  for mb = M, 1, -1 do
    for c = 2, 1, -1 do o[#o + 1] = { op = "B", chunk = c, mb = mb }; o[#o + 1] = { op = "W", chunk = c, mb = mb } end
  end
  o = orders.sequential
  for mb = 1, M do
    for _, a in ipairs { { "F", 1 }, { "F", 2 }, { "B", 2 }, { "W", 2 }, { "B", 1 }, { "W", 1 } } do
      o[#o + 1] = { op = a[1], chunk = a[2], mb = mb }
    end
  end
end

-- One step: chunk 1 takes {a, b, ids} -> {y1, y2}; chunk 2 takes y1 -> z. Returns z, y2, chunk 1's input
-- gradients, whether the ids' gradient was nil each time, and the parameters' gradients.
local function step(graphed, mods, order, delay)
  local y1, y2, z, da, db, nil_ids = {}, {}, {}, {}, {}, true
  local f = graphed or mods
  tg.step_begin { microbatches = M }
  for _, a in ipairs(order) do
    local mb = a.mb
    if a.op == "F" and a.chunk == 1 then
      local y = f[1]:forward({ A[mb], Bs[mb], IDS[mb] }, mb)
      y1[mb], y2[mb] = y[1], y[2]:clone()
    elseif a.op == "F" then
      z[mb] = f[2]:forward(y1[mb], mb):clone()
    elseif a.op == "B" and a.chunk == 2 then
      y1[mb] = f[2]:backward(DZ[mb], mb)
    elseif a.op == "B" then
      local dx = f[1]:backward({ y1[mb], DY2[mb] }, mb)
      da[mb], db[mb] = dx[1]:clone(), dx[2]:clone()
      nil_ids = nil_ids and dx[3] == nil
    elseif delay then
      f[a.chunk]:backward_dw(mb)
    end
  end
  tg.step_end()
  local grads = {}
  for _, m in ipairs(mods) do
    for _, p in ipairs(m:parameters()) do grads[#grads + 1] = p.main_grad:clone() end
  end
  return { z, y2, da, db, grads }, nil_ids
end

local function same(a, b)
  for k = 1, #a do
    if #a[k] ~= #b[k] then return false end
    for i = 1, #a[k] do
      if not tg.allclose(a[k][i], b[k][i], 0, 0) then return false end
    end
  end
  return true
end

for _, oname in ipairs { "overlapping", "sequential" } do
  for _, delay in ipairs { false, true } do
    local mode = oname .. " order, " .. (delay and "delayed wgrad" or "wgrad not delayed")
    local order = orders[oname]
    local ref, eager_nil = step(nil, chunks(delay), order, delay)
    t.ok(eager_nil, mode .. ": eager, the i32 ids get no gradient (nil)")
    local mods = chunks(delay)
    local hooks = { 0 }
    for _, m in ipairs(mods) do m:register_wgrad_hook(function() hooks[1] = hooks[1] + 1 end) end
    local g = tg.graph.make_graphed(mods, { tuple = true, sample = { { A[1], Bs[1], IDS[1] }, A[1] }, microbatches = M,
      order = order })
    t.is(g[1]:reused() or g[1]:shared(), true, mode .. ": the set reuses or shares static buffers across microbatches")
    local ok, nil_ids = true, true
    for _ = 1, 2 do
      local got, n = step(g, mods, order, delay)
      ok = ok and same(got, ref)
      nil_ids = nil_ids and n
    end
    t.ok(ok, mode .. ": both outputs, the gradients of a and b and the weight gradients equal eager bit for bit in 2 steps")
    t.ok(nil_ids, mode .. ": graphed, the i32 ids get no gradient (nil)")
    t.is(hooks[1], 2 * M * (#mods[1]:parameters() + #mods[2]:parameters()), mode .. ": every parameter's hooks fired once per microbatch")

    tg.step_begin { microbatches = M }
    t.error_like(function() g[1]:forward({ A[1], Bs[1] }, 1) end, "chunk 1 mb 1: the chunk takes 3 inputs, got 2",
      mode .. ": a call with two of three inputs is refused")
    t.error_like(function() g[1]:forward(A[1], 1) end, "chunk 1 mb 1: the chunk takes a list of 3 inputs, got one tensor",
      mode .. ": a call with one tensor is refused")
    t.error_like(function() g[1]:forward({ A[1], tg.zeros({ B, T, D + 1 }), IDS[1] }, 1) end,
      "chunk 1 mb 1 input 2: got %[2,3,5%] f32, captured with %[2,3,4%] f32", mode .. ": an input of another shape is refused, naming its index and shapes")
    t.error_like(function() g[1]:forward({ A[1], Bs[1], tg.zeros({ B, T }) }, 1) end,
      "chunk 1 mb 1 input 3: got %[2,3%] f32, captured with %[2,3%] i32", mode .. ": ids of another dtype are refused, naming both")
    g:free()
    tg.step_end()
  end
end

-- backward's gradients: their count and the ids' (an i32 output would take none)
do
  local mods = chunks(false)
  local g = tg.graph.make_graphed(mods, { tuple = true, sample = { { A[1], Bs[1], IDS[1] }, A[1] }, microbatches = 1 })
  tg.step_begin { microbatches = 1 }
  local y = g[1]:forward({ A[1], Bs[1], IDS[1] }, 1)
  g[2]:forward(y[1], 1)
  local dy1 = g[2]:backward(DZ[1], 1)
  t.error_like(function() g[1]:backward(dy1, 1) end, "chunk 1 mb 1: the chunk has 2 outputs, got 1 gradients",
    "a backward with one of two output gradients is refused")
  t.error_like(function() g[1]:backward({ dy1, tg.zeros({ B, T }) }, 1) end,
    "gradient of output 2: got %[2,3%] f32, captured with %[2,3,4%] f32", "an output gradient of another shape is refused, naming it")
  g:free()
  tg.step_end()
end

-- one chunk: its sample list is the list itself
do
  tg.manual_seed(5)
  local em = tuple_module(false)
  tg.manual_seed(5)
  local g = tg.graph.make_graphed(tuple_module(false), { tuple = true, sample = { A[1], Bs[1], IDS[1] }, microbatches = 1 })
  local ok = true
  for _ = 1, 2 do
    tg.step_begin { microbatches = 1 }
    local ye = em:forward({ A[2], Bs[2], IDS[2] }, 1)
    local dxe = em:backward({ DZ[2], DY2[2] }, 1)
    tg.step_end()
    tg.step_begin { microbatches = 1 }
    local y = g:forward({ A[2], Bs[2], IDS[2] }, 1)
    local dx = g:backward({ DZ[2], DY2[2] }, 1)
    tg.step_end()
    for k = 1, 2 do ok = ok and tg.allclose(y[k], ye[k], 0, 0) and tg.allclose(dx[k], dxe[k], 0, 0) end
    ok = ok and dx[3] == nil and dxe[3] == nil
  end
  t.ok(ok, "one chunk made with sample = {a, b, ids}: outputs and input gradients equal eager bit for bit")
  g:free()
end

t.error_like(function()
  tg.graph.make_graphed(chunks(false), { tuple = true, sample = { { A[1], Bs[1], IDS[1] }, { A[1], A[1] } }, microbatches = 1 })
end, "chunk 2 %(a Linear%) takes one input, not a list of 2", "a list of samples for a module of one input is refused")
t.error_like(function()
  tg.graph.make_graphed(chunks(false), { tuple = true, sample = { { A[1], Bs[1], 3 }, A[1] }, microbatches = 1 })
end, "sample%[1%]%[3%] is a number, expected a tensor", "a sample list holding a number is refused")

t.done_testing()
