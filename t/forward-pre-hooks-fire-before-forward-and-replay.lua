-- forward-pre-hooks-fire-before-forward-and-replay.lua — m:register_forward_pre_hook(fn): fn(module, info) runs
-- before every forward of the module (its work precedes the forward: a weight it writes is the one the forward
-- uses), children in forward order, with {microbatch, chunk, step}; for a graphed callable before every F replay
-- and never during warm-up or capture (the hook's work is not baked into the graph); for a plain capture before
-- each replay of the graph that captured the forward; a failing hook aborts the forward naming itself; removal.
local tg = require "tegraph"
local t = require "tap"

local IN, OUT, ROWS = 4, 3, 5
tg.manual_seed(5)
local X = tg.randn({ ROWS, IN })

local function net()
  tg.manual_seed(9)
  return tg.nn.Sequential {
    tg.nn.Linear(IN, OUT, { name = "a", chunk = 2 }),
    tg.nn.Linear(OUT, OUT, { name = "b", chunk = 2 }),
    name = "net", chunk = 2,
  }
end

-- Every hook call: {name, microbatch, chunk, step}.
local function watch(m, log)
  local _, id = m:register_forward_pre_hook(function(mod, info)
    log[#log + 1] = { name = mod.name, mb = info.microbatch, chunk = info.chunk, step = info.step }
  end)
  return id
end

local function same(a, b) return tg.allclose(a, b, 0, 0) end

-- Eager: order, info, and "before": a hook that sets a's weight changes this very forward's output.
do
  local m = net()
  local a, b = m:children()[1], m:children()[2]
  local log = {}
  watch(m, log); watch(a, log); watch(b, log)
  local s = tg.step_begin { microbatches = 2 }
  m:forward(X, 1); m:forward(X, 2)
  m:drop_saved()
  tg.step_end()
  t.is(#log, 6, "eager: each of the three modules' pre-hooks ran once per forward (2 microbatches)")
  t.is_deeply({ log[1].name, log[2].name, log[3].name }, { "net", "a", "b" }, "eager: pre-hooks run in forward order, "
    .. "the composite before its children")
  t.ok(log[4].mb == 2 and log[4].chunk == 2 and log[4].step == s, "eager: info has the microbatch, the module's chunk "
    .. "and the open step")
  local outside = {}
  watch(a, outside)
  a:forward(X); a:drop_saved()
  t.ok(outside[1].step == 0 and outside[1].mb == 1, "eager: outside a step the info says step 0, microbatch 1")

  local w = a:parameters()[1]
  local ref_m = net()
  ref_m:parameters()[1].data:fill_(0.25)
  local want = ref_m:forward(X); ref_m:drop_saved()
  a:register_forward_pre_hook(function() w.data:fill_(0.25) end)
  local got = m:forward(X); m:drop_saved()
  t.ok(same(got, want), "eager: a weight the pre-hook writes is the weight the forward uses")
end

-- Graphed: no pre-hook runs in warm-up or capture; every F replay runs them first, and what they write is read
-- by that replay (not a value baked in at capture).
do
  local m = net()
  local a = m:children()[1]
  local log = {}
  watch(a, log)
  local w = a:parameters()[1]
  local value = 0.5
  a:register_forward_pre_hook(function() w.data:fill_(value) end)
  local g = tg.graph.make_graphed(m, { sample = X, microbatches = 2 })
  t.is(#log, 0, "graphed: no pre-hook runs during warm-up and capture")
  local ref_m = net()
  local outs = {}
  for step = 1, 2 do
    tg.step_begin { microbatches = 2 }
    for mb = 1, 2 do
      value = step + mb / 4
      outs[mb] = g:forward(X, mb):clone()
    end
    for mb = 2, 1, -1 do g:backward(tg.ones({ ROWS, OUT }), mb) end
    tg.step_end()
    local okall = true
    for mb = 1, 2 do
      ref_m:parameters()[1].data:fill_(step + mb / 4)
      local want = ref_m:forward(X); ref_m:drop_saved()
      okall = okall and same(outs[mb], want)
    end
    t.ok(okall, "graphed step " .. step .. ": each F replay uses the weight its pre-hook wrote just before it")
  end
  t.is(#log, 4, "graphed: the pre-hook of a child of the chunk ran once per F replay (2 steps x 2 microbatches)")
  t.ok(log[3].mb == 1 and log[4].mb == 2 and log[4].chunk == 2, "graphed: replays give the microbatch and chunk")
  g:free()
end

-- Plain capture: the pre-hooks of captured forwards run before each replay, with the replay's step.
do
  local m = tg.nn.Linear(IN, OUT, { name = "fc" })
  local log = {}
  watch(m, log)
  local x = X:clone()
  local graph = tg.stream.capture(function() m:forward(x, 1); m:backward(tg.ones({ ROWS, OUT }), 1) end,
    { pool = tg.pool() })
  t.is(#log, 0, "plain capture: no pre-hook runs while capturing")
  local s = tg.step_begin { microbatches = 1 }
  graph:replay()
  tg.step_end()
  t.ok(#log == 1 and log[1].step == s and log[1].mb == 1, "plain capture: the replay ran the pre-hook with the "
    .. "replay's step and the captured microbatch")
end

-- A failing pre-hook aborts the forward before it runs and says which hook of which module failed; removal.
do
  local m = net()
  local a = m:children()[1]
  local runs = 0
  local self, id = a:register_forward_pre_hook(function() runs = runs + 1; error("gather failed") end)
  t.ok(rawequal(self, a) and math.type(id) == "integer",
    "register_forward_pre_hook returns the module and an integer id (the handle remove_forward_pre_hook takes)")
  t.error_like(function() m:forward(X) end, "forward pre%-hook 1 of Linear 'a' %(microbatch 1%).*gather failed",
    "a failing pre-hook's error names the hook, the module and the microbatch")
  a:remove_forward_pre_hook(id)
  t.lives_ok(function() m:forward(X); m:drop_saved() end, "after remove_forward_pre_hook the forward runs")
  t.is(runs, 1, "a removed pre-hook does not run again")
  t.error_like(function() a:remove_forward_pre_hook(id) end, "Linear 'a'.*no pre%-hook with id " .. id,
    "removing it twice names the module and the id")
  t.error_like(function() a:register_forward_pre_hook(42) end, "function expected",
    "a pre-hook must be a function")
end

t.done_testing()
