-- graph-chunks-take-several-inputs.lua — a graphed chunk whose sample is a pair {x, res} takes two inputs: its F
-- graph runs forward_res (y = res + f(x), the add fused in the Linear's GEMM) and backward returns the gradients of
-- both inputs (dx, dres = dy). Outputs, gradients and hooks equal eager bit for bit over two steps, with a
-- one-input chunk after it and reuse across overlapping microbatches; calls with the wrong inputs are refused.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, ROWS, M = 8, 5, 3
tg.manual_seed(41)
local X, R, DY = {}, {}, {}
for mb = 1, M do X[mb], R[mb], DY[mb] = tg.randn({ ROWS, D }), tg.randn({ ROWS, D }), tg.randn({ ROWS, D }) end

local function chunks(delay)
  tg.manual_seed(5)
  local o = function(name) return { name = name, fuse_wgrad_accumulation = true, delay_wgrad = delay } end
  return { tg.nn.Linear(D, D, o "c1"), tg.nn.LayerNormLinear(D, D, o "c2") }
end

-- all F, then B (and W) from the last microbatch back: microbatches overlap
local order = {}
for mb = 1, M do for c = 1, 2 do order[#order + 1] = { op = "F", chunk = c, mb = mb } end end
for mb = M, 1, -1 do
  for c = 2, 1, -1 do
    order[#order + 1] = { op = "B", chunk = c, mb = mb }; order[#order + 1] = { op = "W", chunk = c, mb = mb }
  end
end

-- One step: chunk 1 takes (x, res) -> h; chunk 2 takes h. Returns outputs, chunk 1's gradients of x and res, and
-- the parameters' gradients.
local function step(graphed, mods, delay)
  local h, y, dx, dres, dh = {}, {}, {}, {}, {}
  tg.step_begin { microbatches = M }
  for _, a in ipairs(order) do
    local mb = a.mb
    if a.op == "F" and a.chunk == 1 then
      h[mb] = graphed and graphed[1]:forward({ X[mb], R[mb] }, mb) or mods[1]:forward_res(X[mb], R[mb], mb)
    elseif a.op == "F" then
      y[mb] = (graphed and graphed[2] or mods[2]):forward(h[mb], mb):clone()
    elseif a.op == "B" and a.chunk == 2 then
      dh[mb] = (graphed and graphed[2] or mods[2]):backward(DY[mb], mb)
    elseif a.op == "B" then
      if graphed then
        local gx, gr = graphed[1]:backward(dh[mb], mb)
        dx[mb], dres[mb] = gx:clone(), gr:clone()
      else
        dx[mb], dres[mb] = mods[1]:backward(dh[mb], mb):clone(), dh[mb]:clone()
      end
    elseif delay then
      (graphed and graphed[a.chunk] or mods[a.chunk]):backward_dw(mb)
    end
  end
  tg.step_end()
  local grads = {}
  for _, m in ipairs(mods) do
    for _, p in ipairs(m:parameters()) do grads[#grads + 1] = p.main_grad:clone() end
  end
  return { y, dx, dres, grads }
end

local function same(a, b)
  for k = 1, #a do
    for i = 1, #a[k] do
      if not tg.allclose(a[k][i], b[k][i], 0, 0) then return false end
    end
  end
  return true
end

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed wgrad" or "wgrad not delayed"
  local emods = chunks(delay)
  local ref = step(nil, emods, delay)
  local mods = chunks(delay)
  local hooks = { 0 }
  for _, m in ipairs(mods) do m:register_wgrad_hook(function() hooks[1] = hooks[1] + 1 end) end
  local g = tg.graph.make_graphed(mods, { sample = { { X[1], R[1] }, tg.zeros({ ROWS, D }) }, microbatches = M,
    order = order })
  t.ok(g[1]:reused(), mode .. ": the two-input set reuses static buffers across microbatches")
  local ok = true
  for _ = 1, 2 do ok = ok and same(step(g, mods, delay), ref) end
  t.ok(ok, mode .. ": outputs, gradients of x and res and weight gradients equal eager (forward_res) bit for bit in 2 steps")
  local nparams = #mods[1]:parameters() + #mods[2]:parameters()
  t.is(hooks[1], 2 * M * nparams, mode .. ": every parameter's hooks fired once per microbatch")

  tg.step_begin { microbatches = M }
  t.error_like(function() g[1]:forward(X[1], 1) end, "chunk 1 mb 1: the chunk takes two inputs %(x, res%), got one",
    mode .. ": a two-input chunk called with one input is refused")
  t.error_like(function() g[1]:forward({ X[1], tg.zeros({ ROWS, D + 1 }) }, 1) end, "residual input: got %[5, ?9%]",
    mode .. ": a residual of the wrong shape is refused, naming its shape")
  t.error_like(function() g[1]:forward({ X[1] }, 1) end, "a tensor or a pair {x, res}", mode .. ": a list of one is refused")
  g:free()
  tg.step_end()
end

local mods = chunks(false)
t.error_like(function() tg.graph.make_graphed(mods, { sample = { { X[1], R[1], R[1] }, X[1] }, microbatches = 1 }) end,
  "sample%[1%] must be a tensor or a pair {x, res}", "a sample of three tensors is refused")
t.error_like(function() tg.graph.make_graphed(mods, { sample = { { X[1], tg.zeros({ ROWS, D + 2 }) }, X[1] },
  microbatches = 1 }) end, "c1", "a residual sample of the wrong shape fails in warm-up, naming the module")

t.done_testing()
