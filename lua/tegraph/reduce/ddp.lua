-- tegraph.reduce.ddp: data parallel — each bucket all-reduced asynchronously as soon as its last wgrad is in.
--
--   local ddp = require("tegraph.reduce.ddp").new{ params = model:parameters(),
--     comm = tg.comm.world(), op = "avg", bucket_bytes = 25 MiB, allow_missing = false }
--   ... step_begin, microbatches, step_end ...
--   ddp:finish()   -- waits for every bucket (the step check first), then opt:step()
--
-- comm: a communicator; op: "avg", "sum", "max" or "min"; bucket_bytes or bucket_numel (one of them, an integer
-- >= 1; a bucket closes once it holds at least that much, bucket_bytes rounded up to whole f32 elements);
-- allow_missing: a boolean (see finish). Each is checked here, not at the first reduce.
--
-- The reduce of a bucket overlaps the backward of the earlier layers: the hooks
-- of its parameters fire right after their wgrad (after graph replays too), and
-- the last one issues the all-reduce. On CUDA it runs on the communication
-- stream, ordered after the compute stream; finish() orders the compute stream
-- after it (the optimizer then reads reduced gradients).
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"
local reduce = require "tegraph.reduce"

local M = {}
local DDP = {}
DDP.__index = DDP

local ALL_REDUCE_OPS = { avg = true, sum = true, max = true, min = true }

function M.new(o)
  if type(o) ~= "table" or type(o.params) ~= "table" then raise("ddp: params (a list) is required") end
  options.check("ddp", o, { "params", "comm", "op", "bucket_bytes", "bucket_numel", "allow_missing" })
  local c = reduce.check_comm("ddp", o.comm)
  -- checked here: the all-reduces of the hooks would refuse them only in the first backward
  if o.op ~= nil and not ALL_REDUCE_OPS[o.op] then
    raise(string.format("ddp: op must be \"avg\", \"sum\", \"max\" or \"min\" (got %s %s)", type(o.op), tostring(o.op)))
  end
  if o.allow_missing ~= nil and type(o.allow_missing) ~= "boolean" then
    raise(string.format("ddp: allow_missing must be a boolean (got %s %s)", type(o.allow_missing), tostring(o.allow_missing)))
  end
  local self = setmetatable({
    comm = c,
    op = o.op or "avg",
    allow_missing = o.allow_missing,
    pending = {}, -- requests in issue order
    log = {},     -- bucket indices in the order their reduce was issued (this step)
  }, DDP)
  self.tracker = reduce.tracker {
    name = "ddp",
    params = o.params,
    bucket_bytes = o.bucket_bytes,
    bucket_numel = o.bucket_numel,
    on_ready = function(b, info)
      -- name: the span of this reduce in a trace (tg.trace) is "all_reduce ddp bucket <i>"
      self.pending[#self.pending + 1] = c:all_reduce(b.tensor, { op = self.op, async = true, name = "ddp bucket " .. b.index })
      -- negative: completed by finish() (parameters of it got no gradient on this rank), for check_order
      self.log[#self.log + 1] = info.flushed and -b.index or b.index
    end,
  }
  self.grad_buffer = self.tracker.grad_buffer
  self.buckets = self.tracker.buckets
  reduce.check_layout("ddp", c, self.buckets)
  return self
end

-- Waits for every bucket's reduce. Fails (after waiting for what was issued)
-- when a bucket did not complete, unless allow_missing, which reduces it now
-- (a parameter without a gradient this step contributes zero) and then checks
-- that every rank reduced the buckets in the same order (check_order).
function DDP:finish()
  local missed
  if self.allow_missing then
    missed = self.tracker:incomplete()
    self.tracker:flush()
  end
  local ok, err = pcall(self.tracker.check, self.tracker)
  for _, r in ipairs(self.pending) do r:wait() end
  local log = self.log
  self.last_log, self.log, self.pending = self.log, {}, {}
  self.tracker:reset()
  if missed then self:check_order(log, missed) end
  if not ok then error(err, 0) end
end

-- With allow_missing, a rank that misses other parameters than another completes its buckets in another order,
-- and the all-reduces pair up in issue order: a bucket is averaged with another bucket of the other rank. The
-- ranks compare the buckets they reduced, in order, and which of them missed gradients (one small all-gather a
-- step) and fail, before the optimizer uses those gradients, naming the ranks, their buckets and the parameters
-- this rank missed.
function DDP:check_order(log, missed)
  local c, nb = self.comm, #self.buckets
  local n = c:size()
  if n == 1 then return end
  local dev = self.buckets[1].tensor.device
  local out = core.zeros({ n * nb }, { dtype = "i32", device = dev })
  c:all_gather(out, core.tensor(log, { dtype = "i32", device = dev }), { name = "ddp bucket order" })
  local all = out:totable()
  local function order(r)
    local parts = {}
    for i = r * nb + 1, (r + 1) * nb do
      parts[#parts + 1] = all[i] < 0 and string.format("%d (missing gradients)", -all[i]) or tostring(all[i])
    end
    return table.concat(parts, ", ")
  end
  for r = 1, n - 1 do
    if order(r) ~= order(0) then
      local names = {}
      for _, x in ipairs(missed) do
        for _, nm in ipairs(x.missing) do names[#names + 1] = nm end
      end
      raise(string.format("ddp: the ranks reduced their buckets in different orders, or missed different "
        .. "gradients, this step: rank 0 reduced buckets %s; rank %d buckets %s (this is rank %d; it missed %s). allow_missing allows a parameter "
        .. "without a gradient on every rank: the reduces pair up in issue order, so different buckets may have been "
        .. "averaged together, and this step's gradients are not to be used", order(0), r, order(r), c:rank(),
        #names > 0 and table.concat(names, ", ") or "no parameter"))
    end
  end
end

-- Zeroes the grad buffer (the first wgrad of a step overwrites anyway; for code that accumulates by hand).
function DDP:zero_grad() self.grad_buffer:zero() end

function DDP:broadcast_params(root)
  reduce.broadcast_params(self.grad_buffer:params(), { comm = self.comm, root = root })
end

return M
