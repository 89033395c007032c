-- cli.lua — `tegraph schedule NAME --stages P --microbatches M [--chunks V] [--svg FILE]`:
-- prints the plan as a table and its simulated bubble. Returns an exit status; never exits.

local USAGE = [[
usage: tegraph schedule NAME --stages P --microbatches M [options]
  NAME                 gpipe, 1f1b, interleaved, zb_h1, zb_v, or all (a bubble table of every one)
  -p, --stages P       pipeline stages
  -m, --microbatches M microbatches per step
  -v, --chunks V       chunks per stage (interleaved; default 2; zb_v has 2, the others 1)
  --svg FILE           also draw the simulated timeline to FILE
  --costs F=1,B=1,W=1,comm=0
                       per-op costs for the simulation (a fused B costs B+W), finite and >= 0
  --comm               list the send/recv actions in the table too
Bounds: P <= 1024, M <= 65536, V <= 64, P x max(V, 2) x M <= 65536.
]]

-- Bounds on the command line's sizes: the table and the simulation stay within seconds and memory.
-- (the generators' own bounds, tegraph.schedule.plan's MAX and MAX_COMPUTES)
local plan_ = require "tegraph.schedule.plan"
local MAX = plan_.MAX
local MAX_COMPUTES = plan_.MAX_COMPUTES

local function parse_costs(s)
  local costs = {}
  for entry in s:gmatch("[^,]+") do
    local k, v = entry:match("^%s*([%a_]+)=(.-)%s*$")
    local n = v and tonumber(v)
    if not k or not n or not ({ F = 1, B = 1, W = 1, comm = 1 })[k] then return nil, "bad --costs entry " .. entry end
    if n ~= n or n < 0 or n == math.huge then
      return nil, "--costs " .. entry .. ": a cost must be a finite number >= 0"
    end
    if costs[k] then return nil, "--costs gives " .. k .. " twice (" .. s .. ")" end
    costs[k] = n
  end
  return costs
end

local function parse(args)
  local o = {}
  local i = 1
  local function value(name)
    i = i + 1
    if args[i] == nil then return nil, name .. " needs a value" end
    return args[i]
  end
  while args[i] ~= nil do
    local a = args[i]
    local key, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    if key then a = key end
    local function val(name)
      if inline then return inline end
      return value(name)
    end
    local err
    if a == "-p" or a == "--stages" then o.stages, err = val(a)
    elseif a == "-m" or a == "--microbatches" then o.microbatches, err = val(a)
    elseif a == "-v" or a == "--chunks" then o.chunks, err = val(a)
    elseif a == "--svg" then o.svg, err = val(a)
    elseif a == "--costs" then o.costs, err = val(a)
    elseif a == "--comm" then o.comm = true
    elseif a == "-h" or a == "--help" then o.help = true
    elseif a:sub(1, 1) == "-" then return nil, "unknown option " .. a
    elseif o.name then return nil, "unexpected argument " .. a
    else o.name = a end
    if err then return nil, err end
    i = i + 1
  end
  for _, k in ipairs({ "stages", "microbatches", "chunks" }) do
    if o[k] ~= nil then
      local n = math.tointeger(tonumber(o[k]))
      if not n or n < 1 then return nil, "--" .. k .. " must be a positive integer, got " .. o[k] end
      if n > MAX[k] then return nil, "--" .. k .. " " .. n .. " is too large (at most " .. MAX[k] .. ")" end
      o[k] = n
    end
  end
  if o.costs then
    local c, err = parse_costs(o.costs)
    if not c then return nil, err end
    o.costs = c
  end
  return o
end

local function fmt_list(t)
  local parts = {}
  for i, v in ipairs(t) do parts[i] = (string.format("%.3f", v):gsub("%.?0+$", "")) end
  return table.concat(parts, " ")
end

