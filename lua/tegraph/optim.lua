-- tegraph.optim: AdamW with f32 master weights, global-norm gradient clipping, LR schedules.
local core = require "tegraph.core"
local ops = core.ops

local optim = {}

-- The gradient a parameter's wgrad went to: main_grad (f32) when fused, else grad.
local function grad_of(p)
  return p.wgrad
end

-- Global L2 norm of the parameters' gradients (a host number; synchronises).
function optim.grad_norm(params)
  local sq = 0.0
  for _, p in ipairs(params) do sq = sq + ops.sumsq(grad_of(p)) end
  return math.sqrt(sq)
end

-- The factor that brings a gradient of norm `norm` down to max_norm (1 when
-- it is already within; 0 for a non-finite norm, so a bad step changes nothing).
function optim.clip_factor(norm, max_norm)
  if norm ~= norm or norm == math.huge then return 0.0 end
  if not max_norm or norm <= max_norm then return 1.0 end
  return max_norm / (norm + 1e-6)
end

-- Scales the gradients in place so their global norm is at most max_norm;
-- returns the norm before clipping.
function optim.clip_grad_norm(params, max_norm)
  local norm = optim.grad_norm(params)
  local f = optim.clip_factor(norm, max_norm)
  if f ~= 1.0 then
    for _, p in ipairs(params) do ops.scale(grad_of(p), f) end
  end
  return norm
end

------------------------------------------------------------------------ AdamW
local AdamW = {}
AdamW.__index = AdamW

-- Parameters that get no weight decay by default: vectors (biases, norm gains).
local function default_no_decay(p)
  return #p.shape < 2
end

-- optim.AdamW(params, {lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
--   weight_decay=0, no_decay=fn(p)->bool, max_norm=nil})
-- bf16 parameters are updated through their f32 master copy (p.master),
-- which is then rounded into p.data; f32 parameters are updated in place.
-- The gradient read is p.wgrad (main_grad when fused, else grad).
function optim.AdamW(params, o)
  o = o or {}
  if type(params) ~= "table" or #params == 0 then error("AdamW: needs a non-empty list of parameters", 2) end
  local self = setmetatable({
    params = params,
    lr = o.lr or 1e-3,
    beta1 = o.beta1 or (o.betas and o.betas[1]) or 0.9,
    beta2 = o.beta2 or (o.betas and o.betas[2]) or 0.999,
    eps = o.eps or 1e-8,
    weight_decay = o.weight_decay or 0.0,
    max_norm = o.max_norm,
    t = 0,
    state = {},
  }, AdamW)
  local no_decay = o.no_decay or default_no_decay
  for i, p in ipairs(params) do
    local master = p.master
    local data = p.data
    local zeros = { dtype = "f32", device = data.device }
    self.state[i] = {
      p = master or data,           -- f32: the values Adam updates
      lowp = master and data or nil, -- bf16 copy rounded from it
      m = core.zeros(p.shape, zeros),
      v = core.zeros(p.shape, zeros),
      wd = no_decay(p) and 0.0 or self.weight_decay,
    }
  end
  return self
end

-- One update. o: {lr=, max_norm=} override the constructor's. Clipping is
-- folded into the update as a gradient scale. Returns the gradient norm
-- (computed when clipping is on, else nil).
function AdamW:step(o)
  o = o or {}
  local lr = o.lr or self.lr
  local max_norm = o.max_norm or self.max_norm
  local norm, scale = nil, 1.0
  if max_norm then
    norm = optim.grad_norm(self.params)
    scale = optim.clip_factor(norm, max_norm)
  end
  self.t = self.t + 1
  local args = { lr = lr, step = self.t, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps, grad_scale = scale }
  for i, p in ipairs(self.params) do
    local s = self.state[i]
    args.weight_decay = s.wd
    ops.adamw_step(s.p, s.lowp, grad_of(p), s.m, s.v, args)
  end
  return norm
end

-- Zeroes grad and main_grad of every parameter (inside steps the first wgrad
-- of a step overwrites anyway; this is for code that accumulates by hand).
function AdamW:zero_grad()
  for _, p in ipairs(self.params) do p:zero_grad() end
end

------------------------------------------------------------------------ schedules
-- Linear warmup from 0 to lr over `warmup` steps, then cosine decay to
-- min_lr at step `total` (constant after). Steps count from 1.
--   optim.cosine_schedule{lr=, warmup=0, total=, min_lr=0} -> fn(step) -> lr
function optim.cosine_schedule(o)
  local lr, warmup, total, min_lr = o.lr, o.warmup or 0, o.total, o.min_lr or 0.0
  if type(lr) ~= "number" or type(total) ~= "number" then
    error("cosine_schedule: lr and total (numbers) are required", 2)
  end
  return function(step)
    if warmup > 0 and step <= warmup then return lr * step / warmup end
    local span = math.max(1, total - warmup)
    local progress = math.min(1.0, math.max(0.0, (step - warmup) / span))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
  end
end

return optim
