-- sched-trace-is-chrome-json.lua — the executor's trace: valid Chrome trace JSON (parsed here, and by
-- python3's json when present) with exactly one event per action on its stage's track, actions of
-- a stage not overlapping, one hook event per parameter per microbatch inside the B/W that fired
-- it, one transfer span per send; measure() turns it into per-action costs for the simulator.
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

local tr = S.trace()
S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys, trace = tr })
local file = os.tmpname()
t.ok(tr:write(file), "the trace is written")
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

local actions, hooks, begins, ends, names = {}, {}, 0, 0, 0
local well_formed = true
for _, e in ipairs(doc.traceEvents) do
  if type(e.name) ~= "string" or type(e.ph) ~= "string" or type(e.pid) ~= "number" or type(e.tid) ~= "number" then
    well_formed = false
  end
  if e.ph == "X" then
    if type(e.ts) ~= "number" or type(e.dur) ~= "number" or e.ts < 0 or e.dur < 0 then well_formed = false end
    if e.cat == "action" then actions[#actions + 1] = e elseif e.cat == "hook" then hooks[#hooks + 1] = e end
  elseif e.ph == "b" then begins = begins + 1
  elseif e.ph == "e" then ends = ends + 1
  elseif e.ph == "M" then names = names + 1 end
end
t.ok(well_formed, "every event has name, ph, pid, tid; complete events have ts >= 0 and dur >= 0")
t.is(#actions, nactions, "one action event per action of the plan")
t.is(names, plan.stages, "one named track per stage")

-- Each (stage, index) once, on the stage's track, naming the plan's action.
local seen, match = {}, true
for _, e in ipairs(actions) do
  local s, i = e.args.stage, e.args.index
  local a = plan[s] and plan[s][i]
  local k = s .. ":" .. i
  if not a or seen[k] or e.tid ~= s or e.name ~= S.describe(a) then match = false end
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

-- Hooks: one per parameter per microbatch, inside a W (delayed wgrad) on the same track.
t.is(#hooks, nparams * M, "one hook event per parameter per microbatch")
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
local evs = tr:events()
local n_action = 0
for _, e in ipairs(evs) do if e.cat == "action" then n_action = n_action + 1 end end
t.is(n_action, nactions, "trace:events() lists the same action events")

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
local m = S.measure(plan, tr)
local sum = 0
for s = 1, plan.stages do sum = sum + m.busy[s] end
t.ok(sum > 0, "measured busy time is positive")
t.ok(m.simulated.makespan >= math.max(m.busy[1], m.busy[2]) - 1e-12,
  "the simulated makespan with measured costs is at least each stage's busy time")

-- A second run (synchronising the device after each compute) appends: two events per action now.
S.execute(plan, { chunks = chunks, inputs = xs, loss_grad = dys, trace = tr, sync = true })
n_action = 0
for _, e in ipairs(tr:events()) do if e.cat == "action" then n_action = n_action + 1 end end
t.is(n_action, 2 * nactions, "a second run appends its events")

t.done_testing()
