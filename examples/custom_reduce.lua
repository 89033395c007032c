-- custom_reduce.lua — two gradient-reduce policies a user writes in a few dozen lines each, from wgrad hooks + tegraph.comm,
-- trained side by side with the stock ddp policy on a small regression model.
--
--   tegraph run -n 2 examples/custom_reduce.lua        (any number of ranks; one works too)
--   tegraph run examples/custom_reduce.lua --help      (--steps N, --every K)
--
-- 1. bf16_error_feedback: each bucket is all-reduced in bf16 (half the bytes) as soon as its last wgrad is in;
--    what the rounding lost is kept per element and added to the next step's gradient (error feedback).
-- 2. local_sgd: no gradient traffic at all; ranks step on their own gradients and average the parameters
--    every K steps.
-- The script checks what each policy promises and exits non-zero when a check fails.
local tg = require "tegraph"
local reduce = require "tegraph.reduce"
local optim = require "tegraph.optim"
local cli = require "tegraph.cli"
local ops = tg.ops

local defaults = {
  { "steps", 16, "optimizer steps of each policy's run (at least 2 * --every + 1: local SGD is checked across two averagings)", min = 1 },
  { "every", 4, "local SGD: average the parameters every K steps (at least 2: the check needs steps between averagings)", min = 2 },
}
local opt = cli.parse("examples/custom_reduce.lua", defaults, arg)
for _, k in ipairs { "steps", "every" } do
  if math.type(opt[k]) ~= "integer" then
    io.stderr:write(string.format("custom_reduce.lua: --%s needs an integer (got %s)\n", k, tostring(opt[k])))
    cli.usage("examples/custom_reduce.lua", defaults, io.stderr)
    os.exit(2)
  end
end
if opt.steps < 2 * opt.every + 1 then
  io.stderr:write(string.format("custom_reduce.lua: --steps %d is below 2 * --every + 1 = %d (local SGD is checked " ..
    "across two averagings)\n", opt.steps, 2 * opt.every + 1))
  cli.usage("examples/custom_reduce.lua", defaults, io.stderr)
  os.exit(2)
end

local comm = tg.comm.world()
local rank, size = comm:rank(), comm:size()

