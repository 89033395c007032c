-- lm-head-fused-loss-matches-unfused.lua — the fused LM head (the loss in chunks of rows, the
-- (N, V) logits never made) gives the unfused head's loss, input gradient and weight gradients:
-- f32 tightly and bf16 within bf16 rounding, with N not a multiple of the chunk, ignore_index
-- targets, the backward at once (dloss promised) or computed again in backward, several
-- microbatches in flight, a tied table's main_grad and an own weight's grad; bad targets and
-- misuse are refused naming the problem.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local t = require "tap"
local G = require "grads"

local C, V = 8, 13

local function flat(x) return G.flatten(x:totable()) end

-- the largest |a - b| over two flat lists, relative to the largest |b| (at least 1)
local function maxdiff(a, b)
  local d, m = 0, 1
  for i = 1, #b do
    d = math.max(d, math.abs(a[i] - b[i]))
    m = math.max(m, math.abs(b[i]))
  end
  return d / m
end

-- A head (tied to an embedding when tied) with the same weights for every o: seeded construction.
local function build(o)
  tg.manual_seed(11)
  local common = { dtype = o.dtype, fuse_wgrad_accumulation = o.fuse }
  local emb
  if o.tied then
    emb = nn.Embedding { num_embeddings = V, embedding_dim = C, max_position_embeddings = 16, dtype = o.dtype,
      fuse_wgrad_accumulation = o.fuse, name = "embed" }
  end
  local head = nn.LMHead { hidden_size = C, vocab_size = V, tied = emb, dtype = o.dtype, fuse_wgrad_accumulation = o.fuse,
    fused_loss = o.fused, loss_chunk_rows = o.rows, name = "head" }
  return head, emb
end

