-- lua-capture-replay.lua — capture from Lua records device work that replay repeats; host code and allocation rules hold.
local tap = require "tap"
local tg = require "tegraph"

local cpu = { device = "cpu" }
local x = tg.tensor({ 1, 2, 3 }, cpu)
local y = tg.zeros({ 3 }, cpu)

-- capture y += 2x; the host-side counter runs at capture only
local host_calls = 0
tap.ok(not tg.stream.capturing("cpu"), "not capturing before capture")
local seen_capturing
local g = tg.stream.capture(function()
  host_calls = host_calls + 1
  seen_capturing = tg.stream.capturing("cpu")
  y:axpby_(2, x, 1)
end, { device = "cpu" })
tap.ok(seen_capturing, "tg.stream.capturing() is true inside capture")
tap.ok(not tg.stream.capturing("cpu"), "capture ended")
tap.is(g:size(), 1, "one command captured")
tap.is_deeply(y:totable(), { 0, 0, 0 }, "captured work did not run at capture")
g:replay()
tap.is_deeply(y:totable(), { 2, 4, 6 }, "replay runs it once")
g:replay()
g:replay()
tap.is_deeply(y:totable(), { 6, 12, 18 }, "each replay runs it again")
tap.is(host_calls, 1, "host code in the captured function ran only at capture")

-- replay uses the captured addresses: new input values flow through
x:copy_({ 10, 20, 30 })
y:fill_(0)
g:replay()
tap.is_deeply(y:totable(), { 20, 40, 60 }, "replay reads the current contents of the captured input")

-- allocation during capture fails without a pool, and capture still ends
tap.error_like(function()
  tg.stream.capture(function() return tg.zeros({ 4 }, cpu) end, { device = "cpu" })
end, "cannot allocate .*capturing.*pool", "allocating during capture is an error that says why (use a pool)")
tap.ok(not tg.stream.capturing("cpu"), "a failed capture still ends capture")

-- host reads during capture fail
tap.error_like(function()
  tg.stream.capture(function() return y:sum() end, { device = "cpu" })
end, "not capturable", "reading to the host during capture is an error")

-- errors in the captured function are raised again, with their own message
tap.error_like(function()
  tg.stream.capture(function() error("boom from the captured function") end, { device = "cpu" })
end, "boom from the captured function", "an error inside capture propagates")
tap.ok(not tg.stream.capturing("cpu"), "capture ended after the error")

-- with a pool, tensors made inside the capture come from it and live with the graph
local pool = tg.pool("cpu")
local out
local g2 = tg.stream.capture(function()
  out = x:mul(x)         -- allocates its result from the pool
  out:add_(x)
end, { device = "cpu", pool = pool })
tap.is(g2:size(), 2, "two commands captured with the pool")
local st = pool:stats()
tap.ok(st.used >= 3 * 4 and st.reserved >= st.used, "the pool holds the captured result (used " .. st.used .. ")")
x:copy_({ 1, 2, 3 })
g2:replay()
tap.is_deeply(out:totable(), { 2, 6, 12 }, "replay computes x*x + x into the pool tensor")
x:copy_({ 2, 2, 2 })
g2:replay()
tap.is_deeply(out:totable(), { 6, 6, 6 }, "and again with new inputs")

-- a graph keeps at most 8 pools: its own and 7 more; the ninth is an error, not an abort
local kept = {}
for i = 1, 7 do
  kept[i] = tg.pool("cpu")
  g2:keep_pool(kept[i])
end
tap.lives_ok(function() g2:keep_pool(kept[3]) end, "keeping a kept pool again is fine")
tap.error_like(function() g2:keep_pool(tg.pool("cpu")) end, "lua%-capture%-replay%.lua:%d+: keep_pool: a graph keeps at most 8 pools alive",
  "a ninth kept pool fails with a message naming the limit and the caller's line")
tap.error_like(function() g2:keep_pool(x) end, "bad argument #1 to 'keep_pool' %(a pool", "keep_pool of a non-pool is refused")
g2:replay()
tap.is_deeply(out:totable(), { 6, 6, 6 }, "the graph still replays after the refused pool")

-- a stream of our own
local s = tg.stream.new("side", "cpu")
tap.is(s:name(), "side", "a new stream has its name")
local cur = tg.stream.current("cpu")
tap.ok(cur ~= s, "a new stream is not the current one")
local y2 = tg.zeros({ 3 }, cpu)
local g3 = tg.stream.capture(function()
  tap.ok(tg.stream.current("cpu") == s, "the capture stream is current during capture")
  y2:add_(x)
end, { stream = s })
tap.ok(tg.stream.current("cpu") == cur, "the previous current stream is restored")
g3:replay(s)
s:sync()
tap.is_deeply(y2:totable(), { 2, 2, 2 }, "replay on the side stream")

-- closed graphs
g3:close()
tap.error_like(function() g3:replay() end, "graph used after close", "replay of a closed graph")

tap.done_testing()
