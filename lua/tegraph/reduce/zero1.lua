-- tegraph.reduce.zero1: ZeRO stage 1 — reduce-scatter each bucket, AdamW on this rank's shard, all-gather the parameters.
--
--   local z = require("tegraph.reduce.zero1").new{ params = model:parameters(), comm = dp,
--     lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, no_decay = fn(p),
--     max_norm = nil, bucket_bytes = 25 MiB }
--   ... step_begin, microbatches, step_end ...
--   z:finish()        -- every bucket reduce-scattered (waits)
--   z:step{ lr = }    -- AdamW on the local shard, then all-gather: every rank has the new parameters
--
-- Layout: buckets are padded to a multiple of the group size; rank r owns
-- elements [r*n, (r+1)*n) of each bucket (n = numel / size) of the grad
-- buffer and of a parameter buffer with the same layout (f32 master values).
-- Optimizer state (m, v) exists for the shard only. The update is elementwise
-- AdamW exactly as optim.AdamW computes it, so the parameters equal those of
-- ddp + optim.AdamW (bit for bit when the reduced gradients are equal).
local raise = require "tegraph.raise"
local core = require "tegraph.core"
local reduce = require "tegraph.reduce"
local ops = core.ops

local M = {}
local Zero1 = {}
Zero1.__index = Zero1

local function default_no_decay(p) return #p.shape < 2 end

function M.new(o)
  if type(o) ~= "table" or type(o.params) ~= "table" then raise("zero1: params (a list) is required") end
  local c = o.comm or core.comm.world()
  local size, rank = c:size(), c:rank()
  local self = setmetatable({
    comm = c,
    lr = o.lr or 1e-3,
    beta1 = o.beta1 or 0.9,
    beta2 = o.beta2 or 0.999,
    eps = o.eps or 1e-8,
    weight_decay = o.weight_decay or 0.0,
    max_norm = o.max_norm,
    t = 0,
    pending = {},
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
  local dev = gb.data.device
  -- the f32 parameter buffer: master values in the grad buffer's layout
  self.pbuf = core.zeros({ gb.numel }, { dtype = "f32", device = dev, name = "zero1.params" })
  self.params = gb:params()
  self.views = {}
  for i, p in ipairs(self.params) do
    local v = self.pbuf:narrow(gb:offset(p), p:numel())
    v:copy_(p.master or p.data)
    self.views[i] = v
  end
  -- this rank's shard of each bucket, and the AdamW segments (one per parameter piece in it)
  local no_decay = o.no_decay or default_no_decay
  self.shards, self.segments = {}, {}
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
      end
    end
  end
  return self
end

-- Waits for every bucket's reduce-scatter (the step check first, as ddp).
function Zero1:finish()
  local ok, err = pcall(self.tracker.check, self.tracker)
  for _, r in ipairs(self.pending) do r:wait() end
  self.pending = {}
  self.tracker:reset()
  if not ok then error(err, 0) end
end

-- Global L2 norm of the reduced gradient (its shards summed over the group).
function Zero1:grad_norm()
  local sq = 0.0
  for _, seg in ipairs(self.segments) do sq = sq + ops.sumsq(seg.grad) end
  local t = core.tensor({ sq }, { dtype = "f32", device = self.pbuf.device })
  self.comm:all_reduce(t, { op = "sum" })
  return math.sqrt(t:totable()[1])
end

-- AdamW on the local shard, then all-gather of the parameter buffer and copy
-- into every parameter (master and data). o: {lr=, max_norm=}. Returns the
-- gradient norm when clipping.
function Zero1:step(o)
  o = o or {}
  local max_norm = o.max_norm or self.max_norm
  local norm, scale
  if max_norm then
    local optim = require "tegraph.optim"
    norm = self:grad_norm()
    scale = optim.clip_factor(norm, max_norm)
  end
  self.t = self.t + 1
  if norm and (norm ~= norm or norm == math.huge) then return norm end -- a bad step changes nothing, as optim.AdamW
  local args = { lr = o.lr or self.lr, step = self.t, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps,
    grad_scale = scale or 1.0 }
  for _, seg in ipairs(self.segments) do
    args.weight_decay = seg.wd
    ops.adamw_step(seg.param, nil, seg.grad, seg.m, seg.v, args)
  end
  local reqs = {}
  for bi, s in ipairs(self.shards) do
    reqs[bi] = self.comm:all_gather(s.bucket, s.param, { async = true })
  end
  for _, r in ipairs(reqs) do r:wait() end
  for i, p in ipairs(self.params) do
    local v = self.views[i]
    if p.master then
      p.master:copy_(v)
      p.data:copy_(v) -- rounded to bf16, as optim.AdamW does
    else
      p.data:copy_(v)
    end
  end
  return norm
end

function Zero1:zero_grad() self.grad_buffer:zero() end

return M
