-- lifetimes-across-the-lua-boundary.lua — objects closed or collected while the engine still uses them: closing a stream
-- inside its own capture or a pool while it is pushed is refused, naming it; collecting them there (or calling their
-- __gc) leaves them alive until the capture or scope ends; freeing a graphed set from its own hooks or a schedule's
-- callbacks is refused, and a module's __gc from its own hook waits for its call to return; a captured graph keeps
-- alive the storages and pools it reads and writes, so its replay after the script closed and collected them still
-- computes the right values.
local tg = require "tegraph"
local tap = require "tap"

-- a stream closed inside its own capture callback
local s = tg.stream.new("side")
local x = tg.zeros { 4 }
tap.error_like(function() tg.stream.capture(function() x:fill_(1); s:close() end, { stream = s }) end,
  "lifetimes%-across%-the%-lua%-boundary%.lua:%d+: stream 'side' is capturing: close it after its capture ends",
  "closing a stream inside its own capture is refused, naming the stream")
tap.ok(not s:capturing(), "... the capture ended anyway")
tap.lives_ok(function() s:close() end, "... and the stream closes after it")
do
  local ok = pcall(function()
    tg.stream.capture(function() local z <close> = tg.stream.new("scoped") end)
  end)
  tap.ok(ok, "a stream that is not capturing closes inside another stream's capture")
end

-- a pool closed inside p:scope(fn) and inside a capture that pushes it
local p = tg.pool()
tap.error_like(function() p:scope(function() local _ = tg.zeros { 4 }; p:close() end) end,
  "pool is in use by pool:scope or a capture %(pool =%): close it after that returns",
  "closing a pool inside its scope is refused")
tap.lives_ok(function() p:scope(function() return tg.zeros { 4 } end) end, "... the pool still works after")
local p2 = tg.pool()
tap.error_like(function() tg.stream.capture(function() local _ = tg.zeros { 4 }; p2:close() end, { pool = p2 }) end,
  "pool is in use by pool:scope or a capture", "closing a pool inside a capture that uses it is refused")
tap.error_like(function() p2:scope(function() local q <close> = p2 end) end, "pool is in use",
  "a <close> variable on a pushed pool is refused too")
tap.lives_ok(function() p2:close() end, "... and the pool closes after its scope")

-- a stream or pool whose only reference is the capture's options table, dropped and collected inside the capture:
-- the capture holds them until it ends
do
  local y, one = tg.zeros { 64 }, tg.ones { 64 }
  local opts = { stream = tg.stream.new("victim") }
  local g
  tap.lives_ok(function()
    g = tg.stream.capture(function()
      y:copy_(one)
      opts.stream = nil
      collectgarbage(); collectgarbage()
      y:add_(one)
    end, opts)
  end, "a capture's stream dropped from its options and collected inside the capture: the capture still ends on it")
  y:fill_(0)
  g:replay()
  tap.is(y:totable()[64], 2, "... and its graph replays what was captured")
  local popts = { pool = tg.pool() }
  local tmp
  tap.lives_ok(function()
    g = tg.stream.capture(function()
      popts.pool = nil
      collectgarbage(); collectgarbage()
      tmp = tg.zeros { 1024 } -- from the pushed pool
      tmp:narrow(1, 64):copy_(one)
    end, popts)
  end, "a capture's pool dropped from its options and collected inside the capture still gives its memory")
  collectgarbage(); collectgarbage()
  tmp:fill_(0)
  g:replay()
  tap.is(tmp:totable()[64], 1, "... and the graph keeps that pool for its replays")
end

-- __gc called directly (getmetatable) on a stream inside its own capture, or on a pool inside its scope: put off, not
-- a free under the running capture or scope
do
  local s = tg.stream.new("side")
  local y = tg.zeros { 4 }
  tap.lives_ok(function()
    tg.stream.capture(function() y:add_(y); getmetatable(s).__gc(s); collectgarbage() end, { stream = s })
  end, "a stream's __gc inside its own capture does not end or break the capture")
  tap.is(tostring(s), "tegraph.Stream (closed)", "... the stream is closed for the script (freed when the capture ended)")
  local q = tg.pool()
  local t
  tap.lives_ok(function()
    q:scope(function() getmetatable(q).__gc(q); collectgarbage(); t = tg.zeros { 256 }; t:fill_(5) end)
  end, "a pool's __gc inside its own scope does not free it under the scope: later tensors still come from it")
  tap.is(t:totable()[256], 5, "... and those tensors stay valid after the scope")
  tap.error_like(function() q:stats() end, "pool used after close", "... the pool is closed for the script")
