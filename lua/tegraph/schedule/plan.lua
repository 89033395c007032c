-- plan.lua — the vocabulary every schedule shares: plan and action shapes, chunk ownership,
-- action descriptions, per-op costs, and the insertion of send/recv pairs into compute orders.
--
-- A plan is {stages = P, chunks = V, microbatches = M, kind = name, owner = {[c] = stage},
-- [s] = ordered actions of stage s}. Chunks are global model chunks 1..P*V in model order
-- (chunk c feeds chunk c+1; the last chunk computes the loss). An action is
--   {op = "F"|"B"|"W", chunk = c, mb = m [, w = true]}      (compute; w: B does W's work too)
--   {op = "send_fwd"|"recv_fwd"|"send_bwd"|"recv_bwd", chunk = c, mb = m, peer = stage}
-- A transfer is named by the chunk that *produced* the tensor on both ends: send_fwd/recv_fwd
-- chunk c carry chunk c's output (chunk c+1's input); send_bwd/recv_bwd chunk c carry the
-- gradient of chunk c's input (chunk c-1's output gradient).
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local M = {}

M.COMPUTE = { F = true, B = true, W = true }
M.COMM = { send_fwd = true, recv_fwd = true, send_bwd = true, recv_bwd = true }

-- "F chunk 2 mb 1", "B+W chunk 1 mb 3", "send_fwd chunk 1 mb 1 to stage 2".
function M.describe(a)
  if type(a) ~= "table" then raise("schedule.describe: an action must be a table, got " .. type(a)) end
  if M.COMM[a.op] then
    local dir = a.op:sub(1, 4) == "send" and "to" or "from"
    return string.format("%s chunk %s mb %s %s stage %s", a.op, tostring(a.chunk), tostring(a.mb),
      dir, tostring(a.peer))
  end
  local op = (a.op == "B" and a.w) and "B+W" or tostring(a.op)
  return string.format("%s chunk %s mb %s", op, tostring(a.chunk), tostring(a.mb))
end

-- "stage 2 action 5 (W chunk 2 mb 1)"
function M.where(plan, s, i)
  return string.format("stage %d action %d (%s)", s, i, M.describe(plan[s][i]))
end

-- An empty plan with its chunk placement; generators fill plan[s].
function M.new(kind, P, V, Mb, owner)
  local plan = { kind = kind, stages = P, chunks = V, microbatches = Mb, owner = owner }
  for s = 1, P do plan[s] = {} end
  return plan
end

-- Bounds on a generated plan's sizes (the `tegraph schedule` command line has the same): a plan
-- past them would take minutes and gigabytes to build, simulate or validate.
M.MAX = { stages = 1024, microbatches = 65536, chunks = 64 }
M.MAX_COMPUTES = 65536 -- stages x max(chunks, 2) x microbatches (each has an F, a B and a W): about 10 s

-- Raises a misuse error unless v is an integer >= lo (and <= M.MAX[name] when there is one).
function M.check_int(v, name, lo)
  if type(v) ~= "number" or not math.tointeger(v) then
    raise(string.format("schedule: %s must be an integer, got %s", name,
      type(v) == "number" and tostring(v) or v == nil and "nothing" or type(v) .. " " .. tostring(v)))
  end
  v = math.tointeger(v)
  if v < lo then raise(string.format("schedule: %s must be >= %d, got %d", name, lo, v)) end
  local max = M.MAX[name == "chunks_per_stage" and "chunks" or name]
  if max and v > max then raise(string.format("schedule: %s %d is too large (at most %d)", name, v, max)) end
  return v
end

-- Raises unless P stages x max(V, 2) chunks x Mb microbatches is within M.MAX_COMPUTES.
function M.check_size(P, V, Mb, kind)
  local n = P * math.max(V, 2) * Mb
  if n > M.MAX_COMPUTES then
    raise(string.format("schedule.%s: %d stages x %d chunks x %d microbatches is too large (at most %d " ..
      "microbatch-chunks)", kind, P, math.max(V, 2), Mb, M.MAX_COMPUTES))
  end
end

