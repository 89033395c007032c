-- tegraph.reduce: gradient-reduce policies built from wgrad hooks + tegraph.comm, and the bucket tracker they share.
--
--   local reduce = require "tegraph.reduce"
--   local ddp = reduce.ddp{ params = model:parameters(), bucket_bytes = 4 << 20 }
--   for step = 1, steps do
--     tg.step_begin{ microbatches = M }
--     ... forward / backward / backward_dw of every microbatch ...
--     tg.step_end()
--     ddp:finish()          -- every bucket reduced (waits), before the optimizer
--     opt:step()
--   end
--
-- A policy owns a grad buffer (tg.comm.grad_buffer): the parameters' main_grad
-- become views into one f32 buffer in backward order, split into buckets, so a
-- bucket is reduced in one call as soon as its last wgrad is in.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"
local comm = core.comm

local M = {}

------------------------------------------------------------------------ tracker
-- Calls on_ready(bucket, info) when every parameter of a bucket has fired its
-- hook for the last microbatch of the step (info.last), i.e. when the bucket's
-- gradient is complete. Hooks fire in backward order, so buckets complete
-- while the rest of the backward still runs.
--   reduce.tracker{ params=, on_ready=fn, name="reduce",
--                   bucket_bytes=25 MiB | bucket_numel= (one of them, >= 1: M.bucket_numel), pad_to=1, align=64 }
--   -> tracker { grad_buffer=, buckets= {bucket...}, ready= {bucket index...} }
-- bucket = { index=, start= (1-based element), numel=, tensor= (1-D view), params= }
local Tracker = {}
Tracker.__index = Tracker

-- The bucket size options of a tracker or a policy, checked at its construction: bucket_bytes or bucket_numel
-- (not both: one would silently win), each a positive integer. A bucket closes once it holds at least that much,
-- so a size below one parameter makes one bucket per parameter; bucket_bytes counts the f32 gradients' bytes,
-- rounded up to whole elements (bucket_bytes = 3 is one element, not zero, which would mean one bucket).
-- Returns the bucket_numel to give grad_buffer (nil: its default, 25 MiB).
function M.bucket_numel(who, o)
  if o.bucket_bytes ~= nil and o.bucket_numel ~= nil then
    raise(string.format("%s: bucket_bytes (%s) and bucket_numel (%s) both given: give one of them", who,
      tostring(o.bucket_bytes), tostring(o.bucket_numel)))
  end
  for _, k in ipairs { "bucket_bytes", "bucket_numel" } do
    local v = o[k]
    if v ~= nil and (math.type(v) ~= "integer" or v < 1) then
      raise(string.format("%s: %s must be an integer >= 1 (got %s %s)", who, k, type(v), tostring(v)))
    end
  end
  if o.bucket_bytes then return o.bucket_bytes // 4 + (o.bucket_bytes % 4 ~= 0 and 1 or 0) end
  return o.bucket_numel
end

-- Refuses a comm option that is not a communicator (tg.comm.world(), comm:split()): it would fail only at the first
-- collective, as "attempt to call a nil value". Returns the communicator (the world when c is nil).
function M.check_comm(who, c)
  if c == nil then return comm.world() end
  local mt = getmetatable(c)
  if type(c) ~= "userdata" or type(mt) ~= "table" or mt.__name ~= "tegraph.Comm" then
    raise(string.format("%s: comm must be a communicator (tg.comm.world(), comm:split{...}), got %s %s", who, type(c),
      tostring(c)))
  end
  return c
end

