-- hello.lua — a first tegraph script: tensors, a matmul, and a captured graph replayed.
-- Run: tegraph run examples/hello.lua   (or: tegraph --device cpu examples/hello.lua)
local tg = require "tegraph"
-- no options: --help says so, anything else is a usage error (exit 2)
require("tegraph.cli").parse("examples/hello.lua", {}, arg)

print("tegraph " .. tg.version .. " on " .. tg.default_device())

-- tensors and ops
local a = tg.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })         -- [2,3] f32 on the default device
local b = tg.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } })     -- [3,2]
local c = a:matmul(b)                                      -- [2,2]
print("a @ b =", c)

tg.manual_seed(42)
local w = tg.randn({ 256, 256 }, { std = 0.02, name = "w" })
print("w:", w, "max |w| =", string.format("%.4f", w:max_abs()))

-- capture y = w @ x once, replay it with new inputs in x
local x = tg.zeros({ 256, 1 })
local pool = tg.pool()
local y
local graph = tg.stream.capture(function()
  y = w:matmul(x)          -- y comes from the pool: it lives as long as the graph
end, { pool = pool })
print("captured", graph)

for step = 1, 3 do
  x:fill_(step)            -- new input, same buffer
  graph:replay()
  -- each row of y is step * sum(w[row, :])
  print(string.format("step %d: y[1] = %.5f  sum(y) = %.5f", step, y:narrow(1, 1):item(), y:sum()))
end
local expect = 3 * w:sum()
print(string.format("check: sum(y) = %.5f, 3 * sum(w) = %.5f", y:sum(), expect))
assert(math.abs(y:sum() - expect) < 1e-3 * math.max(1, math.abs(expect)), "replay computed the wrong product")
