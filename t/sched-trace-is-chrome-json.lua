-- sched-trace-is-chrome-json.lua — the executor in the trace: valid Chrome trace JSON (parsed here, and
-- by python3's json when present) with exactly one span per action on its stage's track, actions of
-- a stage not overlapping, exactly one hook span per parameter per microbatch inside the W that fired
-- it, one transfer span per send, the modules' compute spans beside them; opts.pid moves a run's
-- spans to another (named) process; measure() turns the events into per-action costs for the simulator.
local tg = require "tegraph"
local S = require "tegraph.schedule"
local t = require "tap"

local json_decode = require("json").decode -- t/lib/json.lua

t.ok(pcall(json_decode, '{"a":[1,2.5e3,"x\\"y"],"b":{}}') and not pcall(json_decode, '{"a":[1,}'),
  "the test's JSON decoder accepts JSON and rejects broken JSON")

tg.hook_check(true)
local D, TOK, M = 8, 4, 4
local plan = S.zb_h1 { stages = 2, microbatches = M }
tg.manual_seed(3)
local chunks = {}
for c = 1, 2 do
  chunks[c] = tg.nn.Sequential {
    tg.nn.Linear(D, D, { name = "c" .. c .. ".fc", chunk = c, delay_wgrad = true }),
    tg.nn.LayerNormMLP(D, 2 * D, { name = "c" .. c .. ".mlp", chunk = c, delay_wgrad = true }),
    name = "c" .. c, chunk = c }
end
local nparams = 0
for _, c in ipairs(chunks) do
  nparams = nparams + #c:parameters()
  c:register_wgrad_hook(function() end)
end
local xs, dys = {}, {}
for m = 1, M do xs[m], dys[m] = tg.randn { TOK, D }, tg.randn { TOK, D } end

t.error_like(function() S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys, trace = {} }) end,
  "there is no opts.trace: a run records its actions into the running trace", "opts.trace is refused, naming the way to trace")

