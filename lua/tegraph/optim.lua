-- tegraph.optim: AdamW with f32 master weights, global-norm gradient clipping, LR schedules.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"
local ops = core.ops

local optim = {}

-- The gradient a parameter's wgrad went to: main_grad (f32) when fused, else grad.
local function grad_of(p)
  return p.wgrad
end

-- Refuses params that are not a non-empty list of parameters (who: the function, for the message).
local function check_params(params, who)
  if type(params) ~= "table" or #params == 0 then
    raise(string.format("%s: needs a non-empty list of parameters (module:parameters()), got %s", who,
      type(params) == "table" and "an empty table" or type(params)))
  end
  for i, p in ipairs(params) do
    if not core.nn.is_parameter(p) then
      raise(string.format("%s: params[%d] is a %s, not a parameter (module:parameters() gives them)", who, i,
        type(p) == "userdata" and tostring(p) or type(p)))
    end
  end
end

local function finite(x) return x == x and x ~= math.huge and x ~= -math.huge end

-- Refuses a max_norm that is not nil or a finite number > 0.
local function check_max_norm(v, who)
  if v ~= nil and (type(v) ~= "number" or not finite(v) or v <= 0) then
    raise(string.format("%s: max_norm must be a finite number > 0, got %s", who,
      type(v) == "number" and tostring(v) or type(v)))
  end
end

