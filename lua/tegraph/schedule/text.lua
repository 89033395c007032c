-- text.lua — plans as text and as replay orders: to_order(plan, stage) and table(plan).
local raise = require "tegraph.raise"
local plan_ = require "tegraph.schedule.plan"

local M = {}

-- The compute actions of stage s in order, as {op, chunk, mb [, w = true]}: the order in which a
-- stage's forward/backward/weight-gradient callables are captured and replayed.
function M.to_order(plan, s)
  if type(plan) ~= "table" or type(plan[s]) ~= "table" then
    raise(string.format("schedule.to_order: plan has no stage %s", tostring(s)))
  end
  local order = {}
  for _, a in ipairs(plan[s]) do
    if plan_.COMPUTE[a.op] then order[#order + 1] = { op = a.op, chunk = a.chunk, mb = a.mb, w = a.w } end
  end
  return order
end

-- "F3" (op and microbatch); with several chunks per stage the chunk follows: "F3c5".
local function token(a, many)
  return a.op .. a.mb .. (many and ("c" .. a.chunk) or "")
end

local COMM_TAG = { send_fwd = ">f", recv_fwd = "<f", send_bwd = ">b", recv_bwd = "<b" }

-- A text table: a header line, then one line per stage listing its compute actions in order.
-- opts.comm = true also lists transfers, as ">f1c2@3" (send_fwd of mb 1, chunk 2, to stage 3) and
-- "<b1c2@3" (recv_bwd from stage 3).
function M.table(plan, opts)
  plan_.check_plan(plan, "schedule.table")
  if opts ~= nil and type(opts) ~= "table" then
    raise("schedule.table: opts must be a table {comm =}, got " .. type(opts))
  end
  local comm = opts and opts.comm
  local many = (plan.chunks or 1) > 1
  local fused = false
  local rows, width = {}, 0
  for s = 1, plan.stages do
    local toks = {}
    for _, a in ipairs(plan[s]) do
      if plan_.COMPUTE[a.op] then
        toks[#toks + 1] = token(a, many)
        if a.w then fused = true end
      elseif comm then
        toks[#toks + 1] = COMM_TAG[a.op] .. a.mb .. "c" .. a.chunk .. "@" .. a.peer
      end
    end
    for _, t in ipairs(toks) do
      if #t > width then width = #t end
    end
    rows[s] = toks
  end
  local lines = { string.format("%s: %d stages, %d chunk%s per stage, %d microbatches%s",
    plan.kind or "plan", plan.stages, plan.chunks or 1, (plan.chunks or 1) > 1 and "s" or "",
    plan.microbatches, fused and " (B includes W)" or "") }
  local label = "stage " .. plan.stages
  for s = 1, plan.stages do
    local cells = {}
    for k, t in ipairs(rows[s]) do cells[k] = t .. string.rep(" ", width - #t) end
    local name = "stage " .. s
    lines[#lines + 1] = name .. string.rep(" ", #label - #name) .. " | " .. table.concat(cells, " "):gsub("%s+$", "")
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
