-- execute.lua — runs plans on real modules through the C executor (tegraph.core.sched): eager or
-- graphed, in one process or one stage per rank over a pipeline communicator (opts.comm); graphed
-- sets captured in the executed order; measured idle from the trace.
-- Needs the C core, loaded on first use (the rest of tegraph.schedule stays plain Lua).
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local plan_ = require "tegraph.schedule.plan"
local simulate = require "tegraph.schedule.simulate"
local validate = require "tegraph.schedule.validate"

local M = {}

local function core()
  return require "tegraph.core"
end

local function chunk_count(plan)
  return plan.stages * (plan.chunks or 1)
end

-- A per-microbatch source: a function(mb, ...) as it is, or a list indexed by mb.
local function per_mb(v, what)
  if v == nil or type(v) == "function" then return v end
  if type(v) == "table" then
    return function(mb)
      local x = v[mb]
      if x == nil then error(string.format("schedule.execute: %s has no entry for microbatch %d", what, mb), 0) end
      return x
    end
  end
  raise("schedule.execute: " .. what .. " must be a function(mb) or a list of tensors")
end

-- The compute actions in the order execute runs them (stages interleaved until each blocks on a
-- recv), fused B followed by W: the replay order of one graphed set holding every chunk.
function M.order(plan)
  plan_.check_plan(plan, "schedule.exec_order")
  plan.owner = plan_.owners(plan)
  return core().sched.order(plan)
end

