-- graph-replay-on-stream-free-and-delay-switch.lua — delayed wgrad switched on and off at run time gives the same
-- gradients as either fixed setting and is refused while wgrad is queued, inside a graphed set, or for a Lua module
-- without backward_dw; g:free() releases a graphed set's graphs and its pool memory at once; graphed calls and
-- graph:replay run on a given stream after waiting for an event, with hooks firing on that stream.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, ROWS, M = 4, 3, 2
tg.manual_seed(21)
local xs, dys = {}, {}
for m = 1, M do xs[m] = tg.randn({ ROWS, D }); dys[m] = tg.randn({ ROWS, D }) end

local function model()
  tg.manual_seed(5)
  return tg.nn.Sequential { tg.nn.Linear(D, D, { name = "a" }), tg.nn.Linear(D, D, { name = "b" }), name = "s" }
end

local function grads(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do out[#out + 1] = p.grad:totable() end
  return out
end

-- One step; W right after each B when the model delays.
local function step(m)
  tg.step_begin { microbatches = M }
  for mb = 1, M do m:forward(xs[mb], mb) end
  for mb = M, 1, -1 do
    m:backward(dys[mb], mb)
    if m:need_backward_dw() then m:backward_dw(mb) end
  end
  tg.step_end()
  return grads(m)
end

-- ------------------------------------------------------------------ set_delay_wgrad
do
  local ref = step(model())
  local m = model()
  local fired = 0
  m:register_wgrad_hook(function() fired = fired + 1 end)
  t.is_deeply(step(m), ref, "delay off: gradients as the reference")
  t.ok(m:set_delay_wgrad(true) == m, "set_delay_wgrad(true) returns the module")
  t.ok(m.delay_wgrad and m:children()[1].delay_wgrad and m:children()[2].delay_wgrad,
    "the composite and its children delay wgrad now")
  tg.step_begin { microbatches = M }
  for mb = 1, M do m:forward(xs[mb], mb) end
  m:backward(dys[M], M)
  t.ok(m:need_backward_dw(), "a backward after switching on queues its wgrad")
  t.error_like(function() m:set_delay_wgrad(false) end,
    "graph%-replay%-on%-stream%-free%-and%-delay%-switch%.lua:%d+: Sequential 's' set_delay_wgrad: the wgrad of microbatch 2 is still queued on Linear '[ab]'",
    "switching off while wgrad is queued is refused, naming the module and the microbatch")
  t.ok(m.delay_wgrad, "and nothing changed")
  m:backward_dw(M)
  m:backward(dys[1], 1)
  m:backward_dw(1)
  tg.step_end()
  t.is_deeply(grads(m), ref, "delay on: gradients as the reference")
  m:set_delay_wgrad(false)
  t.ok(not m.delay_wgrad and not m:children()[1].delay_wgrad, "switched off again, children too")
  t.is_deeply(step(m), ref, "delay off again: gradients as the reference")
  t.is(fired, 3 * M * 4, "hooks fired once per parameter and microbatch in each of the three steps")
  t.error_like(function() m:set_delay_wgrad(1) end, "bad argument #1 to 'set_delay_wgrad' %(boolean expected",
    "set_delay_wgrad takes a boolean")

  local lua_mod = tg.nn.Module { params = {}, forward = function(self, x) return x end,
    backward = function(self, dy) return dy end }
  local mixed = tg.nn.Sequential { tg.nn.Linear(D, D, { name = "c" }), lua_mod, name = "mixed" }
  t.error_like(function() mixed:set_delay_wgrad(true) end, "set_delay_wgrad: Module .*has no backward_dw, so its wgrad cannot be delayed",
    "a Lua module without backward_dw cannot delay: refused, named")
  t.ok(not mixed:children()[1].delay_wgrad, "and the Linear beside it was left as it was")
end

-- ------------------------------------------------------------------ g:free()
do
  local pool = tg.pool()
  local c1, c2 = model(), model()
  local g = tg.graph.make_graphed({ c1, c2 }, { sample = { xs[1], xs[1] }, microbatches = 1, pool = pool, warmup = 1 })
  local used = pool:stats().used
  t.ok(used > 0, "the set's graphs and static buffers hold pool memory (" .. used .. " bytes)")
  t.error_like(function() c1:set_delay_wgrad(true) end, "set_delay_wgrad: it is part of a graphed set",
    "switching delay on a module of a graphed set is refused")
  t.error_like(function() c1:children()[1]:set_delay_wgrad(true) end, "Linear 'a' set_delay_wgrad: it is part of a graphed set",
    "and on a module inside a chunk too")
  tg.step_begin { microbatches = 1 }
  local y = g[1]:forward(xs[1], 1)
  y = g[2]:forward(y, 1)
  local dx = g[2]:backward(dys[1], 1)
  g[1]:backward(dx, 1)
  tg.step_end()
  y, dx = nil, nil
  g:free()
  collectgarbage(); collectgarbage()
  t.is(pool:stats().used, 0, "after g:free() the pool holds nothing of the set")
  t.error_like(function() g[1]:forward(xs[1], 1) end, "used after its set was freed", "a freed set's callables fail")
  t.error_like(function() g[2]:backward(dys[1], 1) end, "used after its set was freed", "every chunk's callable fails")
  t.is(c1.exec_mode, "eager", "the chunks run eagerly again")
  t.lives_ok(function() c1:set_delay_wgrad(true); c1:set_delay_wgrad(false) end, "and can switch delay again")
  t.lives_ok(function() g:free() end, "freeing twice is harmless")
  local single = tg.graph.make_graphed(model(), { sample = xs[1], warmup = 1 })
  single:free()
  t.error_like(function() single:forward(xs[1], 1) end, "used after its set was freed", "a single callable frees its set too")
end

-- ------------------------------------------------------------------ replay on a stream after an event
do
  local m = model()
  local s, ev = tg.stream.new("side"), tg.stream.event()
  local hook_streams = {}
  m:register_wgrad_hook(function() hook_streams[#hook_streams + 1] = tostring(tg.stream.current()) end)
  local g = tg.graph.make_graphed(m, { sample = xs[1], warmup = 1 })
  local ref = step(model())
  local ref1 -- one-microbatch reference
  do
    local r = model()
    tg.step_begin { microbatches = 1 }
    r:forward(xs[1], 1); r:backward(dys[1], 1)
    tg.step_end()
    ref1 = grads(r)
  end
  t.ok(ref ~= nil, "two-microbatch reference computed")
  ev:record()
  t.ok(ev:query(), "an event recorded on the CPU's current stream is done")
  tg.step_begin { microbatches = 1 }
  local y = g:forward(xs[1], 1, { stream = s, wait = ev })
  g:backward(dys[1], 1, { stream = s, wait = ev })
  tg.step_end()
  local done = tg.stream.event()
  done:record(s) -- the replays ran on s: wait for them before reading the gradients
  done:sync()
  t.is_deeply(grads(m), ref1, "replays on a given stream after an event give the eager gradients")
  local on_side = #hook_streams > 0
  for _, name in ipairs(hook_streams) do on_side = on_side and name:find("'side'", 1, true) ~= nil end
  t.ok(on_side, "the hooks of the replay fired with that stream current (" .. (hook_streams[1] or "none") .. ")")
  t.ok(tostring(tg.stream.current()):find("'side'", 1, true) == nil, "the current stream is restored after the call")
  t.ok(y ~= nil, "forward on a stream returns the static output")

  -- the replay goes to the given stream: a stream that is capturing refuses it, by name
  local busy = tg.stream.new("busy")
  local bad
  local cg = tg.stream.capture(function()
    tg.step_begin { microbatches = 1 }
    bad = select(2, pcall(g.forward, g, xs[1], 1, { stream = busy }))
    tg.hook_check(false); tg.step_end(); tg.hook_check(true)
  end, { stream = busy })
  t.like(tostring(bad), "replay on stream 'busy' while it is capturing", "the replay was issued on the given stream")
  t.error_like(function() g:forward(xs[1], 1, { stream = s, when = ev }) end, "graphed forward: unknown option 'when' %(known: stream, wait%)",
    "an unknown replay option is refused, named")
  t.error_like(function() g:forward(xs[1], 1, { wait = s }) end, "option 'wait' must be an event",
    "wait must be an event")
  t.error_like(function() g:forward(xs[1], 1, 5) end, "graphed forward: options must be a table", "options must be a table")
  g:reset()

  -- graph:replay(stream, event)
  local a, b = tg.tensor({ 1, 2 }), tg.zeros({ 2 })
  local pg = tg.stream.capture(function() b:axpby_(1, a, 1) end, { stream = s })
  ev:record(s)
  pg:replay(s, ev)
  s:sync()
  t.is_deeply(b:totable(), { 1, 2 }, "graph:replay(stream, event) runs the graph on the stream")
  t.ok(s:wait(ev) == s, "stream:wait(event) returns the stream")
  t.error_like(function() pg:replay(s, a) end, "bad argument #2 to 'replay' %(tegraph%.Event expected", "replay's event argument is checked")
end

t.done_testing()