-- Runs microbatches (F of all, then B of all in order) and returns losses, dx's and gradients.
local function run(o, xs, ids, tgts, dloss)
  local head, emb = build(o)
  local res = { loss = {}, dx = {}, grad = {} }
  tg.step_begin { microbatches = #xs }
  local hs = {}
  for mb = 1, #xs do
    local h = xs[mb]
    if emb then h = emb:forward(ids[mb], mb) + xs[mb] end
    hs[mb] = h
    res.loss[mb] = G.flatten(head:loss(h, tgts[mb], mb, -1, o.promise and dloss or nil):totable())
  end
  for mb = 1, #xs do
    local dx = head:backward(dloss, mb)
    res.dx[mb] = flat(dx)
    if emb then emb:backward(dx, mb) end
  end
  tg.step_end()
  local ps = head:parameters()
  if emb then ps[#ps + 1] = emb:parameters()[1] end
  for _, p in ipairs(ps) do res.grad[p.name] = flat(o.fuse and p.main_grad or p.grad) end
  return res
end

local function compare(what, o, tol, xs, ids, tgts, dloss)
  local ref = run({ dtype = o.dtype, fuse = o.fuse, tied = o.tied, fused = false }, xs, ids, tgts, dloss)
  local got = run(o, xs, ids, tgts, dloss)
  local worst = { loss = 0, dx = 0, grad = 0 }
  for mb = 1, #xs do
    worst.loss = math.max(worst.loss, maxdiff(got.loss[mb], ref.loss[mb]))
    worst.dx = math.max(worst.dx, maxdiff(got.dx[mb], ref.dx[mb]))
  end
  local names = 0
  for name, g in pairs(ref.grad) do
    names = names + 1
    t.ok(got.grad[name] ~= nil, what .. ": " .. name .. " has a gradient")
    worst.grad = math.max(worst.grad, maxdiff(got.grad[name] or {}, g))
    local nz = 0
    for _, v in ipairs(g) do if v ~= 0 then nz = nz + 1 end end
    if o.zero then
      t.is(nz, 0, what .. ": the gradient of " .. name .. " is zero")
    else
      t.ok(nz > 0, what .. ": the reference gradient of " .. name .. " is not all zero")
    end
  end
  t.ok(names >= 3, what .. ": norm weight, norm bias and the projection's weight compared")
  t.ok(worst.loss <= tol, string.format("%s: loss and count as unfused (worst %.3g, tol %.3g)", what, worst.loss, tol))
  t.ok(worst.dx <= tol, string.format("%s: dx as unfused (worst %.3g)", what, worst.dx))
  t.ok(worst.grad <= tol, string.format("%s: weight gradients as unfused (worst %.3g)", what, worst.grad))
  return ref, got
end

-- two microbatches of 2 x 5 = 10 rows (not a multiple of chunks of 4 or 3), some targets ignored
tg.manual_seed(3)
local xs, ids, tgts = {}, {}, {}
for mb = 1, 2 do
  xs[mb] = tg.randn { 2, 5, C }
  ids[mb] = tg.tensor({ { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }, { dtype = "i32" })
end
tgts[1] = tg.tensor({ { 1, 12, 3, -1, 4 }, { 5, 6, -1, 0, 9 } }, { dtype = "i32" })
tgts[2] = tg.tensor({ { 2, 2, 7, 11, 4 }, { -1, 6, 8, 0, 10 } }, { dtype = "i32" })

for _, dt in ipairs { "f32", "bf16" } do
  local tol = dt == "f32" and 2e-6 or 2e-2
  local xd = {}
  for mb = 1, 2 do
    xd[mb] = tg.zeros({ 2, 5, C }, { dtype = dt })
    xd[mb]:copy_(xs[mb])
  end
  for _, fuse in ipairs { true, false } do
    for _, tied in ipairs { false, true } do
      for _, promise in ipairs { true, false } do
        for _, rows in ipairs { 4, 3, 10 } do
          local what = string.format("%s, %s, %s, %s, chunks of %d", dt, tied and "tied table" or "own weight",
            fuse and "main_grad" or "grad", promise and "backward at once" or "recomputed in backward", rows)
          compare(what, { dtype = dt, fuse = fuse, tied = tied, fused = true, rows = rows, promise = promise }, tol,
            xd, ids, tgts, 0.5)
        end
      end
    end
  end
end

-- the automatic chunk (one chunk here) and one microbatch
compare("f32, automatic chunk, one microbatch", { dtype = "f32", fuse = true, fused = true, promise = true }, 2e-6,
  { xs[1] }, { ids[1] }, { tgts[1] }, 1.0)

-- every target ignored: loss [0, 0], zero gradients, as unfused
do
  local none = tg.tensor({ { -1, -1, -1, -1, -1 }, { -1, -1, -1, -1, -1 } }, { dtype = "i32" })
  local _, got = compare("f32, every target ignored", { dtype = "f32", fuse = true, fused = true, rows = 4, promise = true,
    zero = true }, 0, { xs[1] }, { ids[1] }, { none }, 1.0)
  t.is_deeply(got.loss[1], { 0, 0 }, "every target ignored: loss is [0, 0]")
end

-- refused: a target outside the vocabulary (as the unfused loss), a backward with another dloss
-- than promised, backward(dy) after a fused loss, bad options
do
  local head = build { dtype = "f32", fused = true, rows = 4 }
  local bad = tg.tensor({ { 1, 2, 3, 13, 4 }, { 5, 6, 7, 0, 9 } }, { dtype = "i32" })
  -- on the CPU loss() refuses at once; on a GPU the device records the bad id and the next read fails
  t.error_like(function() return head:loss(xs[1], bad, 1, -1, 1.0):totable() end, "target 13 at row 3 is outside the vocabulary of 13",
    "a target outside the vocabulary is refused, naming target, row and vocabulary")
  head:drop_saved()
  local neg = tg.tensor({ { 1, 2, 3, 4, 4 }, { 5, -7, 7, 0, 9 } }, { dtype = "i32" })
  t.error_like(function() return head:loss(xs[1], neg, 1):totable() end, "target %-7 at row 6 is outside the vocabulary of 13",
    "a negative target other than ignore_index is refused (loss without dloss too)")
  head:drop_saved()
  head:loss(xs[1], tgts[1], 1, -1, 0.5)
  t.error_like(function() head:backward(0.25, 1) end, "dloss = 0.25, but its forward_loss was promised dloss = 0.5",
    "a backward with another dloss than promised names both")
  t.error_like(function() head:backward(tg.zeros { 2, 5, V }, 1) end, "after a fused forward_loss",
    "backward(dy) after a fused loss says why")
  t.error_like(function() head:loss(xs[1], tgts[1], 2, -1, 0 / 0) end, "dloss = .*nan.* is not finite",
    "a non-finite promised dloss is refused")
  t.error_like(function() nn.LMHead { hidden_size = C, vocab_size = V, fused_loss = "yes" } end,
    "option 'fused_loss' must be a boolean", "fused_loss must be a boolean")
  t.error_like(function() nn.LMHead { hidden_size = C, vocab_size = V, loss_chunk_rows = 0 } end,
    "option 'loss_chunk_rows' must be a positive integer", "loss_chunk_rows must be positive")
end

-- a GPT trained by tegraph.train (which promises dloss = 1/M), eagerly and with graphed layers: the fused head
-- (chunks of 5 rows of 12) follows the unfused one step by step, with hooks on every parameter
do
  local train = require "tegraph.train"
  local VV, T, B, M, STEPS = 11, 6, 2, 2, 3
  math.randomseed(3)
  local function batch()
    local v = {}
    for i = 1, B * T do v[i] = math.random(0, VV - 1) end
    return tg.tensor(v, { dtype = "i32" }):view({ B, T })
  end
  local steps = {}
  for s = 1, STEPS do
    steps[s] = { {}, {} }
    for m = 1, M do steps[s][1][m], steps[s][2][m] = batch(), batch() end
  end
  local function train_run(fused, graph)
    tg.manual_seed(5)
    local model = nn.GPT { vocab_size = VV, max_position_embeddings = T, hidden_size = 8, num_attention_heads = 2,
      num_layers = 2, delay_wgrad = graph and "layers" or nil, fuse_wgrad_accumulation = true, fused_lm_head = fused,
      lm_head_chunk_rows = 5 }
    local tr = train.new { model = model, microbatches = M, hooks = "noop", adamw = { lr = 1e-2 }, graph = graph,
      sample = graph and tg.zeros({ B, T }, { dtype = "i32" }) or nil }
    local out = {}
    for s = 1, STEPS do
      for _, v in ipairs(tr:losses(tr:step(steps[s][1], steps[s][2], 1e-2))) do out[#out + 1] = v end
    end
    local ps = {}
    for _, p in ipairs(model:parameters()) do ps[#ps + 1] = G.flatten(p.data:totable()) end
    return out, G.flatten(ps)
  end
  for _, graph in ipairs { false, true } do
    local what = graph and "tegraph.train, graphed layers" or "tegraph.train, eager"
    local ul, up = train_run(false, graph)
    local fl, fp = train_run(true, graph)
    t.ok(maxdiff(fl, ul) <= 1e-5, string.format("%s: fused losses follow unfused over %d steps (worst %.3g)", what, STEPS,
      maxdiff(fl, ul)))
    t.ok(ul[#ul] ~= ul[1], what .. ": the losses change (the optimizer ran)")
    t.ok(maxdiff(fp, up) <= 1e-5, string.format("%s: parameters after the steps as unfused (worst %.3g)", what, maxdiff(fp, up)))
  end
end

-- what a step issues and holds (tg.device_stats of the default device, where the tensors are): the fused
-- loss issues 3 GEMMs and one cross-entropy kernel a chunk, all in forward_loss when dloss is promised, and
-- holds one chunk of logits instead of all of them
do
  local VV, rows = 4096, 64
  tg.manual_seed(2)
  local x = tg.randn { 4, 16, C }
  local ids = tg.zeros({ rows }, { dtype = "i32" })
  local function measure(fused, chunk)
    tg.manual_seed(1)
    local h = nn.LMHead { hidden_size = C, vocab_size = VV, fused_loss = fused, loss_chunk_rows = chunk,
      fuse_wgrad_accumulation = true }
    collectgarbage()
    tg.reset_peak_memory(tg.default_device())
    local s0 = tg.device_stats(tg.default_device())
    tg.step_begin { microbatches = 1 }
    h:loss(x, ids, 1, -1, fused and 1.0 or nil)
    local s1 = tg.device_stats(tg.default_device())
    h:backward(1.0, 1)
    tg.step_end()
    local s2 = tg.device_stats(tg.default_device())
    return { fk = s1.kernels - s0.kernels, fg = s1.gemms - s0.gemms, bk = s2.kernels - s1.kernels,
      bg = s2.gemms - s1.gemms, peak = s2.peak_memory - s0.memory }
  end
  local un, one, eight = measure(false), measure(true, rows), measure(true, 8)
  t.is(un.fg + un.bg, 3, "unfused: 3 GEMMs (logits in forward_loss, dX and dW in backward)")
  t.is(one.fg, 3, "fused, one chunk: 3 GEMMs in forward_loss")
  t.is(eight.fg, 24, "fused, 8 chunks: 24 GEMMs in forward_loss (3 a chunk)")
  t.is(eight.bg, 0, "fused with dloss promised: no GEMM left for backward")
  t.is(eight.fk - one.fk, 7, "one cross-entropy kernel a chunk")
  local logits = rows * VV * 4
  t.ok(un.peak >= logits, string.format("unfused: the peak (%d bytes) holds all logits (%d)", un.peak, logits))
  t.ok(eight.peak >= 8 * VV * 4 and eight.peak < logits / 4,
    string.format("fused, chunks of 8 rows: the peak (%d bytes) holds a chunk of logits, under a quarter of all", eight.peak))
  local now = tg.device_stats(tg.default_device())
  t.ok(now.memory >= 0 and now.peak_memory >= now.memory, "peak_memory is at least the memory held now")
end

t.done_testing()
