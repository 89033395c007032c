-- dist/zero1-matches-ddp.lua — zero1 (reduce-scatter, AdamW on the local shard, all-gather) leaves the same parameters as ddp + optim.AdamW
-- after every step (bit for bit in f32 and bf16; clipping within rounding), its shards hold ddp's reduced gradient, and its state is 1/n of AdamW's.
local tg = require "tegraph"
local t = require "dist_tap"
local reduce = require "tegraph.reduce"
local optim = require "tegraph.optim"

local n, r = t.size, t.rank
local D, H, TOK, M, STEPS = 8, 12, 5, 2, 3
local OPT = { lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1 }

local function build(dtype)
  tg.manual_seed(4321)
  local o = function(x)
    x.dtype, x.fuse_wgrad_accumulation = dtype, true
    return x
  end
  return tg.nn.Sequential {
    tg.nn.Linear(D, H, o { name = "fc_in" }),
    tg.nn.LayerNormMLP(H, 2 * H, o { name = "mlp" }),
    tg.nn.Linear(H, D, o { name = "fc_out" }),
    name = "net",
  }
end

-- This rank's data for each step (differs across ranks and steps).
local function data(dtype)
  tg.manual_seed(7 + r)
  local xs, dys = {}, {}
  for s = 1, STEPS do
    xs[s], dys[s] = {}, {}
    for m = 1, M do
      xs[s][m] = tg.randn({ TOK, D }, { dtype = dtype })
      dys[s][m] = tg.randn({ TOK, D }, { dtype = dtype })
    end
  end
  return xs, dys
end

local function step(model, xs, dys)
  tg.step_begin { microbatches = M }
  for m = 1, M do model:forward(xs[m], m) end
  for m = M, 1, -1 do model:backward(dys[m], m) end
  tg.step_end()
end

local function compare(dtype, bucket, max_norm)
  local label = string.format("%s, buckets of %d, %s", dtype, bucket, max_norm and "clipped" or "no clipping")
  local xs, dys = data(dtype)
  local a, b = build(dtype), build(dtype)
  local ddp = reduce.ddp { params = a:parameters(), bucket_numel = bucket }
  local opt = optim.AdamW(a:parameters(), { lr = OPT.lr, beta1 = OPT.beta1, beta2 = OPT.beta2, eps = OPT.eps,
    weight_decay = OPT.weight_decay, max_norm = max_norm })
  local z = reduce.zero1 { params = b:parameters(), bucket_numel = bucket, lr = OPT.lr, beta1 = OPT.beta1,
    beta2 = OPT.beta2, eps = OPT.eps, weight_decay = OPT.weight_decay, max_norm = max_norm }
  local same_params, same_shards, worst = true, true, 0
  local tol = max_norm and 1e-6 or 0
  for s = 1, STEPS do
    step(a, xs[s], dys[s])
    ddp:finish()
    step(b, xs[s], dys[s])
    z:finish()
    -- the shard this rank owns holds the reduced gradient ddp has everywhere
    -- (compared per parameter piece: the two buffers pad differently)
    local zb, db = z.grad_buffer, ddp.grad_buffer
    local pa = {}
    for _, p in ipairs(a:parameters()) do pa[p.name] = p end
    for bi, sh in ipairs(z.shards) do
      local n_sh = sh.grad:numel()
      local s0 = z.buckets[bi].start + r * n_sh
      for _, p in ipairs(z.buckets[bi].params) do
        local lo, hi = math.max(zb:offset(p), s0), math.min(zb:offset(p) + p:numel(), s0 + n_sh)
        if lo < hi then
          local mine = zb.data:narrow(lo, hi - lo)
          local theirs = db.data:narrow(db:offset(pa[p.name]) + lo - zb:offset(p), hi - lo)
          same_shards = same_shards and tg.allclose(mine, theirs, 0, tol)
        end
      end
    end
    opt:step()
    z:step()
    local pa, pb = a:parameters(), b:parameters()
    for i = 1, #pa do
      local okc, d = tg.allclose(pb[i].data, pa[i].data, 0, tol)
      if pa[i].master then
        local okm, dm = tg.allclose(pb[i].master, pa[i].master, 0, tol)
        okc, d = okc and okm, math.max(d, dm)
      end
      if not okc then io.stderr:write(string.format("rank %d step %d: %s differs by %g\n", r, s, pa[i].name, d)) end
      same_params = same_params and okc
      worst = math.max(worst, d)
    end
  end
  t.ok(same_shards, label .. ": each rank's reduce-scattered shard equals ddp's reduced gradient there"
    .. (tol == 0 and "" or " (tol " .. tol .. ": the clipping norms sum in different orders)"))
  t.ok(same_params, string.format("%s: parameters equal ddp + AdamW after each of %d steps (%s; max diff %.3g)", label,
    STEPS, tol == 0 and "exact" or "tol " .. tol, worst))
  -- every rank holds the same parameters after the all-gather
  local agree = true
  for _, p in ipairs(b:parameters()) do
    local mine = p.data:to("f32")
    local root = tg.comm.broadcast(mine:clone(), 0)
    agree = agree and tg.allclose(mine, root, 0, 0)
  end
  t.ok(agree, label .. ": every rank holds rank 0's parameters")
  return z, opt
end

local z, opt = compare("f32", 100, nil)
compare("f32", 1000000, nil) -- one bucket
compare("bf16", 100, nil)
compare("f32", 100, 0.05)

-- optimizer state is sharded: m and v of a rank cover 1/n of the (padded) buffer
local state, full = 0, 0
for _, s in ipairs(z.shards) do state = state + s.m:numel() end
for _, st in ipairs(opt.state) do full = full + st.m:numel() end
t.ok(state * n == z.grad_buffer.numel, string.format("AdamW state per rank: %d elements, 1/%d of the buffer's %d "
  .. "(parameters: %d, the rest alignment padding)", state, n, z.grad_buffer.numel, full))
t.ok(#z.buckets >= 3, string.format("the %d buckets are padded to a multiple of %d ranks", #z.buckets, n))

t.done_testing()
