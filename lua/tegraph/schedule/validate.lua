-- validate.lua — checks a plan before anything runs it: well-formed actions, F before B before W
-- per (chunk, microbatch), each chunk's W in its B order (the wgrad store is a FIFO), inputs and
-- gradients present (locally or received), sends matched by receives, every (chunk, mb) complete,
-- and no deadlock (by running the lists against each other).
local plan_ = require "tegraph.schedule.plan"
local engine = require "tegraph.schedule.engine"

local fmt = string.format

local function is_int_in(v, lo, hi)
  return math.type(v) == "integer" and v >= lo and v <= hi
end

-- The shape of the plan itself; returns an error message or nil.
local function check_header(plan)
  if type(plan) ~= "table" then return "plan must be a table" end
  if not is_int_in(plan.stages, 1, math.maxinteger) then return "plan.stages must be a positive integer" end
  if not is_int_in(plan.chunks or 1, 1, math.maxinteger) then return "plan.chunks must be a positive integer" end
  if not is_int_in(plan.microbatches, 1, math.maxinteger) then return "plan.microbatches must be a positive integer" end
  for s = 1, plan.stages do
    if type(plan[s]) ~= "table" then return fmt("plan[%d] (stage %d's actions) must be a table", s, s) end
  end
  -- a list past the last stage would never run (an executor would skip it, or fail without naming it)
  for k in pairs(plan) do
    if math.type(k) == "integer" and (k < 1 or k > plan.stages) then
      return fmt("plan[%d] is not a stage: the plan has %d stage%s", k, plan.stages, plan.stages == 1 and "" or "s")
    end
  end
end

-- Fields of one action; returns an error message or nil.
local function check_fields(a, s, P, C, Mb)
  if type(a) ~= "table" then return "not a table" end
  if not (plan_.COMPUTE[a.op] or plan_.COMM[a.op]) then return fmt("unknown op %s", tostring(a.op)) end
  if not is_int_in(a.chunk, 1, C) then return fmt("chunk must be an integer in 1..%d", C) end
  if not is_int_in(a.mb, 1, Mb) then return fmt("mb must be an integer in 1..%d", Mb) end
  if plan_.COMM[a.op] then
    if not is_int_in(a.peer, 1, P) then return fmt("peer must be a stage in 1..%d", P) end
    if a.peer == s then return "peer is the stage itself" end
  elseif a.w ~= nil and type(a.w) ~= "boolean" then
    return fmt("w must be true or false, got %s %s", type(a.w), tostring(a.w))
  elseif a.w and a.op ~= "B" then
    return "w = true is only for B"
  end
end