-- Reads {stages, microbatches} from a generator's argument table, refusing keys the generator does not
-- know. fixed: the generator's chunks per stage (chunks_per_stage / chunks may be given only as that), or
-- nil for a generator whose count is chunks_per_stage (or chunks, default 2, at least 2). Returns P, Mb, V;
-- the sizes are bounded (M.MAX, M.MAX_COMPUTES).
function M.args(t, kind, fixed)
  if type(t) ~= "table" then raise("schedule." .. kind .. ": expects a table {stages=, microbatches=}") end
  options.check("schedule." .. kind, t, { "stages", "microbatches", "chunks_per_stage", "chunks", "costs" })
  if t.chunks_per_stage ~= nil and t.chunks ~= nil then
    raise("schedule." .. kind .. ": give chunks_per_stage or chunks, not both")
  end
  local P = M.check_int(t.stages, "stages", 1)
  local Mb = M.check_int(t.microbatches, "microbatches", 1)
  local V
  if fixed then
    local v = t.chunks_per_stage or t.chunks
    if v ~= nil and v ~= fixed then
      raise(string.format("schedule.%s: has %d chunk%s per stage; chunks_per_stage = %s does not apply", kind, fixed,
        fixed == 1 and "" or "s", tostring(v)))
    end
    V = fixed
  else
    V = M.check_int(t.chunks_per_stage or t.chunks or 2, "chunks_per_stage", 2)
  end
  M.check_size(P, V, Mb, kind)
  return P, Mb, V
end

-- Raises unless plan looks like a plan (a table with integer stages, chunks and microbatches and a list of
-- actions per stage): the public functions taking a plan check it before reading it.
function M.check_plan(plan, who)
  if type(plan) ~= "table" then
    raise(string.format("%s: plan must be a table (a schedule generator's result), got %s", who, type(plan)))
  end
  for _, k in ipairs { "stages", "chunks", "microbatches" } do
    local v = plan[k]
    if k == "chunks" and v == nil then v = 1 end
    if math.type(v) ~= "integer" or v < 1 then
      raise(string.format("%s: plan.%s must be a positive integer, got %s", who, k, tostring(plan[k])))
    end
  end
  for s = 1, plan.stages do
    if type(plan[s]) ~= "table" then
      raise(string.format("%s: plan[%d] (stage %d's actions) must be a table", who, s, s))
    end
  end
end

-- The cost of one action under costs = {F=, B=, W=, comm=} (numbers, default 1,1,1,0) or a
-- function(action, stage) -> number. A fused B (w=true) costs B + W.
function M.cost_fn(costs)
  if type(costs) == "function" then return costs end
  costs = costs or {}
  if type(costs) ~= "table" then raise("schedule: costs must be a table {F=, B=, W=, comm=} or a function") end
  local F, B, W, comm = costs.F or 1, costs.B or 1, costs.W or 1, costs.comm or 0
  for k, v in pairs { F = F, B = B, W = W, comm = comm } do
    if type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
      raise(string.format("schedule: cost %s must be a finite number >= 0 (got %s)", k, tostring(v)))
    end
  end
  return function(a)
    if a.op == "F" then return F
    elseif a.op == "B" then return a.w and (B + W) or B
    elseif a.op == "W" then return W
    else return comm end
  end
end

