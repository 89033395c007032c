-- cuda-lm-head-fused-matches-cpu.lua — the fused LM head loss on the GPU (cuBLAS GEMMs a chunk, one
-- cross-entropy forward-and-backward kernel a chunk) gives the CPU reference's loss, input gradient and
-- weight gradients (a tied table's main_grad and an own weight's grad), f32 and bf16, with N not a multiple
-- of the chunk, ignored targets, a vocabulary that is not a multiple of 8 and GPT-2's padded one, the
-- backward at once and computed again in backward. A bad target fails the next read. Without a CUDA device
-- it skips.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local t = require "tap"
local G = require "grads"
if tg.device_count("cuda") == 0 then t.skip_all("no CUDA device") end
local dev = "cuda:0"

local function maxdiff(a, b)
  local d, m = 0, 1e-3
  for i = 1, #b do
    d = math.max(d, math.abs(a[i] - b[i]))
    m = math.max(m, math.abs(b[i]))
  end
  return d / m
end

local function on(device, dt, x)
  local y = tg.zeros(x:shape(), { dtype = dt or x.dtype, device = device })
  y:copy_(x)
  return y
end

local function run(device, o, x, ids, tgt, ref_params)
  local emb
  if o.tied then
    emb = nn.Embedding { num_embeddings = o.V, embedding_dim = o.C, max_position_embeddings = 64, dtype = o.dtype,
      device = device, fuse_wgrad_accumulation = o.fuse, name = "embed" }
  end
  local head = nn.LMHead { hidden_size = o.C, vocab_size = o.V, tied = emb, dtype = o.dtype, device = device,
    fuse_wgrad_accumulation = o.fuse, fused_loss = true, loss_chunk_rows = o.rows, name = "head" }
  local ps = head:parameters()
  if emb then for _, p in ipairs(emb:parameters()) do ps[#ps + 1] = p end end
  if ref_params then -- the CPU run's weights
    for i, p in ipairs(ps) do
      p.data:copy_(ref_params[i].data)
      if p.master then p.master:copy_(ref_params[i].master) end
    end
  end
  x, ids, tgt = on(device, o.dtype, x), on(device, nil, ids), on(device, nil, tgt)
  tg.step_begin { microbatches = 1 }
  local h = emb and emb:forward(ids, 1) + x or x
  local loss = G.flatten(head:loss(h, tgt, 1, -1, o.promise and 0.5 or nil):totable())
  local dx = head:backward(0.5, 1)
  if emb then emb:backward(dx, 1) end
  tg.step_end()
  local r = { loss = loss, dx = G.flatten(dx:totable()), grad = {}, params = ps }
  for _, p in ipairs(ps) do r.grad[p.name] = G.flatten((o.fuse and p.main_grad or p.grad):totable()) end
  return r
end

for _, case in ipairs {
  { dtype = "f32", V = 1000, C = 64, rows = 7, N = { 3, 11 }, tied = true, fuse = true, promise = true, tol = 1e-4 },
  { dtype = "f32", V = 1003, C = 32, rows = 5, N = { 2, 9 }, tied = false, fuse = false, promise = false, tol = 1e-4 },
  { dtype = "bf16", V = 50304, C = 64, rows = 16, N = { 2, 21 }, tied = true, fuse = true, promise = true, tol = 3e-2 },
  { dtype = "bf16", V = 1003, C = 64, rows = 6, N = { 4, 5 }, tied = false, fuse = true, promise = false, tol = 3e-2 },
  { dtype = "bf16", V = 2048, C = 48, rows = 9, N = { 3, 7 }, tied = false, fuse = false, promise = true, tol = 3e-2 },
} do
  local what = string.format("%s V=%d rows %d of %d, %s, %s, %s", case.dtype, case.V, case.rows, case.N[1] * case.N[2],
    case.tied and "tied" or "own weight", case.fuse and "main_grad" or "grad", case.promise and "backward at once" or "recomputed")
  tg.manual_seed(7)
  local x = tg.randn { case.N[1], case.N[2], case.C }
  local n = case.N[1] * case.N[2]
  local ids, tg_ = {}, {}
  for i = 1, n do
    ids[i] = (i * 7) % case.V
    tg_[i] = i % 5 == 0 and -1 or (i * 7919) % case.V
  end
  ids = tg.tensor(ids, { dtype = "i32" }):view { case.N[1], case.N[2] }
  local tgt = tg.tensor(tg_, { dtype = "i32" }):view { case.N[1], case.N[2] }
  local cpu = run("cpu", case, x, ids, tgt)
  local gpu = run(dev, case, x, ids, tgt, cpu.params)
  t.ok(maxdiff(gpu.loss, cpu.loss) <= case.tol, string.format("%s: loss %.6f vs CPU %.6f", what, gpu.loss[1], cpu.loss[1]))
  t.is(gpu.loss[2], cpu.loss[2], what .. ": the same count of valid targets")
  local d = maxdiff(gpu.dx, cpu.dx)
  t.ok(d <= case.tol, string.format("%s: dx as the CPU's (worst %.3g)", what, d))
  for name, g in pairs(cpu.grad) do
    d = maxdiff(gpu.grad[name], g)
    t.ok(d <= case.tol, string.format("%s: gradient of %s as the CPU's (worst %.3g)", what, name, d))
  end
end

-- a target outside the vocabulary fails the next read of the device, naming it
do
  local head = nn.LMHead { hidden_size = 16, vocab_size = 40, device = dev, loss_chunk_rows = 3 }
  local x = tg.randn({ 2, 4, 16 }, { device = dev })
  local bad = tg.tensor({ { 1, 2, 3, 4 }, { 5, 41, 7, 8 } }, { dtype = "i32", device = dev })
  local loss
  t.lives_ok(function() loss = head:loss(x, bad, 1, -1, 1.0) end, "a fused loss with a bad target launches")
  t.error_like(function() return loss:totable() end, "target 41 at row 5 is outside the vocabulary of 40",
    "reading the loss names the target and its row")
  head:drop_saved()
end

t.done_testing()
