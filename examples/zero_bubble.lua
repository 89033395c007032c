-- zero_bubble.lua — 1F1B, interleaved 1F1B, ZB-H1 and ZB-V on a 4-stage model through the schedule executor: simulated
-- and measured per-stage idle time, identical gradients, SVG pictures and a Perfetto trace.
--
--   tegraph run examples/zero_bubble.lua
--   tegraph run examples/zero_bubble.lua --trace trace.json --svg schedule --microbatches 8 --graphed
--   tegraph run examples/zero_bubble.lua --help
--   tegraph run -n 2 examples/zero_bubble.lua     # one stage per rank: measured step times vs the simulator
--
-- All stages run in this process on one device, one action at a time, so the wall clock cannot show
-- pipeline bubbles. "Measured" idle time is obtained like this: the trace records each action's host
-- time (F, B, W, send, recv; with --graphed, replays), those durations become per-action costs, and
-- the schedule is replayed through the simulator with them — which gives the makespan and per-stage
-- idle time the schedule would have if each stage had its own device running at this speed.
--
-- On ranks (tegraph run -n P, mpirun -np P) each rank runs one stage over the communicator, so the
-- step time is the pipeline's: 1F1B, interleaved (2 chunks a stage), ZB-H1 and ZB-V step times are measured side by side with the
-- simulator's prediction for the F, B and W times measured in the run (their mean over the ranks,
-- transfers counted free: once with the ZB-H1 run's per-chunk times, halved for the schedules with two
-- chunks a stage, once with each schedule's own measured times), printed as a table and drawn as SVG
-- (PREFIX-NAME-ranks.svg).
local tg = require "tegraph"
local S = require "tegraph.schedule"
local cli = require "tegraph.cli"

local defaults = {
  { "stages", 4, "pipeline stages P", min = 1 },
  { "microbatches", 8, "microbatches per step M", min = 1 },
  { "layers", 8, "transformer layers (a multiple of 2P: ZB-V puts two chunks on each stage)", min = 2 },
  { "width", 64, "model width" },
  { "heads", 4, "attention heads" },
  { "tokens", 32, "sequence length T" },
  { "batch", 4, "sequences per microbatch" },
  { "steps", 3, "measured steps per schedule (after one warm-up step)", min = 1 },
  { "graphed", false, "run graphed callables (captured per chunk and microbatch) instead of eager modules" },
  { "svg", "schedule", "SVG prefix: writes PREFIX-NAME.svg (unit costs) and PREFIX-NAME-measured.svg" },
  { "trace", nil, "write the Chrome trace JSON of the measured steps to this file (open in Perfetto)" },
  { "seed", 1234, "seed" },
  { "dtype", "f32", "compute dtype: f32 or bf16 (bf16: weight gradients accumulated into f32 main_grad)" },
  { "sync", nil, "synchronise the device after each F, B and W, so the trace's action times are device times " ..
    "(default: on when the device is a GPU, where a span would otherwise time only the launches)", "boolean" },
}

local opt = cli.parse("examples/zero_bubble.lua", defaults, arg)
local world = tg.comm.size() > 1 and tg.comm.world() or nil
if world then opt.stages = world:size() end -- one stage per rank
local P, M, L = opt.stages, opt.microbatches, opt.layers
if opt.dtype ~= "f32" and opt.dtype ~= "bf16" then
  io.stderr:write(string.format("zero_bubble.lua: --dtype must be f32 or bf16 (got '%s')\n", tostring(opt.dtype)))
  os.exit(2)
end
local sync = opt.sync
if sync == nil then sync = not tg.default_device():find("^cpu") end
local function usage_error(msg) -- options that do not go together: a usage error, exit 2
  io.stderr:write("zero_bubble.lua: ", msg, "\n")
  os.exit(2)
end
if L % (2 * P) ~= 0 then usage_error(string.format("--layers (%d) must be a multiple of 2 * stages (%d)", L, 2 * P)) end
if M % P ~= 0 then
  usage_error(string.format("--microbatches (%d) must be a multiple of stages (%d) (interleaved 1F1B)", M, P))
