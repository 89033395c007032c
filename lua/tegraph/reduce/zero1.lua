-- tegraph.reduce.zero1: ZeRO stage 1 — reduce-scatter each bucket, AdamW on this rank's shard, all-gather the parameters.
--
--   local z = require("tegraph.reduce.zero1").new{ params = model:parameters(), comm = dp,
--     lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, no_decay = fn(p),
--     max_norm = nil, bucket_bytes = 25 MiB }
--   ... step_begin, microbatches, step_end ...
--   z:finish()        -- every bucket reduce-scattered (waits)
--   z:step{ lr = }    -- AdamW on the local shard, then all-gather: every rank has the new parameters
--
-- With model = (a module, or a list of modules: the chunks holding params),
-- step() only starts the all-gathers (the bucket of the first layers first)
-- and each module that owns parameters gets a forward pre-hook that waits for
-- its buckets and copies them into its parameters just before its forward
-- runs or its F graph replays, so the gather of later layers overlaps the
-- forward of earlier ones. z:gather() completes every pending gather at once
-- (before reading parameters outside a forward: evaluation of other modules,
-- checkpoints); step() does it first too.
--
-- Layout: buckets are padded to a multiple of the group size; rank r owns
-- elements [r*n, (r+1)*n) of each bucket (n = numel / size) of the grad
-- buffer and of a parameter buffer with the same layout (f32 master values;
-- a bf16 parameter's p.master becomes its view of that buffer).
-- Optimizer state (m, v) exists for the shard only. The update is elementwise
-- AdamW exactly as optim.AdamW computes it, so the parameters equal those of
-- ddp + optim.AdamW (bit for bit when the reduced gradients are equal).
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"
local reduce = require "tegraph.reduce"
local ops = core.ops

local M = {}
local Zero1 = {}
Zero1.__index = Zero1

local function default_no_decay(p) return #p.shape < 2 end

function M.new(o)
  if type(o) ~= "table" or type(o.params) ~= "table" then raise("zero1: params (a list) is required") end
  options.check("zero1", o, { "params", "comm", "model", "lr", "betas", "beta1", "beta2", "eps", "weight_decay",
    "max_norm", "no_decay", "bucket_bytes", "bucket_numel" })
  -- AdamW's options, refused as AdamW refuses them, with its defaults
  local lr, beta1, beta2, eps, weight_decay = require("tegraph.optim").check_options(o, "zero1", 3)
  if o.no_decay ~= nil and type(o.no_decay) ~= "function" then
    raise("zero1: no_decay must be a function(p) -> true for parameters without weight decay, got " .. type(o.no_decay))
  end
  local c = reduce.check_comm("zero1", o.comm)
  local size, rank = c:size(), c:rank()
  local self = setmetatable({
    comm = c,
    lr = lr,
    beta1 = beta1,
    beta2 = beta2,
    eps = eps,
    weight_decay = weight_decay,
    max_norm = o.max_norm,
    t = 0,
    pending = {},
    gathers = {}, -- bucket index -> all-gather request not yet copied into the parameters
    ngathers = 0,
  }, Zero1)
  self.tracker = reduce.tracker {
    name = "zero1",
    params = o.params,
    bucket_bytes = o.bucket_bytes,
    bucket_numel = o.bucket_numel,
    pad_to = size,
    on_ready = function(b)
      local s = self.shards[b.index]
      -- name: its trace span, and the cross-rank check of each bucket's first reduce
      self.pending[#self.pending + 1] = c:reduce_scatter(s.grad, b.tensor, { op = "avg", async = true, name = "zero1 bucket " .. b.index })
    end,
  }
  local gb = self.tracker.grad_buffer
  self.grad_buffer, self.buckets = gb, self.tracker.buckets
  reduce.check_layout("zero1", c, self.buckets)
  local dev = gb.data.device
  -- the f32 parameter buffer: master values in the grad buffer's layout
  self.pbuf = core.zeros({ gb.numel }, { dtype = "f32", device = dev, name = "zero1.params" })
  self.params = gb:params()
  self.views, self.index = {}, {}
  for i, p in ipairs(self.params) do
    self.index[p] = i
    local v = self.pbuf:narrow(gb:offset(p), p:numel())
    v:copy_((p.master or p.data):view({ p:numel() }))
    -- a bf16 parameter's f32 master is its stretch of the buffer: a gather writes it in place
    if p.master then p:set_master(v) end
    self.views[i] = v
  end
  -- this rank's shard of each bucket, and the AdamW segments (one per parameter piece in it), updated by one
  -- multi-tensor AdamW, their squares summed by one multi-tensor reduction into sumsq
  local no_decay = o.no_decay or default_no_decay
  self.shards, self.segments, self.entries, self.seg_grads = {}, {}, {}, {}
  self.sumsq = core.zeros({ 1 }, { dtype = "f32", device = dev, name = "zero1.sumsq" })
  for bi, b in ipairs(self.buckets) do
    local n = b.numel // size
    local s0 = b.start + rank * n -- 1-based first element of the shard
    local s = {
      grad = gb.data:narrow(s0, n),
      param = self.pbuf:narrow(s0, n),
      bucket = self.pbuf:narrow(b.start, b.numel),
      m = core.zeros({ n }, { dtype = "f32", device = dev }),
      v = core.zeros({ n }, { dtype = "f32", device = dev }),
    }
    self.shards[bi] = s
    for _, p in ipairs(b.params) do
      local lo, hi = math.max(gb:offset(p), s0), math.min(gb:offset(p) + p:numel(), s0 + n) -- [lo, hi)
      if lo < hi then
        self.segments[#self.segments + 1] = {
          param = self.pbuf:narrow(lo, hi - lo),
          grad = gb.data:narrow(lo, hi - lo),
          m = s.m:narrow(lo - s0 + 1, hi - lo),
          v = s.v:narrow(lo - s0 + 1, hi - lo),
          wd = no_decay(p) and 0.0 or self.weight_decay,
        }
        local seg = self.segments[#self.segments]
        self.entries[#self.entries + 1] = { p = seg.param, g = seg.grad, m = seg.m, v = seg.v, weight_decay = seg.wd }
        self.seg_grads[#self.seg_grads + 1] = seg.grad
      end
    end
  end
  -- each bucket's gather copy: its parameters' weights from their views of the buffer
  self.copies = {}
  for bi, b in ipairs(self.buckets) do
    local c = { dst = {}, src = {} }
    for _, p in ipairs(b.params) do
      c.dst[#c.dst + 1] = p.data
      c.src[#c.src + 1] = self.views[self.index[p]]
    end
    self.copies[bi] = c
  end
  if o.model ~= nil then self:hook_forward(o.model) end
  return self
end

-- Module m's own parameters: those it lists that none of its children list.
local function own_params(m)
  local under = {}
  for _, c in ipairs(m:children()) do
    for _, p in ipairs(c:parameters()) do under[p] = true end
  end
  local own = {}
  for _, p in ipairs(m:parameters()) do
    if not under[p] then own[#own + 1] = p end
  end
  return own
end

-- Registers the forward pre-hooks that complete the gathers of the buckets
-- holding each module's own parameters (model: a module or a list of them).
function Zero1:hook_forward(model)
  local mods = type(model) == "userdata" and { model } or model
  if type(mods) ~= "table" then raise("zero1: model must be a module or a list of modules") end
  local bucket_of = {}
  for bi, b in ipairs(self.buckets) do
    for _, p in ipairs(b.params) do bucket_of[p] = bi end
  end
  local covered, hooks = {}, {}
  local function walk(m)
    local list, listed = {}, {}
    for _, p in ipairs(own_params(m)) do
      local bi = bucket_of[p]
      covered[p] = true
      if bi and not listed[bi] then
        listed[bi] = true
        list[#list + 1] = bi
      end
    end
    if #list > 0 then hooks[#hooks + 1] = { m, list } end
    for _, c in ipairs(m:children()) do walk(c) end
  end
  for i, m in ipairs(mods) do
    if type(m) ~= "userdata" or not m.register_forward_pre_hook then
      raise(string.format("zero1: model[%d] is not a module (%s)", i, type(m)))
    end
    walk(m)
  end
  for _, p in ipairs(self.params) do
    if not covered[p] then
      raise(string.format("zero1: parameter '%s' belongs to no module of model, so no forward would gather it", p.name))
    end
  end
  for _, h in ipairs(hooks) do
    local list = h[2]
    h[1]:register_forward_pre_hook(function()
      if self.ngathers == 0 then return end
      for _, bi in ipairs(list) do self:gather_bucket(bi) end
    end)
  end
  self.overlap = true
  return self
end

-- Waits for bucket bi's all-gather (when pending) and copies it into its parameters.
function Zero1:gather_bucket(bi)
  local r = self.gathers[bi]
  if not r then return end
  self.gathers[bi] = nil
  self.ngathers = self.ngathers - 1
  r:wait()
  -- a bf16 parameter's master is its view already; its data is the value rounded to bf16, as optim.AdamW does:
  -- one copy for the whole bucket
  local c = self.copies[bi]
  ops.copy_multi(c.dst, c.src)
end

-- Completes every pending all-gather (in forward order).
function Zero1:gather()
  for bi = #self.buckets, 1, -1 do self:gather_bucket(bi) end
end

-- The number of buckets whose all-gather is started and not yet copied into the parameters.
function Zero1:pending_gathers() return self.ngathers end

-- Waits for every bucket's reduce-scatter (the step check first, as ddp).
function Zero1:finish()
  local ok, err = pcall(self.tracker.check, self.tracker)
  for _, r in ipairs(self.pending) do r:wait() end
  self.pending = {}
  self.tracker:reset()
  if not ok then error(err, 0) end
end

-- Global L2 norm of the reduced gradient (its shards summed over the group).
-- The sum of the squares of the reduced gradient over the group, as a (1) f32 tensor on the device: one
-- reduction over the shard's segments and one all-reduce, no read (a pipeline adds the stages' sums).
function Zero1:grad_sumsq()
  if #self.seg_grads > 0 then
    ops.sumsq_multi(self.seg_grads, self.sumsq)
  else
    self.sumsq:fill_(0) -- a rank whose shards hold only padding
  end
  self.comm:all_reduce(self.sumsq, { op = "sum" })
  return self.sumsq
end

function Zero1:grad_norm() return math.sqrt(self:grad_sumsq():totable()[1]) end

-- AdamW on the local shard, then all-gather of the parameter buffer and copy
-- into every parameter (master and data). o: {lr=, max_norm=, norm=}; norm: the
-- gradient norm to clip with when the caller computed it (a pipeline's, over every
-- stage), else this group's. Returns the gradient norm when clipping.
function Zero1:step(o)
  o = o or {}
  if type(o) ~= "table" then raise("zero1:step: options must be a table {lr=, max_norm=, norm=}") end
  options.check("zero1:step", o, { "lr", "max_norm", "norm" })
  if o.norm ~= nil and (type(o.norm) ~= "number" or o.norm < 0) then
    raise("zero1:step: norm must be a number >= 0 (got " .. tostring(o.norm) .. ")")
  end
  -- refused as AdamW:step refuses them
  local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end
  if o.lr ~= nil then
    if not finite(o.lr) then raise(string.format("zero1:step: lr must be a finite number (got %s)", tostring(o.lr))) end
    if o.lr < 0 then raise(string.format("zero1:step: lr must be >= 0 (got %s)", tostring(o.lr))) end
  end
  if o.max_norm ~= nil and (not finite(o.max_norm) or o.max_norm <= 0) then
    raise(string.format("zero1:step: max_norm must be a finite number > 0 (got %s)", tostring(o.max_norm)))
  end
  -- the shards hold reduced gradients only once finish() waited for the reduce-scatters
  if #self.pending > 0 or next(self.tracker.seen) ~= nil then
    raise("zero1:step: this step's gradients are not reduced yet (reduce-scatters pending): call finish() first")
  end
  self:gather() -- AdamW updates the shards the pending gathers send
  local max_norm = o.max_norm or self.max_norm
  local norm, scale
  if max_norm then
    local optim = require "tegraph.optim"
    norm = o.norm or self:grad_norm()
    scale = optim.clip_factor(norm, max_norm)
  end
  self.t = self.t + 1
  if norm and (norm ~= norm or norm == math.huge) then return norm end -- a bad step changes nothing, as optim.AdamW
  local args = { lr = o.lr or self.lr, step = self.t, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps,
    grad_scale = scale or 1.0 }
  if #self.entries > 0 then ops.adamw_multi(self.entries, args) end
  -- buckets are in backward order: the last holds the first layers, gathered first
  for bi = #self.shards, 1, -1 do
    local s = self.shards[bi]
    self.gathers[bi] = self.comm:all_gather(s.bucket, s.param, { async = true })
    self.ngathers = self.ngathers + 1
  end
  if not self.overlap then self:gather() end
  return norm
end

-- Checkpoint state (tegraph.checkpoint): this rank's shard of each bucket of
-- the f32 parameters and its m and v, so every rank saves and restores its own.
function Zero1:state_tensors()
  local out = {}
  for bi, s in ipairs(self.shards) do
    out[#out + 1] = { name = string.format("zero1.bucket%d.param", bi), t = s.param }
    out[#out + 1] = { name = string.format("zero1.bucket%d.m", bi), t = s.m }
    out[#out + 1] = { name = string.format("zero1.bucket%d.v", bi), t = s.v }
  end
  return out
end

function Zero1:state_values()
  return { kind = "zero1", t = self.t, lr = self.lr, world_size = self.comm:size() }
end

-- Restores the host values, then gathers the loaded shards into every
-- parameter (master and data), as a step does.
function Zero1:load_state_values(v)
  local t = math.tointeger(tonumber(v.t))
  if not t or t < 0 then raise(string.format("zero1: bad checkpoint step count %s", tostring(v.t))) end
  self.t, self.lr = t, tonumber(v.lr) or self.lr
  local reqs = {}
  for bi, s in ipairs(self.shards) do reqs[bi] = self.comm:all_gather(s.bucket, s.param, { async = true }) end
  for _, r in ipairs(reqs) do r:wait() end
  for bi = 1, #self.buckets do ops.copy_multi(self.copies[bi].dst, self.copies[bi].src) end -- bf16: master is the view
end

function Zero1:zero_grad() self.grad_buffer:zero() end

return M
