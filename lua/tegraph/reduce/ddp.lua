-- tegraph.reduce.ddp: data parallel — each bucket all-reduced asynchronously as soon as its last wgrad is in.
--
--   local ddp = require("tegraph.reduce.ddp").new{ params = model:parameters(),
--     comm = tg.comm.world(), op = "avg", bucket_bytes = 25 MiB, allow_missing = false }
--   ... step_begin, microbatches, step_end ...
--   ddp:finish()   -- waits for every bucket (the step check first), then opt:step()
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

function M.new(o)
  if type(o) ~= "table" or type(o.params) ~= "table" then raise("ddp: params (a list) is required") end
  options.check("ddp", o, { "params", "comm", "op", "bucket_bytes", "bucket_numel", "allow_missing" })
  local c = o.comm or core.comm.world()
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
    on_ready = function(b)
      -- name: the span of this reduce in a trace (tg.trace) is "all_reduce ddp bucket <i>"
      self.pending[#self.pending + 1] = c:all_reduce(b.tensor, { op = self.op, async = true, name = "ddp bucket " .. b.index })
      self.log[#self.log + 1] = b.index
    end,
  }
  self.grad_buffer = self.tracker.grad_buffer
  self.buckets = self.tracker.buckets
  reduce.check_layout("ddp", c, self.buckets)
  return self
end

-- Waits for every bucket's reduce. Fails (after waiting for what was issued)
-- when a bucket did not complete, unless allow_missing, which reduces it now.
function DDP:finish()
  if self.allow_missing then self.tracker:flush() end
  local ok, err = pcall(self.tracker.check, self.tracker)
  for _, r in ipairs(self.pending) do r:wait() end
  self.last_log, self.log, self.pending = self.log, {}, {}
  self.tracker:reset()
  if not ok then error(err, 0) end
end

-- Zeroes the grad buffer (the first wgrad of a step overwrites anyway; for code that accumulates by hand).
function DDP:zero_grad() self.grad_buffer:zero() end

function DDP:broadcast_params(root)
  reduce.broadcast_params(self.grad_buffer:params(), { comm = self.comm, root = root })
end

return M
