-- dist/zero1-matches-ddp.lua — zero1 (reduce-scatter, AdamW on the local shard, all-gather) leaves the same parameters as ddp + optim.AdamW
-- after every step (bit for bit in f32 and bf16; clipping within rounding), its shards hold ddp's reduced gradient, and its state is 1/n of AdamW's.
-- With model = (all-gathers finished in forward pre-hooks) step() only starts the gathers: the parameters stay as
-- they were until a module's forward, which then sees ddp's parameters (outputs equal ddp's every step), module by
-- module (the first layer's forward gathers its bucket and not the last layer's).
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
  local ys = {}
  for m = 1, M do ys[m] = model:forward(xs[m], m):clone() end
  for m = M, 1, -1 do model:backward(dys[m], m) end
  tg.step_end()
  return ys
end

local function snapshot(model)
  local out = {}
  for i, p in ipairs(model:parameters()) do out[i] = p.data:clone() end
  return out
end

local function same_list(xs, ys)
  for i = 1, #xs do
    if not tg.allclose(xs[i], ys[i], 0, 0) then return false end
  end
  return true
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
  local c = build(dtype)
  local zc = reduce.zero1 { params = c:parameters(), model = c, bucket_numel = bucket, lr = OPT.lr, beta1 = OPT.beta1,
    beta2 = OPT.beta2, eps = OPT.eps, weight_decay = OPT.weight_decay, max_norm = max_norm }
  local same_params, same_shards, worst = true, true, 0
  local same_outputs, deferred, all_pending = true, true, true
  local tol = max_norm and 1e-6 or 0
  for s = 1, STEPS do
    local ya = step(a, xs[s], dys[s])
    ddp:finish()
    local yc = step(c, xs[s], dys[s])
    same_outputs = same_outputs and same_list(yc, ya)
    zc:finish()
    local before = snapshot(c)
    zc:step()
    all_pending = all_pending and zc:pending_gathers() == #zc.buckets
    deferred = deferred and same_list(snapshot(c), before)
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
  -- the overlapped variant: gathers wait for the forward pre-hooks
  t.ok(all_pending and deferred, label .. ": with model =, step() starts every bucket's all-gather and leaves the "
    .. "parameters as they were (no synchronous gather)")
  t.ok(same_outputs, string.format("%s: with model =, every forward of steps 1..%d equals ddp's bit for bit (the "
    .. "pre-hooks gathered the new parameters before each module ran)", label, STEPS))
  local first, last = c:children()[1], c:children()[3]
  local pa = a:parameters()
  if bucket == 100 and not max_norm and dtype == "f32" then
    -- fc_in's and fc_out's parameters lie in different buckets: one module's forward gathers only its own
    first:forward(xs[1][1]); first:drop_saved()
    local fc_in_new = tg.allclose(first:parameters()[1].data, pa[1].data, 0, 0)
    local fc_out_old = not tg.allclose(last:parameters()[1].data, pa[#pa - 1].data, 0, 0)
    t.ok(fc_in_new and fc_out_old and zc:pending_gathers() > 0, string.format("a forward of the first layer alone "
      .. "gathers its bucket (%d of %d buckets still pending, the last layer still holds its old weight)",
      zc:pending_gathers(), #zc.buckets))
  end
  zc:gather()
  local cp = c:parameters()
  local gathered = zc:pending_gathers() == 0
  for i = 1, #pa do
    gathered = gathered and tg.allclose(cp[i].data, pa[i].data, 0, tol)
    if pa[i].master then gathered = gathered and tg.allclose(cp[i].master, pa[i].master, 0, tol) end
  end
  t.ok(gathered, label .. ": with model =, gather() completes the pending gathers: parameters equal ddp + AdamW")
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

-- model = must cover every parameter: one owned by no module of model would be gathered after its forward
local m1, m2 = build("f32"), build("f32")
local ok, err = pcall(reduce.zero1, { params = m1:parameters(), model = m2, bucket_numel = 100 })
t.ok(not ok and tostring(err):match("zero1: parameter 'fc_[%w_]+%.[%w]+' belongs to no module of model") ~= nil
  and not pcall(m2:children()[1].remove_forward_pre_hook, m2:children()[1], 1),
  "zero1 refuses a model that does not own its parameters, naming the parameter, and registers no pre-hook")

t.done_testing()
