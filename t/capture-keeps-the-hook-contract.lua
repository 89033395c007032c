-- capture-keeps-the-hook-contract.lua — module work captured with the plain tg.stream.capture keeps the hook
-- contract at every replay: hooks fire once per replayed wgrad with the step's info, the first contribution of a
-- step overwrites (main_grad equals eager every step instead of growing), forwards count for the step check, and a
-- replay the step does not expect fails loudly (twice in a step, a missing microbatch, a microbatch past the step's,
-- hooks skipped on purpose, a replaced wgrad target) instead of training wrong; graphed callables refuse a replaced
-- wgrad target too. A capture that would take wgrads queued before it is refused, and so is the replay of a
-- backward captured without its forward; a captured step (capture_step) refuses a replay after its parameters' hooks changed.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local IN, OUT, ROWS = 4, 3, 5

tg.manual_seed(11)
local X = { tg.randn({ ROWS, IN }), tg.randn({ ROWS, IN }) }
local DY = { tg.randn({ ROWS, OUT }), tg.randn({ ROWS, OUT }) }

local function linear(delay)
  tg.manual_seed(3)
  return tg.nn.Linear(IN, OUT, { name = "fc", fuse_wgrad_accumulation = true, delay_wgrad = delay })
end

local function W(m) return m:parameters()[1] end -- the weight