-- The parameters' gradients grouped by device: { {device=, grads={...}}, ... }
-- in the order devices first appear.
local function grads_by_device(params)
  local groups, of = {}, {}
  for _, p in ipairs(params) do
    local g = grad_of(p)
    local key = tostring(g.device)
    local grp = of[key]
    if not grp then
      grp = { device = g.device, grads = {} }
      of[key] = grp
      groups[#groups + 1] = grp
    end
    grp.grads[#grp.grads + 1] = g
  end
  return groups
end

-- Global L2 norm of the parameters' gradients (a host number; synchronises
-- once per device: the sum of squares is one multi-tensor reduction there).
function optim.grad_norm(params)
  check_params(params, "optim.grad_norm")
  local sq = 0.0
  for _, grp in ipairs(grads_by_device(params)) do sq = sq + ops.sumsq_multi(grp.grads):totable()[1] end
  return math.sqrt(sq)
end

-- The factor that brings a gradient of norm `norm` down to max_norm (1 when
-- it is already within; 0 for a non-finite norm, so a bad step changes nothing).
function optim.clip_factor(norm, max_norm)
  if type(norm) ~= "number" then raise("optim.clip_factor: norm must be a number, got " .. type(norm)) end
  if norm < 0 then raise("optim.clip_factor: norm must be >= 0 (a norm), got " .. tostring(norm)) end
  if max_norm == nil then raise("optim.clip_factor: max_norm (a finite number > 0) is required") end
  check_max_norm(max_norm, "optim.clip_factor")
  if norm ~= norm or norm == math.huge then return 0.0 end
  if not max_norm or norm <= max_norm then return 1.0 end
  return max_norm / (norm + 1e-6)
end

-- Scales the gradients in place so their global norm is at most max_norm;
-- returns the norm before clipping.
function optim.clip_grad_norm(params, max_norm)
  check_params(params, "optim.clip_grad_norm")
  if max_norm == nil then raise("optim.clip_grad_norm: max_norm (a finite number > 0) is required") end
  check_max_norm(max_norm, "optim.clip_grad_norm")
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

-- Checks AdamW's numeric options (o.lr, beta1/beta2 or betas, eps, weight_decay, max_norm) and returns
-- lr, beta1, beta2, eps, weight_decay with their defaults; errors name `who` and point at `level` as raise()
-- counts from check_options (2: its caller, 3: the caller's caller).
function optim.check_options(o, who, level)
  level = level or 2
  local function number_opt(name, v, ok, want)
    if type(v) ~= "number" or not finite(v) or not ok(v) then
      raise(string.format("%s: %s must be %s (got %s)", who, name, want,
        type(v) == "number" and tostring(v) or type(v)), level + 1)
    end
  end
  if o.betas ~= nil then
    if type(o.betas) ~= "table" or #o.betas ~= 2 then
      raise(string.format("%s: betas must be a list of two numbers {beta1, beta2}, got %s", who,
        type(o.betas) == "table" and #o.betas .. " entries" or type(o.betas) == "string" and "the string '" ..
        o.betas .. "'" or type(o.betas)), level + 1)
    end
    if o.beta1 ~= nil or o.beta2 ~= nil then
      raise(string.format("%s: give betas or beta1/beta2, not both", who), level + 1)
    end
  end
  local function given(v, default) -- nil takes the default; false (or any non-number) is refused below
    if v == nil then return default end
    return v
  end
  local lr = given(o.lr, 1e-3)
  local beta1 = given(o.beta1, given(o.betas and o.betas[1], 0.9))
  local beta2 = given(o.beta2, given(o.betas and o.betas[2], 0.999))
  local eps = given(o.eps, 1e-8)
  local weight_decay = given(o.weight_decay, 0.0)
  number_opt("lr", lr, function() return true end, "a finite number")
  number_opt("lr", lr, function(v) return v >= 0 end, ">= 0")
  number_opt("beta1", beta1, function(v) return v >= 0 and v < 1 end, "a number in [0, 1)")
  number_opt("beta2", beta2, function(v) return v >= 0 and v < 1 end, "a number in [0, 1)")
  number_opt("eps", eps, function() return true end, "a finite number")
  number_opt("eps", eps, function(v) return v > 0 end, "> 0")
  number_opt("weight_decay", weight_decay, function() return true end, "a finite number")
  number_opt("weight_decay", weight_decay, function(v) return v >= 0 end, ">= 0")
  if o.max_norm ~= nil then
    number_opt("max_norm", o.max_norm, function() return true end, "a finite number")
    number_opt("max_norm", o.max_norm, function(v) return v > 0 end, "> 0")
  end
  return lr, beta1, beta2, eps, weight_decay
end

-- optim.AdamW(params, {lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
--   weight_decay=0, no_decay=fn(p)->bool, max_norm=nil, foreach=true, sync_norm=true, capturable=false})
-- bf16 parameters are updated through their f32 master copy (p.master),
-- which is then rounded into p.data; f32 parameters are updated in place.
-- The gradient read is p.wgrad (main_grad when fused, else grad).
-- foreach (default): one multi-tensor update per device (ops.adamw_multi), and
-- with clipping the global norm is reduced and applied on the device (no host
-- sync) when all parameters share one device; foreach=false updates one
-- parameter per call (the reference path). Both give bit-identical results.
-- sync_norm=false: step does not read the norm back (returns nil); ask
-- opt:grad_norm() for it when needed.
-- capturable=true (as PyTorch's): the step count and lr live on the device, a
-- (1) i32 and a (1) f32 per device, read by the update kernels when they run;
-- each step first advances the count there (one tiny kernel), and the bias
-- corrections come from it on the device. So a captured step (with device-side
-- clipping: foreach, one device, sync_norm=false) replayed N times is N Adam steps, each with
-- the lr of its replay: change it between replays with opt:set_lr(v), an
-- ordinary device write on the stream (not a graph node), ordered before the
-- next replay; inside a capture it is an error, as is step{lr=} (it would be
-- replayed forever). opt:step_count() reads the device count. On the CPU the
-- results equal capturable=false bit for bit; on CUDA the device's pow may
-- differ from the host's in the last bit of a bias correction.
function optim.AdamW(params, o)
  if o ~= nil and type(o) ~= "table" then raise("AdamW: options must be a table, got " .. type(o)) end
  o = o or {}
  if type(params) ~= "table" or #params == 0 then raise("AdamW: needs a non-empty list of parameters") end
  check_params(params, "AdamW")
  local at = {}
  for i, p in ipairs(params) do -- the same parameter twice would be updated twice a step
    if at[p] then
      raise(string.format("AdamW: params[%d] and params[%d] are the same parameter ('%s'): list each once", at[p], i,
        tostring(p.name)))
    end
    at[p] = i
  end
  local known = { lr = 1, betas = 1, beta1 = 1, beta2 = 1, eps = 1, weight_decay = 1, max_norm = 1, foreach = 1,
    sync_norm = 1, capturable = 1, no_decay = 1 }
  options.check("AdamW", o, known)
  local lr, beta1, beta2, eps, weight_decay = optim.check_options(o, "AdamW", 3)
  for _, k in ipairs { "foreach", "sync_norm", "capturable" } do
    if o[k] ~= nil and type(o[k]) ~= "boolean" then
      raise(string.format("AdamW: %s must be a boolean, got %s", k,
        type(o[k]) == "string" and "the string '" .. o[k] .. "'" or type(o[k]) .. " " .. tostring(o[k])))
    end
  end
  if o.no_decay ~= nil and type(o.no_decay) ~= "function" then
    raise("AdamW: no_decay must be a function(p) -> true for parameters without weight decay, got " .. type(o.no_decay))
  end
  local self = setmetatable({
    params = params,
    lr = lr,
    beta1 = beta1,
    beta2 = beta2,
    eps = eps,
    weight_decay = weight_decay,
    max_norm = o.max_norm,
    foreach = o.foreach ~= false,
    sync_norm = o.sync_norm ~= false,
    capturable = o.capturable == true,
    t = 0,
    state = {},
    groups = {}, -- foreach: { {device=, entries={...}, params={...}, sumsq=(1) f32}, ... } by device
  }, AdamW)
  local no_decay = o.no_decay or default_no_decay
  local of = {}
  for i, p in ipairs(params) do
    local master = p.master
    local data = p.data
    local zeros = { dtype = "f32", device = data.device }
    local s = {
      p = master or data,           -- f32: the values Adam updates
      lowp = master and data or nil, -- bf16 copy rounded from it
      m = core.zeros(p.shape, zeros),
      v = core.zeros(p.shape, zeros),
      wd = no_decay(p) and 0.0 or self.weight_decay,
    }
    self.state[i] = s
    local key = tostring(data.device)
    local grp = of[key]
    if not grp then
      -- the norm's buffer lives as long as the optimizer, so a step can be captured; without
      -- capturable the step count (bias corrections) and lr are host values baked into what is
      -- captured: every replay repeats the captured step's count and lr
      grp = { device = data.device, entries = {}, params = {}, sumsq = core.zeros({ 1 }, zeros) }
      if self.capturable then
        grp.lr_t = core.full({ 1 }, self.lr, zeros) -- rounded to f32 as the host path's lr is
        grp.step_t = core.zeros({ 1 }, { dtype = "i32", device = data.device })
      end
      of[key] = grp
      self.groups[#self.groups + 1] = grp
    end
    s.grp = grp
    grp.entries[#grp.entries + 1] = { p = s.p, lowp = s.lowp, m = s.m, v = s.v, weight_decay = s.wd }
    grp.params[#grp.params + 1] = p
  end
  return self
end

-- Sets the lr of the next steps. Capturable: writes the device lr now (stream
-- ordered: the next replay of a captured step reads it); an error while a
-- parameters' device captures, since the write would be captured instead.
local function set_lr(self, lr, who)
  if type(lr) ~= "number" or not finite(lr) then
    raise(string.format("%s: lr must be a finite number (got %s%s)", who, type(lr),
      type(lr) == "number" and (" " .. tostring(lr)) or ""))
  end
  if lr < 0 then raise(string.format("%s: lr must be >= 0 (got %s)", who, tostring(lr))) end
  if self.capturable then
    for _, grp in ipairs(self.groups) do
      if core.stream.capturing(grp.device) then
        raise(string.format("%s: %s is capturing; a capturable optimizer's lr is a device value, set it " ..
          "between replays (opt:set_lr), not inside the captured step", who, tostring(grp.device)))
      end
    end
    for _, grp in ipairs(self.groups) do grp.lr_t:fill_(lr) end
  end
  self.lr = lr
end

-- Refuses a call without the optimizer as self (opt.step() instead of opt:step()).
local function check_self(self, who)
  if getmetatable(self) ~= AdamW then
    raise(string.format("AdamW:%s: call it as a method, opt:%s(...) (got %s as self)", who, who, type(self)))
  end
end

function AdamW:set_lr(lr)
  check_self(self, "set_lr")
  set_lr(self, lr, "AdamW:set_lr")
end

-- The number of steps taken: capturable, the device count (a host read: replays
-- of a captured step count too); else the host count.
function AdamW:step_count()
  check_self(self, "step_count")
  if not self.capturable then return self.t end
  return math.tointeger(self.groups[1].step_t:totable()[1])
end

-- One update; refused before any parameter has a gradient (a step then would
-- only apply weight decay). o: {lr=, max_norm=, sync_norm=} override the constructor's
-- (capturable: lr= is set_lr, so it stays for the next steps, and is refused
-- while capturing). Clipping is folded into the update as a gradient scale; a non-finite
-- gradient norm skips the update (parameters and moments unchanged; the step
-- count still advances). Returns the gradient norm when clipping (nil without
-- clipping, or with sync_norm=false on the device path: see AdamW:grad_norm).
-- norm= (a number) clips by this norm instead of computing it: the norm over
-- more parameters than this optimizer's (pipeline stages sum theirs first).
local STEP_KEYS = { lr = true, max_norm = true, sync_norm = true, norm = true }

function AdamW:step(o)
  check_self(self, "step")
  if o ~= nil and type(o) ~= "table" then
    raise("AdamW:step: options must be a table {lr=, max_norm=, sync_norm=, norm=}, got " .. type(o))
  end
  o = o or {}
  options.check("AdamW:step", o, STEP_KEYS)
  if o.sync_norm ~= nil and type(o.sync_norm) ~= "boolean" then
    raise("AdamW:step: sync_norm must be a boolean, got " .. type(o.sync_norm))
  end
  if o.lr ~= nil and not self.capturable then -- capturable: set_lr below checks it
    if type(o.lr) ~= "number" or not finite(o.lr) then
      raise(string.format("AdamW:step: lr must be a finite number (got %s)", tostring(o.lr)))
    end
    if o.lr < 0 then raise(string.format("AdamW:step: lr must be >= 0 (got %s)", tostring(o.lr))) end
  end
  if o.max_norm ~= nil and (type(o.max_norm) ~= "number" or not finite(o.max_norm) or o.max_norm <= 0) then
    raise(string.format("AdamW:step: max_norm must be a finite number > 0 (got %s)", tostring(o.max_norm)))
  end
  if self.capturable and o.lr ~= nil then set_lr(self, o.lr, "AdamW:step{lr=}") end
  -- once any parameter has a gradient, steps go on (the check reads no device); a captured step
  -- changes nothing now, so it may be captured before the gradients exist
  if not self.has_grad and not core.stream.capturing(self.groups[1].device) then
    for _, p in ipairs(self.params) do
      if p.has_grad then
        self.has_grad = true
        break
      end
    end
    if not self.has_grad then
      raise("AdamW:step: no parameter has a gradient yet (run a backward pass before the first step)")
    end
  end
  local lr = o.lr or self.lr
  local max_norm = o.max_norm or self.max_norm
  local sync_norm = self.sync_norm
  if o.sync_norm ~= nil then sync_norm = o.sync_norm end
  -- the device-clip path reads the norm back when sync_norm: inside a capture that read would fail after
  -- half the step was captured; say what to do before anything is issued
  if sync_norm and max_norm and self.foreach and #self.groups == 1 and core.stream.capturing(self.groups[1].device) then
    raise(string.format("AdamW:step: %s is capturing and sync_norm reads the gradient norm on the host; capture " ..
      "the step with sync_norm = false (AdamW{sync_norm = false} or step{sync_norm = false}) and read the norm " ..
      "after a replay with opt:grad_norm()", tostring(self.groups[1].device)))
  end
  self.t = self.t + 1
  self.last_norm, self.last_sumsq = nil, nil
  local args = { lr = lr, step = self.t, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps, grad_scale = 1.0 }
  if self.capturable then -- the count advances on the device first: every update kernel after it reads it
    for _, grp in ipairs(self.groups) do ops.adamw_count(grp.step_t) end
  end
  -- capturable: the update kernels read lr and step from the group's device tensors
  local function sched(grp)
    if self.capturable then args.lr, args.step = grp.lr_t, grp.step_t end
  end
  if o.norm ~= nil and (type(o.norm) ~= "number" or o.norm ~= o.norm or o.norm < 0) then
    raise("AdamW:step: norm must be a non-negative number (got " .. tostring(o.norm) .. ")")
  end
  if self.foreach and max_norm and #self.groups == 1 and o.norm == nil then
    -- the whole clip on the device: sum of squares, then the factor read by the update kernel
    local grp = self.groups[1]
    local grads = {}
    for i, p in ipairs(grp.params) do
      local g = grad_of(p)
      grads[i] = g
      grp.entries[i].g = g
    end
    ops.sumsq_multi(grads, grp.sumsq)
    args.clip_sumsq, args.max_norm = grp.sumsq, max_norm
    sched(grp)
    ops.adamw_multi(grp.entries, args)
    self.last_sumsq = grp.sumsq
    if sync_norm then return self:grad_norm() end
    return nil
  end
  local norm
  if max_norm then
    norm = o.norm or optim.grad_norm(self.params)
    self.last_norm = norm
    if not finite(norm) then return norm end -- a bad step changes nothing
    args.grad_scale = optim.clip_factor(norm, max_norm)
  end
  if self.foreach then
    for _, grp in ipairs(self.groups) do
      for i, p in ipairs(grp.params) do grp.entries[i].g = grad_of(p) end
      sched(grp)
      ops.adamw_multi(grp.entries, args)
    end
  else
    for i, p in ipairs(self.params) do
      local s = self.state[i]
      args.weight_decay = s.wd
      sched(s.grp)
      ops.adamw_step(s.p, s.lowp, grad_of(p), s.m, s.v, args)
    end
  end
  return norm
end

-- The gradient norm of the last step that clipped (nil if it did not); reads
-- it from the device when the step left it there (a sync), at every call: a
-- replay of a captured step rewrites it there without the host knowing.
function AdamW:grad_norm()
  check_self(self, "grad_norm")
  if self.last_sumsq then return math.sqrt(self.last_sumsq:totable()[1]) end
  return self.last_norm
end

-- Zeroes grad and main_grad of every parameter (inside steps the first wgrad
-- of a step overwrites anyway; this is for code that accumulates by hand).
function AdamW:zero_grad()
  check_self(self, "zero_grad")
  for _, p in ipairs(self.params) do p:zero_grad() end
end

-- Checkpoint state (tegraph.checkpoint): the tensors to save and restore, each
-- { name =, t = } with t the live tensor (read when saving, written into when
-- loading): per parameter NAME.m and NAME.v, and NAME.master for a bf16
-- parameter's f32 master (the f32 parameter itself is the model's weight).
function AdamW:state_tensors()
  local out = {}
  for i, p in ipairs(self.params) do
    local s = self.state[i]
    if s.lowp then out[#out + 1] = { name = p.name .. ".master", t = s.p } end
    out[#out + 1] = { name = p.name .. ".m", t = s.m }
    out[#out + 1] = { name = p.name .. ".v", t = s.v }
  end
  return out
end

-- The host values of the state: the step count and the lr (capturable: those on the device).
function AdamW:state_values()
  return { kind = "AdamW", t = self:step_count(), lr = self.lr }
end

-- Restores state_values (after the tensors were read into state_tensors).
function AdamW:load_state_values(v)
  local t, lr = math.tointeger(tonumber(v.t)), tonumber(v.lr)
  if not t or t < 0 or not lr then
    raise(string.format("AdamW: bad checkpoint state (step count %s, lr %s)", tostring(v.t), tostring(v.lr)))
  end
  self.t = t
  self.lr = lr
  if self.capturable then
    for _, grp in ipairs(self.groups) do
      grp.step_t:fill_(t)
      grp.lr_t:fill_(lr)
    end
  end
end

------------------------------------------------------------------------ schedules
-- Linear warmup from 0 to lr over `warmup` steps, then cosine decay to
-- min_lr at step `total` (constant after). Steps count from 1.
--   optim.cosine_schedule{lr=, warmup=0, total=, min_lr=0} -> fn(step) -> lr
function optim.cosine_schedule(o)
  if type(o) ~= "table" then
    raise("cosine_schedule: expects a table {lr=, total=, warmup=, min_lr=}, got " .. type(o))
  end
  options.check("cosine_schedule", o, { "lr", "total", "warmup", "min_lr" })
  local lr, warmup, total, min_lr = o.lr, o.warmup or 0, o.total, o.min_lr or 0.0
  if type(lr) ~= "number" or type(total) ~= "number" then
    raise("cosine_schedule: lr and total (numbers) are required")
  end
  local function check(name, v, ok, want)
    if type(v) ~= "number" or not finite(v) or not ok then
      raise(string.format("cosine_schedule: %s must be %s, got %s", name, want, tostring(v)))
    end
  end
  check("lr", lr, lr >= 0, "a finite number >= 0")
  check("total", total, math.type(total) == "integer" and total >= 1, "an integer >= 1 (the last step)")
  check("warmup", warmup, math.type(warmup) == "integer" and warmup >= 0, "an integer >= 0")
  check("min_lr", min_lr, type(min_lr) == "number" and min_lr >= 0 and min_lr <= lr, "a finite number in [0, lr]")
  return function(step)
    if type(step) ~= "number" then raise("cosine_schedule: the step must be a number, got " .. type(step)) end
    if warmup > 0 and step <= warmup then return lr * step / warmup end
    local span = math.max(1, total - warmup)
    local progress = math.min(1.0, math.max(0.0, (step - warmup) / span))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
  end
end

return optim