tg.trace.start()
S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys })
local evs = tg.trace.events()
local file = os.tmpname()
local sum = tg.trace.stop(file, { quiet = true })
t.ok(sum.nspans == #evs and sum.compute_ms > 0, "the trace is written: its summary counts the spans events() listed")
local f = assert(io.open(file))
local text = f:read("a")
f:close()

local ok, doc = pcall(json_decode, text)
t.ok(ok and type(doc) == "table" and type(doc.traceEvents) == "table", "the file parses as JSON with a traceEvents list")
if not ok then t.diag(doc) doc = { traceEvents = {} } end

local nactions, nsends = 0, 0
for s = 1, plan.stages do
  for _, a in ipairs(plan[s]) do
    nactions = nactions + 1
    if a.op:sub(1, 4) == "send" then nsends = nsends + 1 end
  end
end

local actions, hooks, begins, ends, compute = {}, {}, 0, 0, 0
local well_formed, tracks, stage_tracks = true, {}, 0
for _, e in ipairs(doc.traceEvents) do
  if e.ph == "M" and e.name == "thread_name" then
    tracks[e.tid] = e.args.name
    if e.args.name:match("^stage %d+$") then stage_tracks = stage_tracks + 1 end
  end
end
for _, e in ipairs(doc.traceEvents) do
  if type(e.name) ~= "string" or type(e.ph) ~= "string" or type(e.pid) ~= "number" or type(e.tid) ~= "number" then
    well_formed = false
  end
  if e.ph == "X" then
    if type(e.ts) ~= "number" or type(e.dur) ~= "number" or e.ts < 0 or e.dur < 0 then well_formed = false end
    if e.cat == "action" then actions[#actions + 1] = e
    elseif e.cat == "hook" then hooks[#hooks + 1] = e
    elseif e.cat == "compute" then compute = compute + 1 end
  elseif e.ph == "b" then begins = begins + 1
  elseif e.ph == "e" then ends = ends + 1 end
end
t.ok(well_formed, "every event has name, ph, pid, tid; complete events have ts >= 0 and dur >= 0")
t.is(#actions, nactions, "one action event per action of the plan")
t.is(stage_tracks, plan.stages, "one named track per stage")
t.ok(compute > 0, "the modules' compute spans are in the same trace")

-- Each (stage, index) once, on the stage's track, naming the plan's action.
local seen, match = {}, true
for _, e in ipairs(actions) do
  local s, i = e.args.stage, e.args.index
  local a = plan[s] and plan[s][i]
  local k = s .. ":" .. i
  if not a or seen[k] or tracks[e.tid] ~= "stage " .. s or e.name ~= S.describe(a) then match = false end
  seen[k] = true
end
t.ok(match, "each action event is a distinct plan action, named like describe(), on its stage's track")

-- Actions of one stage never overlap (one host thread runs them one at a time).
local by_stage, overlap = {}, false
for _, e in ipairs(actions) do
  by_stage[e.tid] = by_stage[e.tid] or {}
  table.insert(by_stage[e.tid], e)
end
for _, list in pairs(by_stage) do
  table.sort(list, function(a, b) return a.ts < b.ts end)
  for i = 2, #list do
    if list[i].ts < list[i - 1].ts + list[i - 1].dur - 1e-3 then overlap = true end
  end
  for i = 2, #list do
    -- the recorded order per stage is the plan's order
    if list[i].args.index < list[i - 1].args.index then overlap = true end
  end
end
t.ok(not overlap, "a stage's action events follow its list and do not overlap")

-- Hooks: one span per dispatch, per parameter per microbatch, inside a W (delayed wgrad) on the same track.
t.is(#hooks, nparams * M, "one hook span per parameter per microbatch")
local inside = true
for _, h in ipairs(hooks) do
  local found = false
  for _, e in ipairs(by_stage[h.tid] or {}) do
    if e.args.op == "W" and e.args.mb == h.args.mb and e.args.chunk == h.args.chunk
      and h.ts >= e.ts - 1e-3 and h.ts + h.dur <= e.ts + e.dur + 1e-3 then
      found = true
    end
  end
  inside = inside and found
end
t.ok(inside, "each hook event lies inside the W of its chunk and microbatch")

t.is(begins, nsends, "one transfer span per send")
t.is(ends, begins, "every transfer span is closed")

-- The Lua view of the same trace.
local n_action, tracked = 0, true
for _, e in ipairs(evs) do
  if e.cat == "action" then
    n_action = n_action + 1
    tracked = tracked and e.track == "stage " .. e.stage and e.pid == 0
  end
end
t.is(n_action, nactions, "tg.trace.events() lists the same action spans")
t.ok(tracked, "each on its stage's track, in process 0 (the rank)")

-- python3's json, when it exists, agrees the file is JSON.
local py = io.popen("command -v python3 2>/dev/null"):read("l")
if py and py ~= "" then
  local okp = os.execute(string.format("%s -c 'import json,sys; json.load(open(sys.argv[1]))' %q", py, file))
  t.ok(okp, "python3's json module loads the trace")
else
  t.diag("no python3: only the Lua decoder checked the JSON")
end
os.remove(file)

-- measure(): per-action costs from the trace, replayed through the simulator.
local m = S.measure(plan, evs)
local sum = 0
for s = 1, plan.stages do sum = sum + m.busy[s] end
t.ok(sum > 0, "measured busy time is positive")
t.ok(m.simulated.makespan >= math.max(m.busy[1], m.busy[2]) - 1e-12,
  "the simulated makespan with measured costs is at least each stage's busy time")

t.error_like(function() S.measure(plan, nil) end, "events must be the list tg.trace.events%(%) returns",
  "measure without events is refused")

-- Two runs in one trace (the second synchronising the device after each compute, in process 7).
tg.trace.start()
S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys })
S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys, sync = true, pid = 7 })
tg.trace.name_process(7, "synchronised")
local per_pid, other = {}, 0
for _, e in ipairs(tg.trace.events()) do
  if e.cat == "action" then per_pid[e.pid] = (per_pid[e.pid] or 0) + 1 end
  if e.pid ~= 0 and e.pid ~= 7 then other = other + 1 end
end
t.ok(per_pid[0] == nactions and per_pid[7] == nactions and other == 0,
  string.format("each run's actions are in its own process (%s and %s of %d)", per_pid[0], per_pid[7], nactions))
tg.trace.stop(file, { quiet = true })
f = assert(io.open(file))
doc = json_decode(f:read("a"))
f:close()
os.remove(file)
local pname, pid7_compute = nil, 0
for _, e in ipairs(doc.traceEvents) do
  if e.ph == "M" and e.name == "process_name" and e.pid == 7 then pname = e.args.name end
  if e.pid == 7 and e.cat == "compute" then pid7_compute = pid7_compute + 1 end
end
t.is(pname, "synchronised", "process 7 carries its name")
t.ok(pid7_compute > 0, "the modules' spans of the pid-7 run are in process 7 too")
t.ok(not tg.trace.active() and not pcall(tg.trace.events), "events() without a running trace raises")

t.done_testing()