end

-- a graphed set freed from its own hooks (a forward pre-hook, a wgrad hook) or from a schedule's callback: refused,
-- naming the call that runs; the set works and frees after
do
  tg.manual_seed(1)
  local x = tg.randn { 2, 4 }
  local lin = tg.nn.Linear(4, 3)
  local set = tg.graph.make_graphed(lin, { sample = x })
  local armed, where = nil, nil
  lin:register_forward_pre_hook(function() if armed == "pre" then armed = nil; set:free(); collectgarbage() end end)
  lin:register_wgrad_hook(function() if armed == "wgrad" then armed = nil; set:free(); collectgarbage() end end)
  armed = "pre"
  tg.step_begin { microbatches = 1 }
  tap.error_like(function() return set:forward(x, 1) end,
    "forward pre%-hook 1 of Linear .*graphed set: cannot free it during its forward of chunk 1 %(from a hook",
    "freeing a graphed set from a forward pre-hook of its replay is refused, naming the call")
  local y
  tap.lives_ok(function() y = set:forward(x, 1) end, "... and the set replays after")
  armed = "wgrad"
  tap.error_like(function() return set:backward(tg.ones { 2, 3 }, 1) end,
    "wgrad hook 1 of weight .*graphed set: cannot free it during its backward of chunk 1",
    "freeing a graphed set from a wgrad hook that its backward replay fires is refused")
  armed = nil
  pcall(tg.step_end) -- the refused hook left its parameter unfired: the step's hook check says so
  tap.lives_ok(function() set:free() end, "... and the set frees once its calls have returned")
  tap.error_like(function() return set:forward(x, 1) end, "used after its set was freed", "... after which it refuses calls")

  -- graphed in place: the model's own backward replays the set, whose wgrad hook frees it
  local inner = tg.nn.Linear(4, 3, { name = "inner" })
  local model = tg.nn.Sequential { tg.nn.Linear(4, 4), inner }
  local iset = tg.graph.make_graphed(inner, { sample = tg.randn { 2, 4 }, in_place = true })
  inner:register_wgrad_hook(function() if armed == "in place" then armed = nil; iset:free(); collectgarbage() end end)
  tg.step_begin { microbatches = 1 }
  model:forward(x, 1)
  armed = "in place"
  tap.error_like(function() return model:backward(tg.ones { 2, 3 }, 1) end,
    "graphed set: cannot free it during its backward of chunk 1",
    "freeing an in-place graphed set from a hook its replay fires (inside the model's backward) is refused")
  pcall(tg.step_end)
  tap.lives_ok(function() iset:free() end, "... and it frees after, the model running eagerly again")

  local S = require "tegraph.schedule"
  local plan = S.one_f_one_b { stages = 2, microbatches = 2 }
  local chunks = { tg.nn.Linear(4, 4, { chunk = 1 }), tg.nn.Linear(4, 4, { chunk = 2 }) }
  local xs, dys = { tg.randn { 2, 4 }, tg.randn { 2, 4 } }, { tg.randn { 2, 4 }, tg.randn { 2, 4 } }
  local graphed = S.make_graphed(plan, chunks, { samples = { xs[1], xs[1] }, warmup = 1 })
  local calls = 0
  tap.error_like(function()
    S.execute(plan, { chunks = chunks, graphed = graphed, loss_grad = dys, inputs = function(mb)
      calls = calls + 1
      if calls == 2 then graphed[1]:free(); collectgarbage() end
      return xs[mb]
    end })
  end, "inputs function: .*graphed set: cannot free it during a schedule run %(tg%.sched%.run%) using it",
    "freeing a graphed set from a schedule's callback while the schedule runs it is refused")
  tap.lives_ok(function() graphed[1]:free() end, "... and it frees after the run")
end