local function hooked(m)
  local log = {}
  m:register_wgrad_hook(function(p, info)
    log[#log + 1] = { name = p.name, mb = info.microbatch, last = info.last, step = info.step }
  end)
  return log
end

-- One microbatch's forward + backward (+ backward_dw when delayed) on static buffers.
local function fwd_bwd(m, delay, mb, x, dy)
  m:forward(x, mb)
  m:backward(dy, mb)
  if delay then m:backward_dw(mb) end
end

local function same(a, b)
  local ta, tb = a:totable(), b:totable()
  for i = 1, #ta do
    for j = 1, #ta[i] do
      if ta[i][j] ~= tb[i][j] then return false end
    end
  end
  return true
end

-- Eager reference: main_grad of the weight after a step of the given microbatches.
local function eager_grad(delay, mbs)
  local m = linear(delay)
  tg.step_begin { microbatches = #mbs }
  for _, mb in ipairs(mbs) do fwd_bwd(m, delay, mb, X[mb], DY[mb]) end
  tg.step_end()
  return W(m).main_grad:clone()
end

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed wgrad" or "wgrad not delayed"
  -- The measured case: one microbatch captured with a pool, three steps of step_begin / replay / step_end.
  local ref = eager_grad(delay, { 1 })
  local m = linear(delay)
  local log = hooked(m)
  local x, dy = X[1]:clone(), DY[1]:clone()
  local g = tg.stream.capture(function() fwd_bwd(m, delay, 1, x, dy) end, { pool = tg.pool() })
  t.is(#log, 0, mode .. ": no hook fires while capturing")
  local sums = {}
  for step = 1, 3 do
    local s = tg.step_begin { microbatches = 1 }
    g:replay()
    t.lives_ok(function() tg.step_end() end, mode .. ": step " .. step .. " passes the step check")
    t.is(#log, 2 * step, mode .. ": each replay fires the weight's and the bias's hooks once (step " .. step .. ")")
    local e = log[#log]
    t.ok(e.mb == 1 and e.last == true and e.step == s, mode .. ": the hook gets microbatch 1, last, and the open step")
    sums[step] = W(m).main_grad:sum()
    t.ok(same(W(m).main_grad, ref), mode .. ": main_grad after step " .. step .. " equals eager (overwritten, not accumulated)")
  end
  t.ok(sums[1] == sums[2] and sums[2] == sums[3], mode .. ": main_grad's sum stays " .. sums[1] .. " across steps")
  t.is(m.exec_mode, "captured", mode .. ": the module's execution mode says it was replayed from a capture")

  -- Outside a step, a replay accumulates, like an eager backward outside a step.
  g:replay()
  local doubled = ref:clone(); doubled:axpby_(1, ref, 1)
  t.ok(same(W(m).main_grad, doubled), mode .. ": a replay outside a step accumulates, as eager does")

  -- Two replays in a one-microbatch step: the step check fails and says what it got.
  tg.step_begin { microbatches = 1 }
  g:replay(); g:replay()
  local ok, err = pcall(tg.step_end)
  t.ok(not ok, mode .. ": replaying twice in a one-microbatch step fails the step check")
  t.like(tostring(err), "fc%.weight fired %[2%]", mode .. ": the error names the parameter and its two firings")
  t.like(tostring(err), "captured", mode .. ": the error names the execution mode")

  -- A two-microbatch step with one replay of the microbatch-1 graph: microbatch 2 never fired.
  tg.step_begin { microbatches = 2 }
  g:replay()
  ok, err = pcall(tg.step_end)
  t.ok(not ok, mode .. ": a step of two microbatches with one replay fails the step check")
  t.like(tostring(err), "fc%.weight fired %[1,0%]", mode .. ": the error shows microbatch 2 missing")
end

-- Two microbatches captured in one graph accumulate like eager; mixing replay and eager microbatches in one step
-- decides overwrite or accumulate at replay time either way round.
do
  local ref = eager_grad(false, { 1, 2 })
  local m = linear(false)
  local log = hooked(m)
  local g = tg.stream.capture(function()
    fwd_bwd(m, false, 1, X[1], DY[1]); fwd_bwd(m, false, 2, X[2], DY[2])
  end, { pool = tg.pool() })
  for step = 1, 2 do
    tg.step_begin { microbatches = 2 }
    g:replay()
    tg.step_end()
    t.ok(same(W(m).main_grad, ref), "two microbatches in one graph: main_grad equals eager after step " .. step)
  end
  t.is(#log, 8, "two microbatches in one graph: 2 parameters x 2 microbatches x 2 steps hook calls")

  local m1 = linear(false)
  hooked(m1)
  local g1 = tg.stream.capture(function() fwd_bwd(m1, false, 1, X[1], DY[1]) end, { pool = tg.pool() })
  local m2 = linear(false)
  hooked(m2)
  local g2 = tg.stream.capture(function() fwd_bwd(m2, false, 2, X[2], DY[2]) end, { pool = tg.pool() })
  for step = 1, 2 do
    tg.step_begin { microbatches = 2 }
    g1:replay()
    fwd_bwd(m1, false, 2, X[2], DY[2])
    tg.step_end()
    t.ok(same(W(m1).main_grad, ref), "replayed microbatch 1 then eager microbatch 2 equals eager (step " .. step .. ")")
    tg.step_begin { microbatches = 2 }
    fwd_bwd(m2, false, 1, X[1], DY[1])
    g2:replay()
    tg.step_end()
    t.ok(same(W(m2).main_grad, ref), "eager microbatch 1 then replayed microbatch 2 equals eager (step " .. step .. ")")
  end
end

-- A graph that computes microbatch 2's wgrad cannot replay in a one-microbatch step: refused before it runs.
do
  local m = linear(false)
  hooked(m)
  local g = tg.stream.capture(function() fwd_bwd(m, false, 2, X[2], DY[2]) end, { pool = tg.pool() })
  local before = W(m).main_grad:clone()
  tg.step_begin { microbatches = 1 }
  t.error_like(function() g:replay() end, "capture%-keeps%-the%-hook%-contract%.lua:%d+: .*fc%.weight for microbatch 2, but step %d+ has 1 microbatches",
    "replaying a microbatch-2 graph in a one-microbatch step is refused, naming the parameter and both counts")
  t.ok(same(W(m).main_grad, before), "the refused replay ran nothing")
  tg.hook_check(false); tg.step_end(); tg.hook_check(true)
end

-- TransformerEngine's bug on purpose (hooks skipped after replay): the step check catches it.
do
  local m = linear(false)
  hooked(m)
  tg.debug("skip_hooks_after_replay", true)
  local g = tg.stream.capture(function() fwd_bwd(m, false, 1, X[1], DY[1]) end, { pool = tg.pool() })
  tg.debug("skip_hooks_after_replay", false)
  tg.step_begin { microbatches = 1 }
  g:replay()
  local ok, err = pcall(tg.step_end)
  t.ok(not ok, "skipping hooks after a captured replay fails the step check")
  t.like(tostring(err), "hook check failed .*fc%.weight fired %[0%]", "the error names the parameter that never fired")
end

-- The graph writes the wgrad target it was captured with: replacing it afterwards is refused at replay.
do
  local m = linear(false)
  hooked(m)
  local g = tg.stream.capture(function() fwd_bwd(m, false, 1, X[1], DY[1]) end, { pool = tg.pool() })
  local buf = tg.zeros({ IN * OUT })
  W(m):set_main_grad(buf)
  tg.step_begin { microbatches = 1 }
  t.error_like(function() g:replay() end, "wgrad target of fc%.weight .*was replaced after the graph was captured",
    "a replaced main_grad is refused at replay, naming the parameter")
  tg.hook_check(false); tg.step_end(); tg.hook_check(true)
end

-- Graphed callables write the targets they were captured with too: make_graphed and graph_modules refuse a replay
-- after set_main_grad (a data-parallel wrapper made after capture re-binds main_grad into its buckets), instead of
-- leaving the new buffer at zero.
-- One step through c (a graphed callable or a model holding graphed modules) after p's main_grad was replaced:
-- its backward must fail naming the parameter; modules is what drops the failed step's saved state.
local function refused_after_rebind(c, p, modules, delay, pattern, what)
  p:set_main_grad(tg.zeros({ IN * OUT }))
  tg.step_begin { microbatches = 1 }
  c:forward(X[1], 1)
  t.error_like(function() c:backward(DY[1], 1); if delay then c:backward_dw(1) end end, pattern, what)
  modules:drop_saved()
  tg.hook_check(false); tg.step_end(); tg.hook_check(true)
end
for _, delay in ipairs { false, true } do
  local mode = delay and "delayed wgrad" or "wgrad not delayed"
  local m = linear(delay)
  local g = tg.graph.make_graphed(m, { sample = X[1], microbatches = 1 })
  refused_after_rebind(g, W(m), m, delay, "wgrad target of fc%.weight .*was replaced after the graph was captured %(capture again%)",
    "make_graphed (" .. mode .. "): a main_grad replaced after capture is refused at replay, naming the parameter")
  g:free()
  local s = tg.nn.Sequential { linear(delay), name = "s" }
  tg.graph.graph_modules(s, { "fc" }, { sample = X[1], microbatches = 1 })
  refused_after_rebind(s, s:parameters()[1], s, delay, "wgrad target of fc%.weight .*was replaced after the graph was captured",
    "graph_modules (" .. mode .. "): a main_grad replaced after capture is refused at replay, naming the parameter")
end

-- A whole step with a hook-driven reduce in one plain capture: the hooks fire at replay, not while capturing, so
-- the reduce's finish() inside the captured function finds its buckets unreduced and fails at capture time.
do
  local ddp = require "tegraph.reduce.ddp"
  local m = linear(false)
  local r = ddp.new { params = m:parameters() }
  t.error_like(function()
    tg.stream.capture(function()
      tg.step_begin { microbatches = 1 }
      fwd_bwd(m, false, 1, X[1], DY[1])
      tg.step_end()
      r:finish()
    end, { pool = tg.pool() })
  end, "ddp: 1 bucket%(s%) not reduced this step", "ddp's finish() inside a plain capture of a step fails loudly at capture")
  t.ok(not tg.step_open(), "the step the capture opened was closed")
end

-- A plain capture that would take work queued before it: eager F and B of microbatch 1 left its delayed wgrad
-- queued; a capture of F / B / W of microbatch 1 on new inputs would have its backward_dw compute the eager one
-- (the store is FIFO), and the eager backward_dw the captured one. Refused at the capture's forward, naming the
-- module and the queued microbatch; the eager W then computes its own gradient.
do
  local m = linear(true)
  m:forward(X[1], 1); m:backward(DY[1], 1)
  t.error_like(function()
    tg.stream.capture(function() fwd_bwd(m, true, 1, X[2], DY[2]) end, { pool = tg.pool() })
  end, "Linear 'fc' forward %(microbatch 1%): forward captured while the module's wgrad store holds delayed wgrads " ..
    "queued before the capture %(microbatch 1%)", "a capture over a module with pre-capture queued wgrads is refused")
  m:backward_dw(1)
  t.ok(same(W(m).main_grad, eager_grad(true, { 1 })), "the eager backward_dw then computes the eager microbatch's gradient")
end

-- A backward captured without its forward would replay the gradient of the input the forward outside the graph
-- saved, in steps where nothing was forwarded: its replay is refused, naming the parameter, module and microbatch
-- (the capture itself is allowed: looking at a backward's graph is fine).
do
  local m = linear(false)
  hooked(m)
  m:forward(X[1], 1)
  local g = tg.stream.capture(function() m:backward(DY[1], 1) end, { pool = tg.pool() })
  local before = W(m).main_grad:clone()
  tg.step_begin { microbatches = 1 }
  t.error_like(function() g:replay() end,
    "replay of a graph that captured the wgrad of fc%.weight %(Linear 'fc', microbatch 1%) without the module's forward",
    "replaying a backward captured without its forward is refused")
  t.ok(same(W(m).main_grad, before), "the refused replay ran nothing")
  tg.step_end()
end

-- A captured step (capture_step) holds its hooks' device work: a hook added or removed after the capture would
-- never run (or still run), so the replay is refused, naming the parameter; with the capture's hooks back it runs.
do
  local m = linear(true)
  local st = tg.graph.capture_step(function() fwd_bwd(m, true, 1, X[1], DY[1]) end, { microbatches = 1 })
  local n = 0
  local _, id = W(m):register_hook(function() n = n + 1 end)
  t.error_like(function() st:replay() end,
    "full%-iteration capture: the hooks of fc%.weight changed since the capture %(0 then, 1 now%).*capture the step again",
    "capture_step: a replay after a hook was added is refused, naming the parameter")
  t.ok(n == 0 and not tg.step_open(), "the refused replay fired nothing and left no step open")
  W(m):remove_hook(id)
  t.ok(pcall(function() st:replay() end), "with the hook removed again the replay runs")
  local m2 = linear(true)
  local _, id2 = W(m2):register_hook(function() end)
  local st2 = tg.graph.capture_step(function() fwd_bwd(m2, true, 1, X[1], DY[1]) end, { microbatches = 1 })
  W(m2):remove_hook(id2)
  t.error_like(function() st2:replay() end, "the hooks of fc%.weight changed since the capture %(1 then, 0 now%)",
    "capture_step: a replay after a captured hook was removed is refused")
end

t.done_testing()
