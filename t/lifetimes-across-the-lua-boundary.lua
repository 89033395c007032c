-- lifetimes-across-the-lua-boundary.lua — objects closed or collected while the engine still uses them: closing a stream
-- inside its own capture or a pool while it is pushed is refused, naming it; collecting them there (or calling their
-- __gc) leaves them alive until the capture or scope ends; a captured graph keeps alive the storages and pools it reads
-- and writes, so its replay after the script closed and collected them still computes the right values.
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
tap.done_testing()