-- Stage s's compute order for its own graphed set, fused B followed by W.
local function stage_order(plan, s)
  local o = {}
  for _, a in ipairs(plan[s]) do
    if plan_.COMPUTE[a.op] then
      o[#o + 1] = { op = a.op, chunk = a.chunk, mb = a.mb }
      if a.op == "B" and a.w then o[#o + 1] = { op = "W", chunk = a.chunk, mb = a.mb } end
    end
  end
  return o
end

-- make_graphed(plan, chunks, {samples = {input of chunk c...}, per_stage = false, warmup =, pool =,
-- stages = {s...}}) -> list of graphed callables, one per chunk (pass as opts.graphed). By default
-- one graphed set holds every chunk, captured in M.order(plan); per_stage = true captures one set
-- per stage in that stage's own compute order (to_order), the way a process running one stage
-- would (a pool for several per-stage sets is refused: the plan interleaves their replays, which
-- sets sharing a pool cannot do). stages = {s...} (implies per_stage) captures only those stages' sets: a pipeline rank
-- passes its own stage, and chunks and samples need entries only for that stage's chunks.
-- chain = true (one set only): the chunks are consecutive parts of one model, so each hands its
-- output (and takes its output gradient) through a static buffer shared with its neighbour.
local MAKE_GRAPHED_KEYS = { samples = true, sample = true, per_stage = true, warmup = true, pool = true, stages = true,
  chain = true }
local EXECUTE_KEYS = { chunks = true, graphed = true, inputs = true, input = true, loss_grad = true, pid = true,
  sync = true, stages = true, comm = true, step = true, validate = true }

-- Raises unless opts is nil or a table of known keys.
local function check_opts(who, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then raise(string.format("%s: opts must be a table, got %s", who, type(opts))) end
  return options.check(who, opts, known)
end

function M.make_graphed(plan, chunks, opts)
  local tg = core()
  plan_.check_plan(plan, "schedule.make_graphed")
  if type(chunks) ~= "table" then
    raise("schedule.make_graphed: chunks must be a list of modules, one per chunk (got " .. type(chunks) .. ")")
  end
  opts = check_opts("schedule.make_graphed", opts, MAKE_GRAPHED_KEYS)
  local C = chunk_count(plan)
  local samples = opts.samples or opts.sample
  local only
  if opts.stages ~= nil then
    if type(opts.stages) ~= "table" then raise("schedule.make_graphed: opts.stages must be a list of stages") end
    only = {}
    for _, s in ipairs(opts.stages) do only[s] = true end
  end
  local owner0 = plan_.owners(plan)
  for c = 1, C do
    if not only or only[owner0[c]] then
      if type(samples) ~= "table" or samples[c] == nil then
        raise(string.format("schedule.make_graphed: opts.samples must list one sample input per chunk (%d)%s", C,
          only and ", at least for the chunks of opts.stages" or ""))
      end
      if chunks[c] == nil then
        raise(string.format("schedule.make_graphed: no module for chunk %d of %d", c, C))
      end
    end
  end
  if not only and #chunks ~= C then
    raise(string.format("schedule.make_graphed: %d chunks for a plan of %d", #chunks, C))
  end
  -- share = false: transfers between stages hold a chunk's static output or input gradient past the
  -- stage's next microbatch, which a set shared across microbatches would overwrite
  if opts.warmup ~= nil and (math.type(opts.warmup) ~= "integer" or opts.warmup < 1) then
    raise("schedule.make_graphed: warmup must be an integer >= 1, got " .. tostring(opts.warmup))
  end
  local base = { microbatches = plan.microbatches, warmup = opts.warmup, pool = opts.pool, share = false }
  -- chain: the chunks of one set are consecutive parts of one model (all stages in this process)
  local chain = opts.chain and not opts.per_stage and not only or nil
  local function with(o2)
    for k, v in pairs(base) do o2[k] = v end
    return o2
  end
  if not opts.per_stage and not only then
    return tg.graph.make_graphed(chunks, with { sample = samples, order = M.order(plan), chain = chain })
  end
  local owner = plan_.owners(plan)
  local out = {}
  if opts.pool ~= nil then
    -- each stage's set is captured whole, one after another, but the plan interleaves their replays: with one pool,
    -- a later set's captures reuse memory an earlier set still needs between its F and B (silently wrong gradients)
    local nsets, seen = 0, {}
    for c = 1, C do
      local s = owner[c]
      if s and not seen[s] and (not only or only[s]) then seen[s], nsets = true, nsets + 1 end
    end
    if nsets > 1 then
      raise(string.format("schedule.make_graphed: %d per-stage sets cannot share one pool (opts.pool): each is " ..
        "captured whole, one after another, but the plan interleaves their replays, so a later set would reuse memory " ..
        "an earlier one still holds; leave pool out (each set gets its own) or capture one set (per_stage = false)", nsets))
    end
  end
  for s = 1, plan.stages do
    local mine, index = {}, {}
    for c = 1, C do
      if owner[c] == s then
        mine[#mine + 1] = c
        index[c] = #mine
      end
    end
    if #mine > 0 and (not only or only[s]) then
      local order = stage_order(plan, s)
      for _, a in ipairs(order) do a.chunk = index[a.chunk] end
      local ms, ss = {}, {}
      for k, c in ipairs(mine) do ms[k], ss[k] = chunks[c], samples[c] end
      -- reuse = false: a stage's first chunk hands its input gradient to another stage's set, which
      -- reads it after this set's later microbatches may have taken its memory
      local g = tg.graph.make_graphed(ms, with { sample = ss, order = order, reuse = false })
      for k, c in ipairs(mine) do out[c] = g[k] end
    end
  end
  return out
end

-- execute(plan, opts): runs every stage of plan in this process.
--   chunks    = {module per chunk, in model order}        (required unless every chunk is graphed)
--   graphed   = {graphed callable per chunk}               (from make_graphed; nil: eager)
--   inputs    = function(mb) -> chunk 1's input, or a list of tensors
--   loss_grad = function(mb, y) -> d(loss)/dy of the last chunk's output y, or a list of tensors
--               (returning nil runs the last chunk's backward with dy = nil: a loss chunk)
--   pid       = the trace process of this run's spans (default: the rank). While a trace runs
--               (tg.trace.start()), every action is a span on its stage's track ("stage s"), with
--               the hook dispatches inside it, and each in-process transfer an async span
--   sync      = true: synchronise the device after each compute action (device time in the trace)
--   stages    = {stage numbers this process runs} (default all; with comm: its own stage)
--   comm      = a pipeline communicator (tg.comm.split{pp = P}.pp, or the world when every rank
--               is a stage): stage s runs on its rank s-1, this process runs stage rank+1 only,
--               and send/recv actions go to the peer stage's rank through it (MPI for CPU
--               tensors, NCCL for CUDA ones; blocking, within the comm timeout). Collective: the
--               ranks check first that they all run the same plan. chunks (and graphed) need
--               entries only for this stage's chunks; inputs only on the stage of chunk 1 and
--               loss_grad only on the stage of the last chunk.
--   step      = false: do not open a step (default: open and close one when none is open; closing
--               it runs the hook check)
--   validate  = accepted for compatibility: the whole plan is always validated first (structure, order,
--               completeness, deadlock; on ranks with blocking sends, on every rank), naming the action.
--               A failed run drops the chunks' saved state and closes the step it opened.
-- Plans execute has validated, with what they were then (weak keys: a plan can change between runs).
local validated = setmetatable({}, { __mode = "k" })
local function v(x) return (math.type(x) or type(x)) .. ":" .. tostring(x) end
local function signature(plan, sends, need)
  local parts = { sends, need, v(plan.stages), v(plan.chunks), v(plan.microbatches) }
  local keys = {}
  for k in pairs(plan) do
    if math.type(k) == "integer" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local list = plan[k]
    parts[#parts + 1] = "|" .. k
    if type(list) == "table" then
      for _, a in ipairs(list) do
        parts[#parts + 1] = type(a) == "table" and string.format("%s,%s,%s,%s,%s", v(a.op), v(a.chunk), v(a.mb),
          v(a.peer), v(a.w)) or v(a)
      end
    end
  end
  return table.concat(parts, ";")
end

function M.execute(plan, opts)
  local tg = core()
  plan_.check_plan(plan, "schedule.execute")
  if type(opts) == "table" and opts.trace ~= nil then
    raise("schedule.execute: there is no opts.trace: a run records its actions into the running trace " ..
      "(tg.trace.start() ... tg.trace.stop(path))")
  end
  opts = check_opts("schedule.execute", opts, EXECUTE_KEYS)
  -- Always the whole plan first (structure, order, completeness, deadlock), so a plan missing an action
  -- never half runs. On ranks every rank holds the whole plan and checks it with blocking sends, so all
  -- refuse the same plan at once, naming the action, instead of stalling until the communicator's timeout.
  -- A chunk's W may be left out only when the plan has no W for it at all (it delays no wgrad); whether it
  -- does is known from the plan alone, so every rank decides the same. In one process, a chunk known to
  -- delay its wgrad needs its W too.
  local has_w = {}
  for s = 1, type(plan.stages) == "number" and plan.stages or 0 do
    for _, a in ipairs(type(plan[s]) == "table" and plan[s] or {}) do
      if type(a) == "table" and (a.op == "W" or (a.op == "B" and a.w == true)) then has_w[a.chunk] = true end
    end
  end
  local function delays(c)
    if opts.comm then return false end
    local g = opts.graphed and opts.graphed[c]
    if g then
      local ok, w = pcall(function() return g:has_w() end)
      return ok and w
    end
    local m = opts.chunks and opts.chunks[c]
    local ok, d = pcall(function() return m.delay_wgrad end)
    return ok and d == true
  end
  local need = {}
  for c = 1, math.type(plan.stages) == "integer" and chunk_count(plan) or 0 do
    need[c] = (has_w[c] or delays(c)) and "w" or "-"
  end
  -- a plan run step after step is validated once: the cache holds what it was validated as
  local key = signature(plan, opts.comm and "blocking" or "buffered", table.concat(need))
  if validated[plan] ~= key then
    local vok, verr = validate(plan, { sends = opts.comm and "blocking" or "buffered",
      need_w = function(c) return need[c] == "w" end })
    if not vok then raise("schedule.execute: " .. verr) end
    validated[plan] = key
  end
  -- Several graphed sets run in one process (one per stage, each captured in its own stage's order): a stage's
  -- input gradient goes to another set, which reads it after this set's later microbatches replayed, so a set that
  -- reuses static buffers across microbatches or shares one microbatch's graphs would hand over overwritten values
  -- (silently wrong gradients). schedule.make_graphed{per_stage = true} makes them with reuse = false, share = false.
  if opts.graphed and not opts.comm then
    local sets, nsets, bad = {}, 0, nil
    for c = 1, math.type(plan.stages) == "integer" and chunk_count(plan) or 0 do
      local g = opts.graphed[c]
      local ok, id = pcall(function() return g:set_id() end)
      if ok then
        if not sets[id] then sets[id], nsets = true, nsets + 1 end
        local rok, r = pcall(function() return g:reused() or g:shared() end)
        if rok and r and not bad then bad = c end
      end
    end
    if nsets > 1 and bad then
      raise(string.format("schedule.execute: %d graphed sets in one process, and chunk %d's reuses static buffers " ..
        "or shares graphs across microbatches: a stage's input gradient read by another set later would be " ..
        "overwritten; make each set with reuse = false, share = false (schedule.make_graphed{per_stage = true} does)",
        nsets, bad))
    end
  end
  plan.owner = plan_.owners(plan)
  local run_opts = {
    chunks = opts.chunks, graphed = opts.graphed, sync = opts.sync, pid = opts.pid,
    stages = opts.stages, comm = opts.comm,
    input = per_mb(opts.inputs or opts.input, "inputs"),
    loss_grad = per_mb(opts.loss_grad, "loss_grad"),
  }
  local own_step = opts.step ~= false and not tg.step_open()
  if own_step then tg.step_begin { microbatches = plan.microbatches } end
  local ok, err = pcall(tg.sched.run, plan, run_opts)
  if ok and own_step then ok, err = pcall(tg.step_end) end
  if not ok then
    -- A failed run leaves no saved state and no step open: what the run saved or queued (contexts, delayed
    -- wgrads) would make the next execute fail or run inside a stale step; graphed sets start their order again.
    for c = 1, chunk_count(plan) do
      local m, g = opts.chunks and opts.chunks[c], opts.graphed and opts.graphed[c]
      if m ~= nil then pcall(function() m:drop_saved() end) end
      if g ~= nil then pcall(function() g:reset() end) end
    end
    if own_step and tg.step_open() then pcall(tg.step_end) end -- the run's error is the one to report
    raise(err)
  end
end

-- measure(plan, events [, {pid = 0}]) -> {cost = function(action, stage), busy[s], simulated, unit,
-- relative}: per-action host durations in seconds from the action spans of process pid in events
-- (tg.trace.events(); averaged over every run they hold), each stage's busy time (sum of its compute actions), unit = the mean F duration and
-- relative(action, stage) = cost / unit (for svg), and simulate(plan, measured costs): what the schedule's
-- makespan and per-stage idle time are when the stages run concurrently with those costs.
-- On one device the stages take turns, so wall-clock gaps in the trace are not pipeline bubbles;
-- replaying measured costs through the simulator is how "measured" idle time is obtained.
function M.measure(plan, events, opts)
  plan_.check_plan(plan, "schedule.measure")
  opts = check_opts("schedule.measure", opts, { pid = true })
  if opts.pid ~= nil and math.type(opts.pid) ~= "integer" then
    raise("schedule.measure: opts.pid must be an integer, got " .. tostring(opts.pid))
  end
  if type(events) ~= "table" then
    raise("schedule.measure: events must be the list tg.trace.events() returns (got " .. type(events) .. ")")
  end
  local pid = opts.pid or 0
  local sum, count = {}, {}
  for _, e in ipairs(events) do
    if e.cat == "action" and e.ph == "X" and e.pid == pid then
      local op = e.op == "B+W" and "B" or e.op
      local k = e.stage .. ":" .. op .. ":" .. e.chunk .. ":" .. e.mb
      sum[k] = (sum[k] or 0) + e.dur
      count[k] = (count[k] or 0) + 1
    end
  end
  local function cost(a, s)
    local k = s .. ":" .. a.op .. ":" .. a.chunk .. ":" .. a.mb
    if not sum[k] then
      error(string.format("schedule.measure: the trace has no %s on stage %d", plan_.describe(a), s), 0)
    end
    return sum[k] / count[k] * 1e-6 -- seconds
  end
  local busy = {}
  for s = 1, plan.stages do
    busy[s] = 0
    for _, a in ipairs(plan[s]) do
      if plan_.COMPUTE[a.op] then busy[s] = busy[s] + cost(a, s) end
    end
  end
  -- The same costs in units of the mean F (for svg(), whose scale expects costs near 1).
  local fsum, fn = 0, 0
  for s = 1, plan.stages do
    for _, a in ipairs(plan[s]) do
      if a.op == "F" then fsum, fn = fsum + cost(a, s), fn + 1 end
    end
  end
  local unit = fn > 0 and fsum / fn or 1
  if not (unit > 0) then unit = 1 end
  local function relative(a, s) return cost(a, s) / unit end
  return { cost = cost, busy = busy, simulated = simulate(plan, cost), unit = unit, relative = relative }
end

return M