------------------------------------------------------------------------ policy 1: bf16 + error feedback
local function bf16_error_feedback(params, o)
  o = o or {}
  local self = { pending = {}, state = {} }
  -- reduce.tracker calls on_ready(bucket) once every parameter of the bucket has fired its
  -- hook for the last microbatch: the bucket's f32 gradient (bucket.tensor) is complete.
  self.tracker = reduce.tracker { name = "bf16+ef", params = params, bucket_numel = o.bucket_numel,
    on_ready = function(b)
      local s = self.state[b.index]
      if not s then
        local dev = b.tensor.device
        s = { err = tg.zeros({ b.numel }, { device = dev }), low = tg.zeros({ b.numel }, { dtype = "bf16", device = dev }) }
        self.state[b.index] = s
      end
      b.tensor:add_(s.err)          -- g + e: last step's rounding error goes back in
      s.low:copy_(b.tensor)         -- bf16(g + e)
      s.err:copy_(s.low)
      s.err:axpby_(1, b.tensor, -1) -- e = (g + e) - bf16(g + e)
      self.pending[#self.pending + 1] = { comm:all_reduce(s.low, { op = "avg", async = true }), b, s }
    end }
  -- Before the optimizer: wait for every bucket, and widen the bf16 average into the f32 gradient.
  function self:finish()
    self.tracker:check()
    for _, x in ipairs(self.pending) do
      x[1]:wait()
      x[2].tensor:copy_(x[3].low)
    end
    self.pending = {}
    self.tracker:reset()
  end
  return self
end

------------------------------------------------------------------------ policy 2: local SGD
local function local_sgd(params, o)
  local self = { every = (o or {}).every or 4, steps = 0 }
  function self:finish() end -- gradients stay on their rank
  -- After the optimizer: every `every` steps, average the parameters (and their f32 masters).
  function self:after_step()
    self.steps = self.steps + 1
    if self.steps % self.every ~= 0 then return false end
    for _, p in ipairs(params) do
      local w = p.master or p.data
      comm:all_reduce(w, { op = "avg" })
      if p.master then p.data:copy_(w) end
    end
    return true
  end
  return self
end

------------------------------------------------------------------------ the demo
local D, H, TOK, M, STEPS, K = 16, 32, 8, 2, opt.steps, opt.every

local function build()
  tg.manual_seed(7) -- the same initial parameters on every rank
  return tg.nn.Sequential {
    tg.nn.Linear(D, H, { name = "fc1" }),
    tg.nn.LayerNormLinear(H, D, { name = "fc2" }),
    name = "net",
  }
end

tg.manual_seed(1)
local W = tg.randn({ D, D }, { std = 0.5 }) -- the map to learn (the same everywhere)

-- Microbatch mb of a step: every rank draws its own samples.
local function batch(step, mb)
  tg.manual_seed(100000 * (rank + 1) + 100 * step + mb)
  local x = tg.randn({ TOK, D })
  return x, x:matmul(W)
end

-- Whether every parameter is identical on every rank.
local function same_on_all_ranks(params)
  local same = true
  for _, p in ipairs(params) do
    local root = comm:broadcast(p.data:clone(), 0)
    same = same and tg.allclose(p.data, root, 0, 0)
  end
  local t = tg.tensor({ same and 1 or 0 }, { dtype = "i32" })
  comm:all_reduce(t, { op = "min" })
  return t:totable()[1] == 1
end

-- Trains a fresh model with a policy; returns the mean loss of the last step (over ranks),
-- the parameters, per step whether the ranks' parameters agree, and the first step's loss.
local function train(make_policy)
  local model = build()
  local params = model:parameters()
  local policy = make_policy(params)
  local opt = optim.AdamW(params, { lr = 3e-2 })
  local loss, agree, first = 0, {}, nil
  for step = 1, STEPS do
    tg.step_begin { microbatches = M }
    local dys = {}
    loss = 0
    for mb = 1, M do
      local x, y = batch(step, mb)
      local d = model:forward(x, mb):sub(y)
      loss = loss + 0.5 * ops.sumsq(d) / (TOK * M)
      dys[mb] = d:mul(1.0 / (TOK * M)) -- d(loss)/d(out)
    end
    for mb = M, 1, -1 do model:backward(dys[mb], mb) end
    tg.step_end()
    policy:finish() -- the reduce policy's part: before the optimizer
    opt:step()
    if policy.after_step then policy:after_step() end
    agree[step] = same_on_all_ranks(params)
    first = first or loss
  end
  local l = tg.tensor({ loss, first })
  comm:all_reduce(l, { op = "avg" })
  return l:totable()[1], params, agree, l:totable()[2]
end

local function say(fmt, ...)
  if rank == 0 then print(string.format(fmt, ...)) end
end

local failures = 0
local function check(cond, what)
  say("%s %s", cond and "ok:  " or "FAIL:", what)
  if not cond then failures = failures + 1 end
end

say("custom reduce policies on %d rank(s), %d steps of %d microbatches", size, STEPS, M)
local l_none, _, _, l0 = train(function() return { finish = function() end } end) -- no reduce at all
local l_ddp, p_ddp = train(function(params) return reduce.ddp { params = params, bucket_numel = 512 } end)
local l_ef, p_ef, agree_ef = train(function(params) return bf16_error_feedback(params, { bucket_numel = 512 }) end)
local l_sgd, _, agree_sgd = train(function(params) return local_sgd(params, { every = K }) end)
say("loss after %d steps: ddp %.4f, bf16+ef %.4f, local sgd (K=%d) %.4f, no reduce %.4f (step 1: %.4f)", STEPS, l_ddp,
  l_ef, K, l_sgd, l_none, l0)
check(l_ddp < 0.5 * l0, "ddp: the loss halves at least")

-- bf16 + EF: every rank applies the same averaged update, which stays close to ddp's exact f32 one
check(agree_ef[STEPS], "bf16+ef: the parameters are identical on every rank")
local worst = 0
for i, p in ipairs(p_ef) do
  local _, d = tg.allclose(p.data, p_ddp[i].data)
  worst = math.max(worst, d)
end
check(worst < 2e-2, string.format("bf16+ef: parameters within 2e-2 of ddp's after %d steps (max diff %.2e)", STEPS, worst))
check(math.abs(l_ef - l_ddp) <= 0.05 * l_ddp + 1e-4, "bf16+ef: the loss follows ddp's")
-- local SGD: the ranks agree right after each averaging step, and (on several ranks) drift apart between
check(agree_sgd[K] and agree_sgd[2 * K], string.format("local sgd: identical parameters after steps %d and %d", K, 2 * K))
if size > 1 then check(not agree_sgd[K + 1], "local sgd: the ranks drift apart between averaging steps") end
check(l_sgd < 0.5 * l0, "local sgd: trains (the loss halves at least)")

if failures > 0 then error(string.format("%d check(s) failed", failures)) end