function M.tracker(o)
  if type(o) ~= "table" or type(o.params) ~= "table" then raise("reduce.tracker: params (a list) is required") end
  if type(o.on_ready) ~= "function" then raise("reduce.tracker: on_ready (a function) is required") end
  if #o.params == 0 then raise((o.name or "reduce.tracker") .. ": params is empty (no parameter to reduce)") end
  options.check("reduce.tracker", o, { "params", "on_ready", "name", "bucket_bytes", "bucket_numel", "pad_to", "align" })
  local gb = comm.grad_buffer(o.params, {
    bucket_numel = M.bucket_numel(o.name or "reduce.tracker", o),
    pad_to = o.pad_to,
    align = o.align,
  })
  local self = setmetatable({
    name = o.name or "reduce",
    grad_buffer = gb,
    buckets = gb:buckets(),
    on_ready = o.on_ready,
    fired = {}, -- bucket index -> parameters that fired their last wgrad this step
    seen = {},  -- parameter -> true once its last wgrad fired this step
    ready = {}, -- bucket indices in the order they completed
  }, Tracker)
  for bi, b in ipairs(self.buckets) do
    self.fired[bi] = 0
    for _, p in ipairs(b.params) do
      p:register_hook(function(_, info)
        if not info.last then return end
        if self.seen[p] then
          error(string.format("%s: parameter '%s' fired its last wgrad hook twice in step %d (call finish() after "
            .. "every step)", self.name, p.name, info.step), 0)
        end
        self.seen[p] = true
        self.fired[bi] = self.fired[bi] + 1
        if self.fired[bi] == #b.params then
          self.ready[#self.ready + 1] = bi
          self.on_ready(b, info)
        end
      end)
    end
  end
  return self
end

-- The buckets that have not completed this step, each with the names of the
-- parameters that did not fire: { {bucket=, missing={names}} ... }.
function Tracker:incomplete()
  local out = {}
  for bi, b in ipairs(self.buckets) do
    if self.fired[bi] < #b.params then
      local names = {}
      for _, p in ipairs(b.params) do
        if not self.seen[p] then names[#names + 1] = p.name end
      end
      out[#out + 1] = { bucket = b, missing = names }
    end
  end
  return out
end

-- Raises when a bucket has not completed, naming its parameters that did not
-- fire (the step check of a policy).
function Tracker:check()
  local bad = self:incomplete()
  if #bad == 0 then return end
  local lines = {}
  for _, x in ipairs(bad) do
    lines[#lines + 1] = string.format("bucket %d of %d: %s", x.bucket.index, #self.buckets, table.concat(x.missing, ", "))
  end
  error(string.format("%s: %d bucket(s) not reduced this step: their parameters did not fire the hook of their last "
    .. "microbatch (did every module run backward and backward_dw inside tg.step_begin/step_end?)\n  %s",
    self.name, #bad, table.concat(lines, "\n  ")), 0)
end

-- Completes the buckets that did not complete (in buffer order), for
-- policies that allow parameters without gradients this step. The ranks must
-- miss the same parameters: collectives pair up in issue order, so ranks that
-- miss different ones would pair different buckets.
function Tracker:flush()
  for _, x in ipairs(self:incomplete()) do
    local b = x.bucket
    -- a parameter without a wgrad this step still holds the last step's (already
    -- reduced) gradient in the buffer: it contributes zero, not that again
    for _, p in ipairs(b.params) do
      if not self.seen[p] then p.main_grad:fill_(0) end
    end
    self.fired[b.index] = #b.params
    self.ready[#self.ready + 1] = b.index
    self.on_ready(b, { last = true, flushed = true })
  end
end

-- Forgets this step's firings (after finish()).
function Tracker:reset()
  for bi in ipairs(self.buckets) do self.fired[bi] = 0 end
  self.seen = {}
  self.ready = {}
end

------------------------------------------------------------------------ helpers
-- A bucket's layout: its size and each parameter's name and shape, in buffer order.
local function layout_of(b)
  local parts = { tostring(b.numel) }
  for _, p in ipairs(b.params) do parts[#parts + 1] = string.format("%s (%s)", p.name, table.concat(p.shape, ", ")) end
  return parts
end

-- A 31-bit FNV-1a hash of s (fits an i32 exactly).
local function hash31(s)
  local h = 2166136261
  for i = 1, #s do h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff end
  return h & 0x7fffffff
end

-- Compares the buckets' layouts across the ranks of c (at a policy's construction, a collective): the padding
-- of the buckets can make their sizes equal while the parameters in them differ, and then the reduces would
-- mix different parameters. Raises naming the first bucket that differs and the ranks.
function M.check_layout(name, c, buckets)
  local n = c:size()
  if n == 1 then return end
  local dev = buckets[1] and buckets[1].tensor.device or nil
  local hashes, all = { #buckets }, {}
  for bi, b in ipairs(buckets) do hashes[bi + 1] = hash31(table.concat(layout_of(b), "; ")) end
  local whole = hash31(table.concat(hashes, " "))
  local out = core.zeros({ 2 * n }, { dtype = "i32", device = dev })
  c:all_gather(out, core.tensor({ #buckets, whole }, { dtype = "i32", device = dev }), { name = name .. " layout" })
  all = out:totable()
  local bad
  for r = 1, n - 1 do
    if all[2 * r + 1] ~= all[1] or all[2 * r + 2] ~= all[2] then bad = r; break end
  end
  if not bad then return end
  local me = c:rank()
  if all[2 * bad + 1] ~= all[1] then
    raise(string.format("%s: the ranks' parameters differ: %d bucket(s) on rank 0, %d on rank %d (this is rank %d; "
      .. "every rank must pass the same parameters, in the same order and shapes)", name, all[1], all[2 * bad + 1], bad, me))
  end
  -- the same number of buckets: find the first that differs
  local per = core.zeros({ #buckets * n }, { dtype = "i32", device = dev })
  local mine = {}
  for bi = 1, #buckets do mine[bi] = hashes[bi + 1] end
  c:all_gather(per, core.tensor(mine, { dtype = "i32", device = dev }), { name = name .. " bucket layouts" })
  local h = per:totable()
  for bi, b in ipairs(buckets) do
    if h[bad * #buckets + bi] ~= h[bi] then
      raise(string.format("%s: the ranks' parameters differ: bucket %d of %d holds other parameters (or shapes) on "
        .. "rank %d than on rank 0; on this rank (%d) it holds %s elements: %s (every rank must pass the same "
        .. "parameters, in the same order and shapes)", name, bi, #buckets, bad, me, layout_of(b)[1],
        table.concat(layout_of(b), ", ", 2)))
    end
  end
end

-- Makes every rank's parameters (data and the f32 master copy) equal to the
-- root's: call once after building the model when initialisation differs.
function M.broadcast_params(params, o)
  o = o or {}
  if type(o) ~= "table" then raise("reduce.broadcast_params: options must be a table {comm =, root =}") end
  options.check("reduce.broadcast_params", o, { "comm", "root" })
  local c = o.comm or comm.world()
  for _, p in ipairs(params) do
    c:broadcast(p.data, { root = o.root or 0 })
    if p.master then p.master:copy_(p.data) end
  end
end

function M.ddp(o) return require("tegraph.reduce.ddp").new(o) end
function M.zero1(o) return require("tegraph.reduce.zero1").new(o) end

return M