-- Start/finish times of the compute actions of a plan that has no transfers yet, with transfers
-- taken as instant: times[s][i] = {start, finish}. Raises when the orders cannot make progress.
function M.timeline(plan, cost)
  local P, C = plan.stages, plan.stages * plan.chunks
  local finish = {} -- "F:c:m" -> finish time of that compute
  local pc, clock, times = {}, {}, {}
  for s = 1, P do pc[s], clock[s], times[s] = 1, 0, {} end
  -- A worklist: a stage runs until a dependency is missing, then waits for that compute's finish
  -- (which wakes it), so the whole timeline is O(actions + stages).
  local queue, head, waiting = {}, 1, {} -- waiting: dependency key -> stages waiting for it
  for s = 1, P do queue[s] = s end
  local function done(key, t)
    finish[key] = t
    local w = waiting[key]
    if w then
      waiting[key] = nil
      for _, q in ipairs(w) do queue[#queue + 1] = q end
    end
  end
  while head <= #queue do
    local s = queue[head]
    head = head + 1
    while pc[s] <= #plan[s] do
      local a = plan[s][pc[s]]
      local c, m, need = a.chunk, a.mb, {}
      if a.op == "F" then
        if c > 1 then need[1] = "F:" .. (c - 1) .. ":" .. m end
      elseif a.op == "B" then
        need[1] = "F:" .. c .. ":" .. m
        if c < C then need[2] = "B:" .. (c + 1) .. ":" .. m end
      else
        need[1] = "B:" .. c .. ":" .. m
      end
      local t0 = clock[s]
      local missing
      for _, key in ipairs(need) do
        local t = finish[key]
        if t == nil then missing = key break end
        if t > t0 then t0 = t end
      end
      if missing then
        local w = waiting[missing] or {}
        w[#w + 1] = s
        waiting[missing] = w
        break
      end
      local d = cost(a, s)
      times[s][pc[s]] = { t0, t0 + d }
      clock[s] = t0 + d
      pc[s] = pc[s] + 1
      done(a.op .. ":" .. c .. ":" .. m, t0 + d)
      if a.op == "B" and a.w then done("W:" .. c .. ":" .. m, t0 + d) end
    end
  end
  for s = 1, P do
    if pc[s] <= #plan[s] then
      raise(string.format("schedule.%s: compute order stalls at %s", plan.kind, M.where(plan, s, pc[s])))
    end
  end
  return times
end

-- Inserts the send/recv pairs a compute-only plan needs, in place, and returns the plan
-- (setting plan.owner from the computes when it is missing).
-- Every transfer is placed, on both stages, at the time its producer finishes in a timeline
-- with positive costs, and each stage's actions are sorted by one global (time, transfers
-- before computes, id) order. Executing all stages in that global order never waits, so the
-- result is deadlock-free even when sends block until the matching receive (rendezvous).
function M.add_comm(plan, costs)
  M.check_plan(plan, "schedule.add_comm")
  plan.chunks = plan.chunks or 1
  plan.owner = M.owners(plan)
  local cost = M.cost_fn(costs)
  local P, C, owner = plan.stages, plan.stages * plan.chunks, plan.owner
  local times = M.timeline(plan, function(a, s)
    local d = cost(a, s)
    if not (d > 0) then raise("schedule.add_comm: costs must be positive") end
    return d
  end)
  local xfers = {}
  for s = 1, P do
    for i, a in ipairs(plan[s]) do
      local t = times[s][i][2]
      if a.op == "F" and a.chunk < C and owner[a.chunk + 1] ~= s then
        xfers[#xfers + 1] = { t = t, s = s, i = i, dir = "fwd", chunk = a.chunk, mb = a.mb, to = owner[a.chunk + 1] }
      elseif a.op == "B" and a.chunk > 1 and owner[a.chunk - 1] ~= s then
        xfers[#xfers + 1] = { t = t, s = s, i = i, dir = "bwd", chunk = a.chunk, mb = a.mb, to = owner[a.chunk - 1] }
      end
    end
  end
  table.sort(xfers, function(x, y)
    if x.t ~= y.t then return x.t < y.t end
    if x.s ~= y.s then return x.s < y.s end
    return x.i < y.i
  end)
  local items = {}
  for s = 1, P do
    items[s] = {}
    for i, a in ipairs(plan[s]) do
      items[s][#items[s] + 1] = { t = times[s][i][1], class = 1, id = i, a = a }
    end
  end
  for id, x in ipairs(xfers) do
    items[x.s][#items[x.s] + 1] = { t = x.t, class = 0, id = id,
      a = { op = "send_" .. x.dir, chunk = x.chunk, mb = x.mb, peer = x.to } }
    items[x.to][#items[x.to] + 1] = { t = x.t, class = 0, id = id,
      a = { op = "recv_" .. x.dir, chunk = x.chunk, mb = x.mb, peer = x.s } }
  end
  for s = 1, P do
    table.sort(items[s], function(x, y)
      if x.t ~= y.t then return x.t < y.t end
      if x.class ~= y.class then return x.class < y.class end
      return x.id < y.id
    end)
    local list = {}
    for k, it in ipairs(items[s]) do list[k] = it.a end
    plan[s] = list
  end
  return plan
end

-- Which stage computes each chunk: plan.owner when given, else the first stage that computes it.
function M.owners(plan)
  if plan.owner then return plan.owner end
  local owner = {}
  for s = 1, plan.stages do
    for _, a in ipairs(plan[s]) do
      if type(a) == "table" and M.COMPUTE[a.op] and math.type(a.chunk) == "integer" and not owner[a.chunk] then
        owner[a.chunk] = s
      end
    end
  end
  return owner
end

-- Appends a compute action to stage s.
function M.push(plan, s, op, chunk, mb, w)
  local list = plan[s]
  list[#list + 1] = { op = op, chunk = chunk, mb = mb, w = w or nil }
end

return M