end
if opt.width % opt.heads ~= 0 then
  usage_error(string.format("--width (%d) must be a multiple of --heads (%d)", opt.width, opt.heads))
end
local shape = { opt.batch, opt.tokens, opt.width }

-- The same L layers (same seed, same weights) grouped into C chunks, layer names independent of
-- the grouping so the gradients of different schedules can be compared by name.
local function build(C, delay)
  tg.manual_seed(opt.seed)
  local per = L // C
  local chunks = {}
  for c = 1, C do
    local layers = {}
    for k = 1, per do
      local l = (c - 1) * per + k
      layers[k] = tg.nn.TransformerLayer(opt.width, 4 * opt.width, opt.heads, { name = "layer" .. l, chunk = c,
        delay_wgrad = delay, dtype = opt.dtype, fuse_wgrad_accumulation = opt.dtype == "bf16" })
    end
    layers.name, layers.chunk = "chunk" .. c, c
    chunks[c] = tg.nn.Sequential(layers)
  end
  return chunks
end

tg.manual_seed(opt.seed + 1)
local xs, dys = {}, {}
for m = 1, M do
  xs[m] = tg.randn(shape, { dtype = opt.dtype })
  dys[m] = tg.randn(shape, { dtype = opt.dtype }) -- a fixed upstream gradient per microbatch stands in for the loss
end