-- a module's __gc called (getmetatable) from its own forward pre-hook: the module stays until its call returns
do
  local x = tg.ones { 2, 4 }
  local lin = tg.nn.Linear(4, 3)
  local ref = lin:forward(x):totable()
  lin:register_forward_pre_hook(function(m) getmetatable(m).__gc(m); collectgarbage() end)
  local y
  tap.lives_ok(function() y = lin:forward(x) end, "a module whose own pre-hook calls its __gc finishes its forward")
  tap.is(y:totable()[2][3], ref[2][3], "... with the module's result")
  tap.error_like(function() return lin:forward(x) end, "module is not initialised", "... and is closed for the script after")
  -- a child the parent keeps: its hook gets a working box for it again on the next call
  local child = tg.nn.Linear(4, 3, { name = "kept" })
  local seq = tg.nn.Sequential { child }
  local names = {}
  child:register_forward_pre_hook(function(m) names[#names + 1] = m.name; getmetatable(m).__gc(m) end)
  child = nil
  tap.lives_ok(function() seq:forward(x); seq:forward(x) end, "a child module whose hook calls its __gc runs again")
  tap.is(table.concat(names, ","), "kept,kept", "... and its hook gets a usable module each time, not the closed box")
end

-- tensors closed and collected before g:replay(): the graph holds their storages
local n = 1024
local src = tg.tensor((function() local t = {} for i = 1, n do t[i] = i end return t end)())
local dst = tg.zeros { n }
local g = tg.stream.capture(function() dst:copy_(src); dst:add_(src) end)
local keep = dst:view { n } -- a view of the destination's storage: reads what the replay wrote
src:close(); src = nil
dst:close(); dst = nil
collectgarbage(); collectgarbage()
local junk = {}
for i = 1, 64 do junk[i] = tg.full({ n }, -1) end -- memory the freed storages would have gone to
g:replay()
local got = keep:totable()
tap.is(got[1], 2, "replay after the source and destination were closed reads and writes their storages (first)")
tap.is(got[n], 2 * n, "... (last)")

-- graph memory from a pool that the script closed: the graph keeps the pool
local pool = tg.pool()
local a = tg.full({ 8 }, 3)
local b
local g2 = tg.stream.capture(function()
  b = tg.zeros { 8 }
  b:copy_(a)
  b:mul_(a)
end, { pool = pool })
local bview = b:view { 8 }
a:close(); b:close(); pool:close(); a, b, pool = nil, nil, nil
collectgarbage(); collectgarbage()
g2:replay()
tap.is(bview:totable()[8], 9, "a graph keeps the pool its temporaries came from after the pool was closed")
g2:close()
tap.is(bview:totable()[1], 9, "... and its memory stays valid for views the script still holds")

-- an event recorded inside a capture and closed before the replays: the graph keeps it
local ev = tg.stream.event()
local hits = tg.zeros { 4 }
local g3 = tg.stream.capture(function() hits:add_(hits); ev:record() end)
ev:close(); ev = nil
collectgarbage(); collectgarbage()
tap.lives_ok(function() g3:replay(); g3:replay() end, "a graph that recorded an event replays after the script closed the event")
g3:close()

-- closing the graph releases what it held: a closed graph cannot be replayed
g:close()
tap.error_like(function() g:replay() end, "graph used after close", "a closed graph refuses replay")

-- a hook closing what the running call uses: the call keeps its own handles, the graph goes after its replay
do
  local m = tg.nn.Linear(4, 4, { name = "pre" })
  local x = tg.randn({ 2, 4 })
  local want = m:forward(x, 1):totable()
  m:drop_saved()
  local _, h = m:register_forward_pre_hook(function() x:close() end)
  local ok, y = pcall(function() return m:forward(x, 1) end)
  tap.ok(ok and y:max_abs_diff(tg.tensor(want)) == 0, "a forward pre-hook that closes the input: the forward reads it all the same")
  m:drop_saved()
  m:remove_forward_pre_hook(h)
  local dy = tg.randn({ 2, 4 })
  m:forward(tg.randn({ 2, 4 }), 1)
  for _, p in ipairs(m:parameters()) do p:register_hook(function() dy:close() end) end
  tap.lives_ok(function() m:backward(dy, 1) end, "a wgrad hook that closes dy during the backward")

  local lin = tg.nn.Linear(4, 4, { name = "replayed" })
  local gg
  local fired = 0
  for _, p in ipairs(lin:parameters()) do
    p:register_hook(function() fired = fired + 1; if gg then gg:close() end end)
  end
  local xx, dyy = tg.randn({ 2, 4 }), tg.randn({ 2, 4 })
  tg.step_begin { microbatches = 1 }
  gg = tg.stream.capture(function() lin:forward(xx, 1); lin:backward(dyy, 1) end, { pool = tg.pool() })
  tg.step_end()
  fired = 0
  tg.step_begin { microbatches = 1 }
  tap.lives_ok(function() gg:replay() end, "a captured graph closed by a hook of its own replay finishes the replay")
  tg.step_end()
  tap.is(fired, 2, "... and every hook of the replay fired")
  tap.error_like(function() gg:replay() end, "graph used after close", "... then the graph is closed")
end
tap.done_testing()
