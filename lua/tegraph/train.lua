-- tegraph.train — the training step of a GPT (nn.GPT) in every execution mode: eager, graphed
-- callables with delayed wgrad, and pipeline schedules over ranks, with the hook-driven reduce
-- (ddp or zero1) on the data-parallel communicator and AdamW.
--
--   local train = require "tegraph.train"
--   local tr = train.new{ model = gpt, microbatches = M, graph = true, pipeline = 2, schedule = "1f1b",
--     comm = tg.comm.world(), reduce = "ddp", adamw = {lr =, weight_decay =, max_norm =, ...},
--     sample = idx, graph_modules = {"attn", "mlp"}, bucket_bytes = 25 << 20 }
--   for step = 1, steps do
--     local xs, ys = ...                      -- this replica's microbatches (lists of M tensors)
--     local r = tr:step(xs, ys, lr)           -- r.host_s: host time to issue the step
--     local losses = tr:losses(r)             -- every replica's microbatch losses, in global order
--   end
--
-- Modes (N ranks in comm, P = pipeline, D = N / P data-parallel replicas):
--   eager, P = 1      the model's own forward_loss / backward / backward_dw per microbatch
--   graph, P = 1      the layers in chunks of layers_per_chunk, each chunk a graphed callable with
--                     F/B/W graphs per microbatch (delayed wgrad), captured and run in one plan's
--                     order: every forward, then the backwards, the W of a chunk right after the
--                     last microbatch's B of that chunk (its bucket reduce overlaps the rest)
--   graph = "full"    P = 1, full-iteration capture (tg.graph.capture_step): the first step runs eagerly, the
--                     second captures the whole step (every microbatch's forward and backward, the hooks'
--                     reduce and ddp's finish, the clip and capturable AdamW) and replays it; each later step
--                     copies the batches into static inputs, sets the lr on the device and replays
--   graph_modules     P = 1, eager step with the named modules of every layer (attn, mlp) graphed in place
--                     (tg.graph.graph_modules; Megatron's --cuda-graph-modules)
--   P > 1             the layers split into P x V chunks (V = 2 for interleaved and zb_v), this rank
--                     runs stage pp_rank + 1 of the schedule over the pp communicator, eager or graphed
-- Chunk 1 holds the embedding, the last chunk's output feeds the LM head, which runs eagerly on the
-- stage of the last chunk (inside the loss-gradient call of the B of the last chunk). When the
-- embedding and the head sit on different stages the tied token table becomes two copies, the
-- embedding's on the first stage and an untied head's on the last; their gradients are summed over
-- a communicator of those two stages before the optimizer, so both copies take the same update.
-- The gradient-norm clip then uses the norm over every stage (an all-reduce over pp).
local tg = require "tegraph"
local S = require "tegraph.schedule"
local plan_ = require "tegraph.schedule.plan"
local optim = require "tegraph.optim"
local raise = require "tegraph.raise"
local options = require "tegraph.options"

local M = {}

-- The schedules by the names --schedule takes, and the chunks per stage each one places.
M.schedules = {
  gpipe = { fn = S.gpipe, v = 1 },
  ["1f1b"] = { fn = S.one_f_one_b, v = 1 },
  interleaved = { fn = function(t) t.chunks_per_stage = 2 return S.interleaved(t) end, v = 2 },
  zb_h1 = { fn = S.zb_h1, v = 1 },
  zb_v = { fn = S.zb_v, v = 2 },
}
M.schedule_names = "gpipe, 1f1b, interleaved, zb_h1, zb_v"

-- One stage holding C chunks: every forward, then the backwards, each chunk's W (when delayed) right
-- after the last microbatch's B of that chunk.
function M.single_stage_plan(C, Mb, delayed)
  for _, a in ipairs { { C, "chunks" }, { Mb, "microbatches" } } do
    if math.type(a[1]) ~= "integer" or a[1] < 1 then
      raise(string.format("single_stage_plan: %s must be an integer >= 1, got %s", a[2],
        type(a[1]) == "number" and tostring(a[1]) or type(a[1])))
    end
  end
  plan_.check_size(1, C, Mb, "single_stage_plan")
  local owner = {}
  for c = 1, C do owner[c] = 1 end
  local plan = plan_.new("graphed", 1, C, Mb, owner)
  for m = 1, Mb do
    for c = 1, C do plan_.push(plan, 1, "F", c, m) end
  end
  for m = 1, Mb - 1 do
    for c = C, 1, -1 do plan_.push(plan, 1, "B", c, m, not delayed) end
  end
  for c = C, 1, -1 do
    plan_.push(plan, 1, "B", c, Mb, not delayed)
    if delayed then
      for m = 1, Mb do plan_.push(plan, 1, "W", c, m) end
    end
  end
  return plan
end

-- positioned at the caller's line (tegraph.raise), as the rest of the library's argument checks
local function fail(msg) raise("train: " .. msg) end

-- "attn,mlp" -> {"attn", "mlp"} (a command line's list of module names).
function M.split_names(s)
  local out = {}
  for name in tostring(s):gmatch("[^,%s]+") do out[#out + 1] = name end
  return out
end

local function int_opt(o, k, lo, default)
  local v = o[k]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < lo then
    fail(string.format("%s must be an integer >= %d (got %s)", k, lo, tostring(v)))
  end
  return v
end

local function dedup(list)
  local seen, out = {}, {}
  for _, p in ipairs(list) do
    if not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  return out
end

local Trainer = {}
Trainer.__index = Trainer

local NEW_KEYS = { "adamw", "bucket_bytes", "comm", "graph", "graph_modules", "hooks", "layers_per_chunk",
  "microbatches", "model", "pipeline", "reduce", "sample", "schedule" }

function M.new(o)
  if type(o) ~= "table" then fail("new expects a table of options") end
  options.check("train.new", o, NEW_KEYS)
  local model = o.model
  if type(model) ~= "table" or not model.layers or not model.embed or not model.head then
    fail("model must be an nn.GPT")
  end
  local Mb = int_opt(o, "microbatches", 1, 1)
  local bucket_bytes = int_opt(o, "bucket_bytes", 1, nil) -- the reduce's bucket size (default: the policy's, 25 MiB)
  local P = int_opt(o, "pipeline", 1, 1)
  local world = o.comm
  local N = world and world:size() or 1
  if N % P ~= 0 then
    fail(string.format("--pipeline %d does not divide the %d ranks (N = P x D)", P, N))
  end
  local D = N // P
  local L = #model.layers
  if o.graph ~= nil and type(o.graph) ~= "boolean" and o.graph ~= "full" then
    fail("graph must be true (graphed layer chunks), \"full\" (full-iteration capture) or false (got " .. tostring(o.graph) .. ")")
  end
  local self = setmetatable({ model = model, M = Mb, P = P, D = D, N = N, world = world, graph = o.graph == true,
    full = o.graph == "full", stage = 1, dp_rank = 0 }, Trainer)
  if self.full and P > 1 then
    fail("graph = \"full\" captures the whole step of one replica: not with pipeline " .. P .. " (the schedule's " ..
      "sends and receives are not captured)")
  end
  if self.full and o.graph_modules ~= nil then fail("graph = \"full\" captures the whole step: graph_modules is for the eager step") end
  if self.full and o.reduce == "zero1" then
    fail("graph = \"full\" with zero1 is not supported (zero1's step reads the gradient norm on the host and " ..
      "gathers the parameters outside the step: it cannot be captured; use ddp)")
  end
  if o.reduce ~= nil and o.reduce ~= "ddp" and o.reduce ~= "zero1" and o.reduce ~= "none" then
    fail("reduce must be ddp, zero1 or none (got " .. tostring(o.reduce) .. ")")
  end
  if o.hooks ~= nil and o.hooks ~= "reduce" and o.hooks ~= "noop" then
    fail("hooks must be reduce or noop (got " .. tostring(o.hooks) .. ")")
  end

  -- communicators: pp (the stages of this replica) and dp (this stage's replicas)
  if N > 1 then
    local layout = world:split { pp = P }
    self.pp, self.dp = layout.pp, layout.dp
    self.stage, self.dp_rank = layout.pp_rank + 1, layout.dp_rank
  end

  -- the plan and its chunks
  local C, plan
  local sched
  if P > 1 then
    local name = o.schedule or "1f1b"
    sched = M.schedules[name]
    if not sched then fail(string.format("unknown schedule '%s' (one of %s)", tostring(name), M.schedule_names)) end
    C = P * sched.v
    if L % C ~= 0 then
      fail(string.format("%d layers do not split into the %d chunks of %s on %d stages (%d per stage)", L, C, name, P,
        sched.v))
    end
    if o.layers_per_chunk and o.layers_per_chunk ~= L // C then
      fail(string.format("--layers-per-chunk %d: %s on %d stages puts %d layers in each of its %d chunks",
        o.layers_per_chunk, name, P, L // C, C))
    end
    -- the generators refuse the combinations of stages and microbatches they cannot schedule (interleaved:
    -- microbatches a multiple of the stages): a refusal of train's options, said as one
    local okp, res = pcall(sched.fn, { stages = P, microbatches = Mb })
    if not okp then
      local msg = tostring(res):gsub("^[^\n]-%.lua:%d+: ", "")
      if not msg:match("^schedule%.") then error(res, 0) end
      fail(string.format("schedule %s on %d stages with %d microbatches: %s", name, P, Mb, msg))
    end
    plan = res
    self.schedule = name
  elseif self.graph then
    local k = int_opt(o, "layers_per_chunk", 1, 1)
    if L % k ~= 0 then fail(string.format("--layers-per-chunk %d does not divide the %d layers", k, L)) end
    C = L // k
    plan = M.single_stage_plan(C, Mb, model.cfg.delay_wgrad == true or model.cfg.delay_wgrad == "layers")
  end
  self.plan, self.C = plan, C

  local params
  if plan then
    plan.owner = plan_.owners(plan)
    local k = L // C
    local owner = plan.owner
    local first, last = owner[1], owner[C]
    self.first_stage, self.last_stage = self.stage == first, self.stage == last
    local chunks = {}
    for c = 1, C do
      if P == 1 or owner[c] == self.stage then
        local mods = { name = "chunk" .. c }
        if c == 1 then mods[#mods + 1] = model.embed end
        for i = (c - 1) * k + 1, c * k do mods[#mods + 1] = model.layers[i] end
        chunks[c] = tg.nn.Sequential(mods)
      end
    end
    self.chunks = chunks
    -- the head: tied when the embedding is on the same stage, else an untied copy on the last stage
    local head = model.head
    self.tied_split = first ~= last
    if self.tied_split then
      if self.last_stage then
        local cfg = model.cfg
        local pad = cfg.make_vocab_size_divisible_by or 1
        local own = tg.nn.LMHead { hidden_size = cfg.hidden_size, vocab_size = (cfg.vocab_size + pad - 1) // pad * pad,
          normalization = cfg.normalization, dtype = cfg.dtype, device = cfg.device, name = "lm_head",
          fused_loss = cfg.fused_lm_head, loss_chunk_rows = cfg.lm_head_chunk_rows }
        -- its norm from the tied head, its projection from the embedding's token table
        local wte = model.embed:parameters()[1]
        local by_name = {}
        for _, p in ipairs(head:parameters()) do by_name[p.name] = p end
        for _, p in ipairs(own:parameters()) do
          local from = by_name[p.name]
          if not from and p:numel() == wte:numel() then
            from = wte
            self.head_table = p
          end
          if not from then fail("the untied LM head's parameter " .. p.name .. " has no counterpart in the model") end
          p.data:copy_(from.data)
          if p.master and from.master then p.master:copy_(from.master) end
        end
        self.head = own
      end
      -- the model's tied head is not run on any stage: drop it, so the table takes one contribution
      model.head = nil
      head = nil
      collectgarbage()
      collectgarbage()
      self.embed_table = model.embed:parameters()[1]
    elseif self.last_stage then
      self.head = head
    end
    local list = {}
    for c = 1, C do
      if chunks[c] then
        for _, p in ipairs(chunks[c]:parameters()) do list[#list + 1] = p end
      end
    end
    if self.head then
      for _, p in ipairs(self.head:parameters()) do list[#list + 1] = p end
    end
    params = dedup(list)
    if self.tied_split then
      -- the communicator of the two copies of the token table (first and last stage of a replica)
      local ends = self.stage == first or self.stage == last
      local color = ends and self.dp_rank or (D + world:rank())
      local tie = world:split(color, self.stage) -- collective: every rank splits, the middle stages each alone
      if ends then self.tie = tie else tie:close() end
    end
  else
    self.first_stage, self.last_stage = true, true
    params = model:parameters()
  end
  self.params = params

  -- the reduce, driven by the wgrad hooks: on the dp communicator, or the world of one rank
  local reduce = o.reduce or "ddp"
  -- every graphed mode registers the hooks (on one rank they reduce over a world of one), so the step-end hook
  -- check sees replays there as it does eager calls
  local use_hooks = N > 1 or self.graph or self.full or o.graph_modules ~= nil or o.hooks == "noop" or o.reduce ~= nil
  local dp = self.dp or (use_hooks and tg.comm.world()) or nil
  local ao = {}
  for k, v in pairs(o.adamw or {}) do ao[k] = v end
  self.max_norm = ao.max_norm
  if o.hooks == "noop" then
    for _, p in ipairs(params) do p:register_hook(function() end) end
    self.hooks = "noop"
  elseif use_hooks and reduce == "ddp" then
    self.ddp = require("tegraph.reduce.ddp").new { params = params, comm = dp, op = "avg", bucket_bytes = bucket_bytes }
    self.hooks = "ddp"
  elseif use_hooks and reduce == "zero1" then
    -- a token table split over the first and last stage (tied_split) stays out of zero1's shards: its two copies
    -- sit in different buckets of different buffers, so their gradients could not be summed shard by shard.
    -- It is all-reduced over dp as ddp does, summed over the tie, and updated by an AdamW of its own on both
    -- stages (the same gradient and state: the copies stay equal).
    self.table = self.tied_split and (self.first_stage and self.embed_table or self.last_stage and self.head_table) or nil
    local zo = {}
    for k, v in pairs(ao) do zo[k] = v end
    zo.params, zo.comm, zo.bucket_bytes = params, dp, bucket_bytes
    if self.table then
      zo.params = {}
      for _, p in ipairs(params) do if p ~= self.table then zo.params[#zo.params + 1] = p end end
      self.table_ddp = require("tegraph.reduce.ddp").new { params = { self.table }, comm = dp, op = "avg",
        bucket_bytes = bucket_bytes }
      local to = {}
      for k, v in pairs(ao) do to[k] = v end
      to.sync_norm = false
      self.table_adamw = optim.AdamW({ self.table }, to)
    end
    self.zero1 = require("tegraph.reduce.zero1").new(zo)
    self.hooks = "zero1"
  end
  -- FP8 with delayed scaling on several replicas: the step's amaxes reduced (max) over dp after each step
  local fp8r = model.cfg.fp8
  if self.dp and self.D > 1 and fp8r and fp8r.scaling == "delayed" then
    self.fp8_amax = tg.fp8.amax_reduce { model = model.layers, comm = self.dp }
  end
  if not self.zero1 then
    ao.sync_norm = false
    if self.graph or self.full then ao.capturable = true end
    self.adamw = optim.AdamW(params, ao)
  end

  -- graphed callables, captured in the plan's order (this stage's when pipelined)
  if self.graph then
    local cfg = model.cfg
    local sample = o.sample
    if not sample then fail("graph mode needs sample = an input batch (B, T) i32") end
    local h = tg.zeros({ sample:dim(1), sample:dim(2), cfg.hidden_size }, { dtype = cfg.dtype, device = cfg.device })
    local samples = {}
    for c = 1, C do samples[c] = c == 1 and sample or h end
    -- one process: the layer chunks hand their outputs on through shared static buffers (no copies)
    self.graphed = S.make_graphed(plan, self.chunks, { samples = samples, warmup = 1,
      stages = P > 1 and { self.stage } or nil, chain = P == 1 })
  end

  -- partial capture: the named modules of every layer graphed in place, the rest of the step eager
  if o.graph_modules ~= nil then
    local names = o.graph_modules
    if type(names) ~= "table" or #names == 0 then
      fail("graph_modules must be a list of module names, e.g. {\"attn\", \"mlp\"}")
    end
    if plan then fail("graph_modules (partial capture) runs with the eager single-stage step, not with graph or pipeline") end
    local sample = o.sample
    if not sample then fail("graph_modules needs sample = an input batch (B, T) i32") end
    local cfg = model.cfg
    local h = tg.zeros({ sample:dim(1), sample:dim(2), cfg.hidden_size }, { dtype = cfg.dtype, device = cfg.device })
    local order = {} -- the eager step's: F and B of each microbatch, then the delayed wgrads
    for mb = 1, Mb do
      order[#order + 1] = { op = "F", mb = mb }
      order[#order + 1] = { op = "B", mb = mb }
    end
    for mb = 1, Mb do order[#order + 1] = { op = "W", mb = mb } end
    self.partial = tg.graph.graph_modules(model.body, names, { sample = h, microbatches = Mb, order = order, warmup = 1 })
    self.partial_names = table.concat(names, ",")
  end
  return self
end

-- The parameters this rank trains.
function Trainer:parameters() return self.params end

-- Refuses step's arguments up front (before any microbatch runs): xs and ys lists of at least M tensors
-- where this rank reads them, lr nil or a finite number >= 0, o nil or {skip_nonfinite =}.
function Trainer:check_step_args(xs, ys, lr, o)
  local Mb = self.M
  for _, a in ipairs { { xs, "inputs (xs)", self.P == 1 or self.first_stage },
    { ys, "targets (ys)", self.P == 1 or self.last_stage } } do
    local list, what, needed = a[1], a[2], a[3]
    if needed or list ~= nil then
      if type(list) ~= "table" then
        raise(string.format("train:step: %s must be a list of %d tensors (one per microbatch), got %s", what, Mb,
          type(list)))
      end
      if #list < Mb then
        raise(string.format("train:step: %d %s for %d microbatches (give one per microbatch)", #list, what, Mb))
      end
      for mb = 1, Mb do
        if not tg.is_tensor(list[mb]) then
          raise(string.format("train:step: %s[%d] is a %s, not a tensor", what, mb, type(list[mb])))
        end
      end
    end
  end
  if lr ~= nil and (type(lr) ~= "number" or lr ~= lr or lr == math.huge or lr < 0) then
    raise(string.format("train:step: lr must be a finite number >= 0, got %s", tostring(lr)))
  end
  if o ~= nil then
    if type(o) ~= "table" then raise("train:step: options must be a table {skip_nonfinite =}, got " .. type(o)) end
    options.check("train:step", o, { "skip_nonfinite" })
  end
end

-- One optimizer step over this replica's microbatches xs, ys (lists of M tensors; on a pipeline
-- only the first stage reads xs and only the last reads ys). Returns {loss = {loss tensor per
-- microbatch} (last stage), host_s = seconds to issue the step}. o.skip_nonfinite: the losses and
-- the gradient norm are read before the update (a sync), and a non-finite one leaves the update
-- out on every rank: the result then has skipped = true, and losses (as Trainer:losses) and norm.
function Trainer:step(xs, ys, lr, o)
  self:check_step_args(xs, ys, lr, o)
  if self.full and self.full_warm then return self:full_step(xs, ys, lr, o) end
  if self.full and o and o.skip_nonfinite then
    fail("skip_nonfinite (--on-nan skip) reads the losses and the norm before the update, which a captured step " ..
      "cannot; use --on-nan stop with --graph full")
  end
  self.full_warm = self.full -- full: this first step runs eagerly (allocator and library workspaces warm)
  local t0 = tg.time()
  local Mb = self.M
  local losses = {}
  local scale = 1.0 / Mb
  tg.step_begin { microbatches = Mb }
  local ok, err = pcall(function()
    if not self.plan then
      local model = self.model
      for mb = 1, Mb do
        losses[mb] = model:forward_loss(xs[mb], ys[mb], mb, -1, scale)
        model:backward(scale, mb)
      end
      if model:need_backward_dw() then
        for mb = 1, Mb do model:backward_dw(mb) end
      end
    else
      local head = self.head
      S.execute(self.plan, {
        chunks = self.chunks, graphed = self.graphed, comm = self.P > 1 and self.pp or nil, step = false,
        inputs = self.first_stage and xs or nil,
        loss_grad = self.last_stage and function(mb, y)
          losses[mb] = head:loss(y, ys[mb], mb, -1, scale)
          local dh = head:backward(scale, mb)
          if head:need_backward_dw() then head:backward_dw(mb) end
          return dh
        end or nil,
      })
    end
  end)
  if not ok then
    pcall(tg.step_end)
    error(err, 0)
  end
  tg.step_end() -- the hook check: every parameter's hooks fired once per microbatch
  if self.fp8_amax then self.fp8_amax:reduce() end
  if self.ddp then self.ddp:finish() end
  if self.zero1 then self.zero1:finish() end
  if self.table_ddp then self.table_ddp:finish() end
  if self.tie then -- the two copies of the token table take the sum of their gradients
    local p = self.first_stage and self.embed_table or self.head_table
    self.tie:all_reduce(p.wgrad, { op = "sum" })
  end
  if o and o.skip_nonfinite then
    local r = { loss = losses, host_s = tg.time() - t0 }
    r.losses = self:losses(r)
    local bad = false
    for _, v in ipairs(r.losses) do
      if v ~= v or v == math.huge or v == -math.huge then bad = true end
    end
    if not bad then
      local n
      if self.zero1 then n = self.P > 1 and self:zero1_norm() or self.zero1:grad_norm()
      elseif self.P > 1 then n = self:global_norm()
      else n = optim.grad_norm(self.params) end
      r.norm = n
      bad = n ~= n or n == math.huge
    end
    if bad then
      r.skipped = true
      self.last_norm = r.norm
      return r
    end
    self:update(lr)
    r.host_s = tg.time() - t0
    return r
  end
  self:update(lr)
  return { loss = losses, host_s = tg.time() - t0 }
end

-- graph = "full": the captured step's body — every microbatch's forward and backward on the static inputs,
-- the delayed wgrads, ddp's finish (its hooks' all-reduces are device work in the graph), the clip and
-- capturable AdamW (lr on the device). Losses land in static tensors, read after each replay.
function Trainer:full_body()
  local model, Mb = self.model, self.M
  local scale = 1.0 / Mb
  for mb = 1, Mb do
    self.full_losses[mb] = model:forward_loss(self.sx[mb], self.sy[mb], mb, -1, scale)
    model:backward(scale, mb)
  end
  if model:need_backward_dw() then
    for mb = 1, Mb do model:backward_dw(mb) end
  end
  if self.fp8_amax then self.fp8_amax:reduce() end
  if self.ddp then self.ddp:finish() end
  self.adamw:step()
end

-- graph = "full" after the first step: captures the step once, then per step fills the static inputs, sets
-- the lr and replays (step_begin, the graph, step_end with the hook check).
function Trainer:full_step(xs, ys, lr, o)
  if o and o.skip_nonfinite then
    fail("skip_nonfinite (--on-nan skip) reads the losses and the norm before the update, which a captured step " ..
      "cannot; use --on-nan stop with --graph full")
  end
  local t0 = tg.time()
  local Mb = self.M
  if not self.captured then
    self.sx, self.sy, self.full_losses = {}, {}, {}
    for mb = 1, Mb do self.sx[mb], self.sy[mb] = tg.zeros_like(xs[mb]), tg.zeros_like(ys[mb]) end
    self.captured = tg.graph.capture_step(function() self:full_body() end, { microbatches = Mb })
  end
  for mb = 1, Mb do
    for _, pair in ipairs { { self.sx[mb], xs[mb], "inputs" }, { self.sy[mb], ys[mb], "targets" } } do
      local want, got = tg.shape_str(pair[1]:shape()), tg.shape_str(pair[2]:shape())
      if want ~= got or pair[1].dtype ~= pair[2].dtype then
        fail(string.format("graph = \"full\": microbatch %d's %s are %s %s, the captured step's %s %s", mb, pair[3], got,
          pair[2].dtype, want, pair[1].dtype))
      end
    end
    self.sx[mb]:copy_(xs[mb])
    self.sy[mb]:copy_(ys[mb])
  end
  self.adamw:set_lr(lr)
  self.captured:replay()
  local losses = {}
  for mb = 1, Mb do losses[mb] = self.full_losses[mb] end
  return { loss = losses, host_s = tg.time() - t0 }
end

-- The optimizer step after the reduce (the norm over every stage when pipelined and clipping).
function Trainer:update(lr)
  local norm
  if self.zero1 then
    norm = self.max_norm and self.P > 1 and self:zero1_norm() or nil
    norm = self.zero1:step { lr = lr, norm = norm }
    if self.table_adamw then self.table_adamw:step { lr = lr, norm = norm } end
  elseif self.P > 1 and self.max_norm then
    norm = self:global_norm()
    self.adamw:step { lr = lr, norm = norm }
  else
    self.adamw:step { lr = lr }
  end
  self.last_norm = norm
end

------------------------------------------------------------------------ checkpoints
-- The optimizer whose state a checkpoint holds: zero1 (this rank's shards) or AdamW.
-- zero1 with a split token table: zero1's shards and the table's AdamW, saved and restored as one.
local ZeroAndTable = {}
ZeroAndTable.__index = ZeroAndTable
function ZeroAndTable:state_tensors()
  local out = self.z:state_tensors()
  for _, e in ipairs(self.a:state_tensors()) do out[#out + 1] = e end
  return out
end
function ZeroAndTable:state_values()
  local v = self.z:state_values()
  v.kind, v.table_t, v.table_lr = "zero1 + token table AdamW", self.a:step_count(), self.a.lr
  return v
end
function ZeroAndTable:load_state_values(v)
  self.z:load_state_values(v)
  self.a:load_state_values { t = v.table_t, lr = v.table_lr }
end

function Trainer:optimizer()
  if self.table_adamw then
    self.both = self.both or setmetatable({ z = self.zero1, a = self.table_adamw }, ZeroAndTable)
    return self.both
  end
  return self.zero1 or self.adamw
end

-- The layout a checkpoint must be resumed on: the pipeline's stages and chunk placement (the data-
-- parallel width is the world size, which tegraph.checkpoint checks itself).
function Trainer:layout()
  if self.P == 1 then return "pipeline 1" end
  return string.format("pipeline %d (%s, %d chunks of %d layers)", self.P, self.schedule, self.C,
    #self.model.layers // self.C)
end

-- The checkpoint options of this rank: its parameters (its stage's when pipelined), the model file
-- they go to (model.safetensors, or model.stage<k>.safetensors written by the stage's first replica).
function Trainer:checkpoint_options(o)
  local c = {}
  for k, v in pairs(o or {}) do c[k] = v end
  c.params, c.optimizer, c.comm, c.layout = self.params, self:optimizer(), self.world, self:layout()
  c.fp8_modules = self.model -- delayed scaling's amax histories and scales: a resume continues them exactly
  if self.P > 1 then
    c.model_file = string.format("model.stage%d.safetensors", self.stage)
    c.writes_model = self.dp_rank == 0
  end
  return c
end

-- Saves a training checkpoint into dir (every rank calls it): o = {step=, config=, state=, keep=}
-- as tegraph.checkpoint.save. Returns the checkpoint's path.
function Trainer:save(dir, o)
  return require("tegraph.checkpoint").save(dir, self:checkpoint_options(o))
end

-- Loads a checkpoint written by Trainer:save on the same layout (every rank calls it) into this
-- rank's parameters and optimizer state; refused, with nothing loaded, for another layout.
-- Returns tegraph.checkpoint.load's {step=, state=, config=, path=}.
function Trainer:load(path)
  local c = self:checkpoint_options()
  c.writes_model = nil -- a save's option
  local ok, info = pcall(require("tegraph.checkpoint").load, path, c)
  if not ok then error(info, 0) end
  return info
end

-- The gradient norm over every stage's parameters (the copy of the token table counted once).
function Trainer:global_norm()
  local grads = {}
  for _, p in ipairs(self.params) do
    if not (self.tied_split and p == self.head_table) then grads[#grads + 1] = p.wgrad end
  end
  local dev = self.params[1].data.device
  local s = self.sumsq or tg.zeros({ 1 }, { dtype = "f32", device = dev })
  self.sumsq = s
  tg.ops.sumsq_multi(grads, s)
  self.pp:all_reduce(s, { op = "sum" })
  return math.sqrt(s:totable()[1])
end

-- zero1 on a pipeline: the norm of the whole model's reduced gradient, each stage's sum of squares over its
-- replicas' shards added over the stages, and a split token table's (reduced, summed over the tie) counted once,
-- on the first stage.
function Trainer:zero1_norm()
  local s = self.zero1:grad_sumsq()
  if self.table and self.first_stage then
    self.table_sumsq = self.table_sumsq or tg.zeros({ 1 }, { dtype = "f32", device = s.device })
    tg.ops.sumsq_multi({ self.table.wgrad }, self.table_sumsq)
    s:add_(self.table_sumsq)
  end
  self.pp:all_reduce(s, { op = "sum" })
  return math.sqrt(s:totable()[1])
end

-- The gradient norm of the last step (nil without clipping).
function Trainer:grad_norm()
  if self.last_norm then return self.last_norm end
  if self.adamw then return self.adamw:grad_norm() end
end

-- Every replica's microbatch losses of step result r as numbers, in global microbatch order
-- (replica d's microbatch m is number d * M + m), on every rank: the last stages' values summed
-- into zeros elsewhere, which is exact.
function Trainer:losses(r)
  local Mb, D = self.M, self.D
  local vals = {}
  for g = 1, Mb * D do vals[g] = 0.0 end
  if self.last_stage then
    for m = 1, Mb do vals[self.dp_rank * Mb + m] = r.loss[m]:totable()[1] end
  end
  if self.N == 1 then return vals end
  local t = tg.tensor(vals, { dtype = "f32", device = self.params[1].data.device })
  self.world:all_reduce(t, { op = "sum" })
  return t:totable()
end

-- What the trainer runs, in words.
function Trainer:describe()
  local parts = {}
  if self.plan and self.P > 1 then
    parts[#parts + 1] = string.format("pipeline %d stages (%s, %d chunks of %d layers)", self.P, self.schedule,
      self.C, #self.model.layers // self.C)
  end
  if self.graph then
    parts[#parts + 1] = string.format("graphed (%d graphed callable(s) of %d layer(s) per stage%s, delayed wgrad, capturable AdamW)",
      self.P > 1 and self.C // self.P or self.C, #self.model.layers // self.C, self.tied_split and "" or "")
  end
  if self.full then
    parts[#parts + 1] = "full-iteration capture (the whole step, reduce and capturable AdamW in one graph, replayed from step 2)"
  end
  if self.partial then
    parts[#parts + 1] = string.format("partial capture (%d modules graphed: %s)", #self.partial.modules, self.partial_names)
  end
  if self.D > 1 then parts[#parts + 1] = string.format("data parallel x%d", self.D) end
  if self.hooks then parts[#parts + 1] = "hooks: " .. self.hooks end
  return table.concat(parts, ", ")
end

------------------------------------------------------------------------ trace summary
-- Union length of intervals {a, b} (microseconds).
local function merge(iv)
  table.sort(iv, function(x, y) return x[1] < y[1] end)
  local out = {}
  for _, x in ipairs(iv) do
    local l = out[#out]
    if l and x[1] <= l[2] then
      if x[2] > l[2] then l[2] = x[2] end
    else
      out[#out + 1] = { x[1], x[2] }
    end
  end
  return out
end

local function total(iv)
  local s = 0
  for _, x in ipairs(iv) do s = s + x[2] - x[1] end
  return s
end

local function intersect(a, b)
  local s, i, j = 0, 1, 1
  while i <= #a and j <= #b do
    local lo, hi = math.max(a[i][1], b[j][1]), math.min(a[i][2], b[j][2])
    if hi > lo then s = s + hi - lo end
    if a[i][2] < b[j][2] then i = i + 1 else j = j + 1 end
  end
  return s
end

-- From tg.trace.events() (while the trace runs): how much of the reduce (all-reduce, reduce-scatter,
-- all-gather) and of the p2p transfers (send, recv) the compute hid. Compute: the spans on the compute
-- track and the executor's F/B/W actions. -> {reduce_ms, reduce_hidden_ms, p2p_ms, p2p_hidden_ms,
-- hooks = count, line}
function M.overlap(events)
  local comp, red, p2p, hooks = {}, {}, {}, 0
  for _, e in ipairs(events) do
    if e.ph == "X" then
      local iv = { e.ts, e.ts + e.dur }
      local name = e.name or ""
      if e.cat == "action" then
        if e.op == "F" or e.op == "B" or e.op == "W" or e.op == "B+W" then comp[#comp + 1] = iv
        elseif e.op and (e.op:find("send", 1, true) or e.op:find("recv", 1, true)) then p2p[#p2p + 1] = iv end
      elseif e.track == "compute" then
        comp[#comp + 1] = iv
      elseif e.track == "comm" then
        if name:find("send", 1, true) or name:find("recv", 1, true) then p2p[#p2p + 1] = iv
        else red[#red + 1] = iv end
      end
      if e.cat == "hook" or name:find("^hook") then hooks = hooks + 1 end
    end
  end
  comp, red, p2p = merge(comp), merge(red), merge(p2p)
  local r = { reduce_ms = total(red) * 1e-3, reduce_hidden_ms = intersect(red, comp) * 1e-3,
    p2p_ms = total(p2p) * 1e-3, p2p_hidden_ms = intersect(p2p, comp) * 1e-3, hooks = hooks }
  local function pct(h, t) return t > 0 and 100 * h / t or 0 end
  r.line = string.format("overlap: reduce %.3f ms, %.3f ms hidden by compute (%.0f%%); p2p %.3f ms, %.3f ms hidden " ..
    "(%.0f%%); %d hook dispatches", r.reduce_ms, r.reduce_hidden_ms, pct(r.reduce_hidden_ms, r.reduce_ms), r.p2p_ms,
    r.p2p_hidden_ms, pct(r.p2p_hidden_ms, r.p2p_ms), hooks)
  return r
end

return M