------------------------------------------------------------------------ one stage per rank
if world then
  local rank, stage = world:rank(), world:rank() + 1
  local out = rank == 0 and io.stdout or io.open("/dev/null", "w")
  local owners = require("tegraph.schedule.plan").owners
  local list = {
    { "1F1B", S.one_f_one_b { stages = P, microbatches = M }, delay = false },
    { "interleaved", S.interleaved { stages = P, microbatches = M, chunks_per_stage = 2 }, delay = false },
    { "ZB-H1", S.zb_h1 { stages = P, microbatches = M }, delay = true },
    { "ZB-V", S.zb_v { stages = P, microbatches = M }, delay = true },
  }
  out:write(string.format("%d stages on %d ranks, %d microbatches, %d transformer layers (width %d, %d tokens x %d " ..
    "sequences), %s, %s on %s\n\n", P, world:size(), M, L, opt.width, opt.tokens, opt.batch, opt.graphed and "graphed" or "eager",
    opt.dtype, tg.default_device()))
  local sums = tg.zeros({ 3 }, { dtype = "f32" }) -- mean F, B, W (ms) of the ZB-H1 run, summed over the ranks
  -- each schedule's own per-chunk means (F, B or the fused B+W, W), summed over the ranks
  local own = tg.zeros({ 3 * #list }, { dtype = "f32" })
  for si, sch in ipairs(list) do
    local plan = sch[2]
    local C = plan.stages * (plan.chunks or 1)
    local chunks = build(C, sch.delay)
    local owner = owners(plan)
    local mine = {}
    for c = 1, C do if owner[c] == stage then mine[c] = chunks[c] end end
    local graphed
    if opt.graphed then
      local samples = {}
      for c = 1, C do samples[c] = xs[1] end
      graphed = S.make_graphed(plan, mine, { samples = samples, warmup = 1, stages = { stage } })
    end
    local run = { chunks = mine, graphed = graphed, inputs = xs, loss_grad = dys, comm = world, sync = sync }
    S.execute(plan, run) -- warm-up step
    world:barrier()
    tg.trace.start()
    local t0 = tg.time()
    for _ = 1, opt.steps do S.execute(plan, run) end
    world:barrier()
    sch.wall = (tg.time() - t0) / opt.steps
    local sum, n = { F = 0, B = 0, W = 0 }, { F = 0, B = 0, W = 0 }
    for _, e in ipairs(tg.trace.events()) do
      local op = e.op == "B+W" and "B" or e.op -- a fused backward (W in B) counts as B, W stays 0
      if e.cat == "action" and e.ph == "X" and sum[op] then sum[op], n[op] = sum[op] + e.dur, n[op] + 1 end
    end
    tg.trace.stop(nil, { quiet = true })
    for i, op in ipairs { "F", "B", "W" } do
      if n[op] > 0 then own:narrow(3 * (si - 1) + i, 1):fill_(sum[op] / n[op] * 1e-3) end
    end
    if sch[1] == "ZB-H1" then
      for i, op in ipairs { "F", "B", "W" } do
        if n[op] == 0 then error("zero_bubble: the ZB-H1 run recorded no " .. op, 0) end
        sums:narrow(i, 1):fill_(sum[op] / n[op] * 1e-3)
      end
    end
  end
  world:all_reduce(sums, { op = "sum" })
  world:all_reduce(own, { op = "sum" })
  local ov = own:totable()
  local v = sums:totable()
  local costs = { F = v[1] / P, B = v[2] / P, W = v[3] / P, comm = 0 }
  out:write(string.format("measured per chunk (ZB-H1 run, mean over ranks): F %.3f ms, B %.3f ms, W %.3f ms\n\n",
    costs.F, costs.B, costs.W))
  out:write("schedule    | measured step ms | simulated step ms | simulated bubble | measured / simulated | " ..
    "own F / B / W ms       | simulated, own costs | measured / that\n")
  out:write("------------|------------------|-------------------|------------------|----------------------|" ..
    "------------------------|----------------------|----------------\n")
  local rel = { F = 1, B = costs.B / costs.F, W = costs.W / costs.F, comm = 0 }
  for si, sch in ipairs(list) do
    -- ZB-V's and interleaved's chunks hold half the layers of the others' (two chunks per stage): half the cost each
    local scale = (sch[2].chunks or 1) > 1 and 0.5 or 1
    local c = { F = costs.F * scale, B = costs.B * scale, W = costs.W * scale, comm = 0 }
    local sim = S.simulate(sch[2], c)
    -- the same schedule simulated with the F, B (fused B+W where W is not delayed) and W its own run measured
    local k = 3 * (si - 1)
    local oc = { F = ov[k + 1] / P, B = ov[k + 2] / P, W = ov[k + 3] / P, comm = 0 }
    local osim = S.simulate(sch[2], oc)
    out:write(string.format("%-11s | %16.2f | %17.2f | %15.1f%% | %20.2f | %6.2f / %6.2f / %5.2f | %20.2f | %14.2f\n",
      sch[1], sch.wall * 1e3, sim.makespan, 100 * sim.bubble, sch.wall * 1e3 / sim.makespan, oc.F, oc.B, oc.W,
      osim.makespan, sch.wall * 1e3 / osim.makespan))
    if rank == 0 and opt.svg and opt.svg ~= "" then
      local key = sch[1]:lower():gsub("%-", "_")
      S.svg(sch[2], string.format("%s-%s-ranks.svg", opt.svg, key),
        { F = rel.F * scale, B = rel.B * scale, W = rel.W * scale, comm = 0 })
      sch.svg = string.format("%s-%s-ranks.svg", opt.svg, key)
    end
  end
  if rank == 0 and opt.svg and opt.svg ~= "" then
    out:write(string.format("\nwrote %s-{1f1b,interleaved,zb_h1,zb_v}-ranks.svg (the simulated schedules in units of the measured F)\n",
      opt.svg))
  end
  return
end

local schedules = {
  { "1F1B", S.one_f_one_b { stages = P, microbatches = M }, delay = false },
  { "interleaved", S.interleaved { stages = P, microbatches = M, chunks_per_stage = 2 }, delay = false },
  { "ZB-H1", S.zb_h1 { stages = P, microbatches = M }, delay = true },
  { "ZB-V", S.zb_v { stages = P, microbatches = M }, delay = true },
}

local grads = {}
io.write(string.format("%d stages, %d microbatches, %d transformer layers (width %d, %d tokens x %d sequences), %s\n",
  P, M, L, opt.width, opt.tokens, opt.batch, opt.graphed and "graphed" or "eager"))
io.write(string.format("device %s, dtype %s, action times %s\n\n", tg.default_device(), opt.dtype,
  sync and "on the device (synchronised after each F, B and W)" or "on the host"))

-- Every schedule's model, graphed callables and warm-up step first; then one trace holds the measured
-- steps, each schedule's spans in its own process (pid 1, 2, 3).
local hooks = 0
for _, sch in ipairs(schedules) do
  local plan = sch[2]
  local C = plan.stages * (plan.chunks or 1)
  local chunks = build(C, sch.delay)
  for _, c in ipairs(chunks) do c:register_wgrad_hook(function() hooks = hooks + 1 end) end
  local graphed
  if opt.graphed then
    local samples = {}
    for c = 1, C do samples[c] = xs[1] end
    graphed = S.make_graphed(plan, chunks, { samples = samples, warmup = 1 })
  end
  sch.chunks, sch.run = chunks, { chunks = chunks, graphed = graphed, inputs = xs, loss_grad = dys, sync = sync }
  S.execute(plan, sch.run) -- warm-up step (untraced)
end

tg.trace.start()
for pid, sch in ipairs(schedules) do
  local name, plan, chunks, run = sch[1], sch[2], sch.chunks, sch.run
  run.pid = pid
  tg.trace.name_process(pid, name)
  local t0 = tg.time()
  hooks = 0
  for _ = 1, opt.steps do S.execute(plan, run) end
  local wall = (tg.time() - t0) / opt.steps

  local nparams = 0
  local g = {}
  for _, c in ipairs(chunks) do
    for _, p in ipairs(c:parameters()) do
      nparams = nparams + 1
      g[p.name] = p.grad -- compared on the device below (each schedule has its own model)
    end
  end
  grads[#grads + 1] = g

  local unit = S.simulate(plan) -- F = B = W = 1, transfers free
  local meas = S.measure(plan, tg.trace.events(), { pid = pid })
  local sim = meas.simulated
  io.write(string.format("%s: step %.1f ms on one device (all stages in turn); hooks %d = %d params x %d microbatches x %d steps\n",
    name, wall * 1e3, hooks, nparams, M, opt.steps))
  io.write(string.format("  simulated (F=B=W=1): makespan %.1f, bubble %.1f%%\n", unit.makespan, 100 * unit.bubble))
  io.write(string.format("  measured costs:      makespan %.2f ms, bubble %.1f%%\n", sim.makespan * 1e3, 100 * sim.bubble))
  io.write("  stage | idle (F=B=W=1) | busy ms | idle ms (measured costs)\n")
  for s = 1, P do
    io.write(string.format("  %5d | %14.1f | %7.2f | %7.2f\n", s, unit.idle[s], meas.busy[s] * 1e3, sim.idle[s] * 1e3))
  end
  if opt.svg and opt.svg ~= "" then
    local key = name:lower():gsub("%-", "_")
    S.svg(plan, string.format("%s-%s.svg", opt.svg, key))
    S.svg(plan, string.format("%s-%s-measured.svg", opt.svg, key), meas.relative) -- time in mean-F units
    io.write(string.format("  wrote %s-%s.svg and %s-%s-measured.svg\n", opt.svg, key, opt.svg, key))
  end
  io.write("\n")
end

-- Every schedule computes the same gradients (same weights, same data, wgrads retired in
-- microbatch order everywhere), whatever the order of F, B and W.
-- Compared where they are, parameter by parameter: bit-identical means a largest difference of 0.
local function equal(a, b)
  for name, t in pairs(a) do
    if not b[name] or t:max_abs_diff(b[name]) ~= 0 then return false end
  end
  for name in pairs(b) do if not a[name] then return false end end
  return true
end
local same = true
for i = 2, #grads do same = same and equal(grads[1], grads[i]) end
io.write(string.format("gradients of %s bit-identical: %s\n", "1F1B, interleaved, ZB-H1 and ZB-V", same and "yes" or "NO"))

local sum = tg.trace.stop(opt.trace, { quiet = true })
if opt.trace then
  io.write(string.format("wrote %s (%d spans; open it in https://ui.perfetto.dev)\n", opt.trace, sum.nspans))
end
if not same then os.exit(1) end