-- validate(plan [, {sends = "blocking"|"buffered"}]) -> true, or nil, message, {stage, index}.
-- The message names the first offending action: "stage 2 action 5 (W chunk 2 mb 1): W before B",
-- "stage 1 action 7 (W chunk 1 mb 2): W of chunk 1 must follow its B order; the wgrad store's
-- head is mb 1".
-- Deadlock is checked with blocking sends (a send waits for its receive) unless sends = "buffered".
-- need_w = function(c) -> boolean (the executor's): whether chunk c needs a W for every microbatch
-- (default: every chunk does; an executor lets chunks that delay no wgrad leave their W out).
return function(plan, opts)
  local herr = check_header(plan)
  if herr then return nil, herr, {} end
  local blocking = not (opts and opts.sends == "buffered")
  local P, Mb = plan.stages, plan.microbatches
  local C = P * (plan.chunks or 1)
  local owner = plan_.owners(plan)

  -- Every transfer's endpoints, to match sends with receives.
  local ends = {}
  for s = 1, P do
    for _, a in ipairs(plan[s]) do
      if type(a) == "table" and plan_.COMM[a.op] and a.peer and a.chunk and a.mb then
        local k = engine.xfer_key(a, s)
        local e = ends[k] or { send = 0, recv = 0 }
        local side = a.op:sub(1, 4)
        e[side] = e[side] + 1
        ends[k] = e
      end
    end
  end

  local done = {} -- "s:op:c:m" -> true once that action ran on stage s
  local fused = {} -- "c:m" -> true when its B carried w = true
  local store = {} -- chunk -> {mb...}: its delayed wgrads in B order (the engine's FIFO)
  -- The W of (c, m), plain or fused, takes the head of c's store; an error message otherwise.
  local function pop_w(c, m, what)
    local q = store[c]
    if q[1] ~= m then
      return fmt("%s of chunk %d must follow its B order; the wgrad store's head is mb %d", what, c, q[1])
    end
    table.remove(q, 1)
  end
  local function did(s, op, c, m) return done[s .. ":" .. op .. ":" .. c .. ":" .. m] end

  for s = 1, P do
    for i, a in ipairs(plan[s]) do
      local function fail(msg)
        local where = type(a) == "table" and plan_.where(plan, s, i) or fmt("stage %d action %d", s, i)
        return nil, where .. ": " .. msg, { stage = s, index = i }
      end
      local ferr = check_fields(a, s, P, C, Mb)
      if ferr then return fail(ferr) end
      local op, c, m = a.op, a.chunk, a.mb
      if plan_.COMPUTE[op] and owner[c] ~= s then
        return fail(fmt("chunk %d belongs to stage %s", c, tostring(owner[c])))
      end
      if op == "W" and fused[c .. ":" .. m] then return fail("W after a fused B+W") end
      if did(s, op, c, m) then return fail(fmt("duplicate %s", op)) end

      if op == "F" then
        if c > 1 then
          if owner[c - 1] == s then
            if not did(s, "F", c - 1, m) then return fail(fmt("F before its input (F chunk %d mb %d)", c - 1, m)) end
          elseif not did(s, "recv_fwd", c - 1, m) then
            return fail(fmt("F before its input is received (recv_fwd chunk %d mb %d)", c - 1, m))
          end
        end
      elseif op == "B" then
        if not did(s, "F", c, m) then return fail("B before F") end
        if c < C then
          if owner[c + 1] == s then
            if not did(s, "B", c + 1, m) then
              return fail(fmt("B before its output gradient (B chunk %d mb %d)", c + 1, m))
            end
          elseif not did(s, "recv_bwd", c + 1, m) then
            return fail(fmt("B before its output gradient is received (recv_bwd chunk %d mb %d)", c + 1, m))
          end
        end
        store[c] = store[c] or {}
        table.insert(store[c], m)
        if a.w then
          local werr = pop_w(c, m, "the fused W")
          if werr then return fail(werr) end
          done[s .. ":W:" .. c .. ":" .. m] = true
          fused[c .. ":" .. m] = true
        end
      elseif op == "W" then
        if not did(s, "B", c, m) then return fail("W before B") end
        local werr = pop_w(c, m, "W")
        if werr then return fail(werr) end
      else
        local sending = op:sub(1, 4) == "send"
        local fwd = op:sub(6) == "fwd"
        local producer = owner[c]
        local consumer = owner[fwd and c + 1 or c - 1]
        if fwd and c == C then return fail("the last chunk has no forward output to transfer") end
        if not fwd and c == 1 then return fail("chunk 1 has no input gradient to transfer") end
        if sending then
          if producer ~= s then return fail(fmt("chunk %d is not computed on this stage", c)) end
          if consumer ~= a.peer then
            return fail(fmt("wrong peer: chunk %d lives on stage %s", fwd and c + 1 or c - 1, tostring(consumer)))
          end
          if not did(s, fwd and "F" or "B", c, m) then return fail(fmt("sent before its %s", fwd and "F" or "B")) end
        else
          if consumer ~= s then
            return fail(fmt("chunk %d, which consumes it, is not on this stage", fwd and c + 1 or c - 1))
          end
          if producer ~= a.peer then return fail(fmt("wrong peer: chunk %d lives on stage %s", c, tostring(producer))) end
        end
        local e = ends[engine.xfer_key(a, s)]
        if sending and e.recv == 0 then
          return fail(fmt("no matching recv_%s on stage %d", op:sub(6), a.peer))
        elseif not sending and e.send == 0 then
          return fail(fmt("no matching send_%s on stage %d", op:sub(6), a.peer))
        end
      end
      done[s .. ":" .. op .. ":" .. c .. ":" .. m] = true
    end
  end

  -- Every (chunk, mb) forward, backward and weight gradient exactly once.
  for c = 1, C do
    local s = owner[c]
    if not s then return nil, fmt("chunk %d is never computed", c), {} end
    for m = 1, Mb do
      for _, op in ipairs({ "F", "B", "W" }) do
        if not did(s, op, c, m) and (op ~= "W" or not (opts and opts.need_w) or opts.need_w(c)) then
          return nil, fmt("stage %d: chunk %d mb %d has no %s", s, c, m, op), { stage = s }
        end
      end
    end
  end

  local ok, ds, di, msg = engine.run(plan, function() return 1 end, blocking)
  if not ok then
    return nil, plan_.where(plan, ds, di) .. ": " .. msg, { stage = ds, index = di }
  end
  return true
end
