-- trace-has-a-span-per-module-phase.lua — tg.trace in one process: valid Chrome trace JSON with a compute span per module
-- forward, backward and wgrad per microbatch (eager and delayed wgrad), one host-track span per hook dispatch, no comm
-- without ranks, non-negative durations, a summary that adds up; misuse is named.
local tg = require "tegraph"
local t = require "tap"
local json = require "json"

local D, H, TOK, M, STEPS = 8, 12, 5, 2, 2
local path = os.tmpname()

local function build(delay)
  tg.manual_seed(1234)
  local o = function(x) x.delay_wgrad, x.fuse_wgrad_accumulation = delay, true; return x end
  return tg.nn.Sequential {
    tg.nn.Linear(D, H, o { name = "fc_in" }),
    tg.nn.LayerNormMLP(H, 2 * H, o { name = "mlp" }),
    tg.nn.LayerNormLinear(H, D, o { name = "proj" }),
    name = "net",
  }
end

-- The modules with weights, as name/type (LayerNormLinear's Linear child shares its name).
local LEAVES = { "fc_in/Linear", "mlp.norm/LayerNorm", "mlp.fc1/Linear", "mlp.fc2/Linear", "proj.norm/LayerNorm",
  "proj/Linear" }

for _, delay in ipairs { false, true } do
  local label = delay and "delayed wgrad" or "wgrad in backward"
  local model = build(delay)
  local hooked = 0
  for _, p in ipairs(model:parameters()) do
    p:register_hook(function() end)
    hooked = hooked + 1
  end
  tg.manual_seed(7)
  local x, dy = tg.randn({ TOK, D }), tg.randn({ TOK, D })
  t.ok(not tg.trace.active(), label .. ": no trace runs before start")
  tg.trace.start()
  t.ok(tg.trace.active(), label .. ": a trace runs after start")
  for _ = 1, STEPS do
    tg.step_begin { microbatches = M }
    for m = 1, M do model:forward(x, m) end
    for m = M, 1, -1 do
      model:backward(dy, m)
      if delay then model:backward_dw(m) end
    end
    tg.step_end()
  end
  local r = tg.trace.span("host work", nil, function() return 42 end)
  t.is(r, 42, label .. ": trace.span returns its function's result")
  local sum = tg.trace.stop(path, { quiet = true })
  local ok, doc = pcall(json.read, path)
  t.ok(ok and type(doc) == "table" and type(doc.traceEvents) == "table", label .. ": the trace is Chrome trace JSON")
  doc = ok and doc or { traceEvents = {} }

  local count, bad_dur, tracks, hooks, host = {}, 0, {}, 0, 0
  for _, e in ipairs(doc.traceEvents) do
    if e.ph == "M" and e.name == "thread_name" then tracks[e.tid] = e.args.name end
    if e.ph == "X" then
      if not (e.dur >= 0 and e.ts >= 0) then bad_dur = bad_dur + 1 end
      if e.cat == "compute" then
        local k = string.format("%s/%s %s %d %d", e.args.module, e.args.type, e.args.phase, e.args.step, e.args.mb)
        count[k] = (count[k] or 0) + 1
      elseif e.cat == "hook" then
        if e.tid == 3 and e.name:match("^hooks ") then hooks = hooks + 1 end
      elseif e.cat == "host" then
        host = host + 1
      end
    end
  end
  t.ok(tracks[1] == "compute" and tracks[2] == "comm" and tracks[3] == "host", label .. ": tracks compute, comm, host")
  t.is(bad_dur, 0, label .. ": every span has a non-negative start and duration")
  local missing = {}
  for _, name in ipairs(LEAVES) do
    for _, phase in ipairs { "forward", "backward", "wgrad" } do
      for m = 1, M do
        local n = 0
        for k, v in pairs(count) do
          if k:match("^" .. name:gsub("%.", "%%.") .. " " .. phase .. " %d+ " .. m .. "$") then
            n = n + v
          end
        end
        if n ~= STEPS then missing[#missing + 1] = string.format("%s %s mb %d: %d", name, phase, m, n) end
      end
    end
  end
  t.ok(#missing == 0, label .. ": one forward, backward and wgrad span per leaf module, microbatch and step" ..
    (#missing > 0 and (" (" .. table.concat(missing, ", ") .. ")") or ""))
  local composite = 0
  for k, v in pairs(count) do if k:match("^net/Sequential backward") then composite = composite + v end end
  t.is(composite, STEPS * M, label .. ": the composite's backward spans too")
  t.is(hooks, hooked * M * STEPS, label .. ": one hook span (host track) per hooked parameter per microbatch")
  t.is(host, 1, label .. ": and the one host span trace.span made")
  t.ok(sum.comm_busy_ms == 0 and sum.overlapped_ms == 0 and sum.exposed_pct == 0, label .. ": no comm in one process")
  t.ok(sum.compute_ms > 0 and sum.nspans == #doc.traceEvents - 4, label .. ": the summary counts the spans written")
  t.ok(sum.line:match("^trace: %d+ spans"), label .. ": the summary line")
end

t.ok(not pcall(tg.trace.stop), "stop without a trace raises")
tg.trace.start()
local e1, e2 = pcall(tg.trace.start)
t.ok(not e1 and tostring(e2):match("already running"), "a second start raises, saying a trace runs")
tg.trace.stop(nil, { quiet = true })
local ok2, err = pcall(function()
  tg.trace.start()
  build(false):forward(tg.randn({ TOK, D }))
  return tg.trace.stop("/nonexistent-dir/trace.json", { quiet = true })
end)
t.ok(not ok2 and tostring(err):match("/nonexistent%-dir/trace.json"), "an unwritable path is named")
t.ok(tg.trace.active(), "a stop that cannot write its file leaves the trace running (its spans are not lost)")
local kept = tg.trace.events()
t.ok(#kept >= 3, "... with the spans recorded before it (" .. #kept .. ")")
local retry = tg.trace.stop(path, { quiet = true })
t.is(retry.nspans, #kept, "stop again with a path that can be written: it writes the kept spans")
local rf = assert(io.open(path))
t.ok(#json.decode(rf:read("a")).traceEvents >= #kept, "... into the file")
rf:close()
t.ok(not tg.trace.active(), "... and ends the trace")
tg.trace.start()
pcall(tg.trace.stop, "/nonexistent-dir/trace.json", { quiet = true })
tg.trace.stop(nil, { quiet = true })
t.ok(not tg.trace.active(), "stop() after a failed stop drops the kept spans and ends the trace")
os.remove(path)
t.done_testing()