return function(S)
  local by_name = {}
  for _, g in ipairs(S.generators) do
    by_name[g.name] = g
    for _, a in ipairs(g.aliases or {}) do by_name[a] = g end
  end

  local function build(g, o)
    -- -v is the count of a generator that takes one (with "all": of those only)
    return pcall(g.fn, { stages = o.stages, microbatches = o.microbatches,
      chunks_per_stage = g.chunks and o.chunks or nil })
  end

  -- cli(...) -> status: 0 done, 1 the schedule failed, 2 usage error; the arguments are the
  -- command line's after "schedule": cli("1f1b", "--stages", "4", ...).
  return function(...)
    local out, errf = io.stdout, io.stderr
    local o, perr = parse({ ... })
    if not o then
      errf:write("tegraph schedule: ", perr, "\n", USAGE)
      return 2
    end
    if o.help then out:write(USAGE) return 0 end
    if not (o.name and o.stages and o.microbatches) then
      errf:write("tegraph schedule: NAME, --stages and --microbatches are required\n", USAGE)
      return 2
    end
    local computes = o.stages * math.max(o.chunks or 2, 2) * o.microbatches
    if computes > MAX_COMPUTES then
      errf:write(string.format("tegraph schedule: %d stages x %d chunks x %d microbatches is too large (at most %d " ..
        "microbatch-chunks)\n", o.stages, math.max(o.chunks or 2, 2), o.microbatches, MAX_COMPUTES))
      return 2
    end
    if o.name == "all" and o.svg then
      errf:write("tegraph schedule: --svg draws one schedule's timeline, not 'all' (name one)\n", USAGE)
      return 2
    end
    if o.name == "all" then
      out:write(string.format("P=%d M=%d%s\n%-12s %8s %9s  %-20s %-20s %s\n", o.stages, o.microbatches,
        o.chunks and (" V=" .. o.chunks) or "", "schedule", "bubble", "makespan", "idle per stage",
        "idle inside spans", "peak activations"))
      for _, g in ipairs(S.generators) do
        local ok, plan = build(g, o)
        if ok then
          local r = S.simulate(plan, o.costs)
          out:write(string.format("%-12s %8.4f %9s  %-20s %-20s %s\n", g.name, r.bubble, fmt_list({ r.makespan }),
            fmt_list(r.idle), fmt_list(r.gaps), fmt_list(r.peak)))
        else
          out:write(string.format("%-12s n/a: %s\n", g.name, tostring(plan):gsub("^.-schedule", "schedule")))
        end
      end
      return 0
    end
    local g = by_name[o.name]
    if not g then
      errf:write("tegraph schedule: unknown schedule '", o.name, "'\n", USAGE)
      return 2
    end
    if o.chunks and not g.chunks and o.chunks ~= (g.fixed_chunks or 1) then
      errf:write(string.format("tegraph schedule: %s has %d chunk%s per stage; -v %d does not apply\n", g.name,
        g.fixed_chunks or 1, (g.fixed_chunks or 1) == 1 and "" or "s", o.chunks))
      return 2
    end
    if g.chunks and o.chunks and o.chunks < 2 then
      errf:write(string.format("tegraph schedule: -v must be >= 2 (%s runs at least 2 chunks per stage), got %d\n",
        g.name, o.chunks), USAGE)
      return 2
    end
    local ok, plan = build(g, o)
    if not ok then
      -- the generator's message, without the path of the file that raised it
      errf:write("tegraph schedule: ", (tostring(plan):gsub("^[^:]*%.lua:%d+: ", "")), "\n")
      return 2
    end
    local vok, verr = S.validate(plan)
    if not vok then
      errf:write("tegraph schedule: ", verr, "\n")
      return 1
    end
    if o.svg then -- before the table: a file that cannot be written fails the command before it prints anything
      local sok, serr = pcall(S.svg, plan, o.svg, o.costs)
      if not sok then
        errf:write("tegraph schedule: ", (tostring(serr):gsub("^.-schedule%.svg", "schedule.svg")), "\n")
        return 1
      end
    end
    out:write(S.table(plan, { comm = o.comm }))
    local r = S.simulate(plan, o.costs)
    out:write(string.format("makespan %s, bubble %.4f (%.2f%%)\n", fmt_list({ r.makespan }), r.bubble, 100 * r.bubble))
    out:write("idle per stage: ", fmt_list(r.idle), " (inside each stage's span: ", fmt_list(r.gaps), ")\n")
    out:write("peak activations per stage: ", fmt_list(r.peak), "\n")
    if o.svg then out:write("wrote ", o.svg, "\n") end
    return 0
  end
end
