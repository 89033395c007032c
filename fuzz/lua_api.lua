-- lua_api.lua — fuzz driver: the input is a program of calls on a few slots of objects (tensors,
-- views, pools, captured graphs, modules with hooks, steps); each byte picks a call and its operands.
-- A Lua error is a refused call (the program goes on); crashes, aborts and sanitizer reports are
-- findings. Objects are dropped and collected at the end of every program.
local tg = require "tegraph"

local N = 4 -- slots per kind

return function(s)
  local i = 0
  local function byte()
    i = i + 1
    return s:byte(i) or 0
  end
  local function slot() return byte() % N + 1 end
  local function dim()
    local b = byte()
    -- sizes the library must refuse or fail cleanly on (2^45 f32: more than any allocator gives)
    if b >= 250 then return ({ 0, -1, 2 ^ 45, 2 ^ 40, 2 ^ 62 + 1, 3 })[b - 249] end
    return b % 5 + 1
  end
  local T, P, G, M = {}, {}, {}, {} -- tensors, pools, graphs, modules
  local hooks_fired = 0
  local calls = {
    function() T[slot()] = tg.zeros({ dim(), dim() }) end,
    function() T[slot()] = tg.randn({ dim() }) end,
    function() T[slot()] = tg.arange(dim()) end,
    function() local t = T[slot()]; if t then T[slot()] = t:view(dim(), dim()) end end,
    function() local t = T[slot()]; if t then T[slot()] = t:narrow(dim(), dim()) end end,
    function() local t = T[slot()]; if t then t:close() end end,
    function() T[slot()] = nil end,
    function() local a, b = T[slot()], T[slot()]; if a and b then T[slot()] = a:add(b) end end,
    function() local a, b = T[slot()], T[slot()]; if a and b then a:copy_(b) end end,
    function() local a, b = T[slot()], T[slot()]; if a and b then T[slot()] = a:matmul(b) end end,
    function() P[slot()] = tg.pool("cpu") end,
    function() local p = P[slot()]; if p then p:close() end end,
    function() -- capture a few of the calls above (into a pool, or none)
      local p = P[slot()]
      local k = byte() % 3 + 1
      local a, b = T[slot()], T[slot()]
      G[slot()] = tg.stream.capture(function()
        for _ = 1, k do
          if a and b then a:add_(b) end
          if a then T[slot()] = a:mul(a) end
        end
      end, { device = "cpu", pool = p })
    end,
    function() local g = G[slot()]; if g then g:replay() end end,
    function() local g = G[slot()]; if g then g:close() end end,
    function() local g, p = G[slot()], P[slot()]; if g and p then g:keep_pool(p) end end,
    function() M[slot()] = tg.nn.Linear(dim(), dim()) end,
    function()
      local m = M[slot()]
      if m then m:register_wgrad_hook(function() hooks_fired = hooks_fired + 1 end) end
    end,
    function() local m, x = M[slot()], T[slot()]; if m and x then T[slot()] = m:forward(x, byte() % 3 + 1) end end,
    function() local m, dy = M[slot()], T[slot()]; if m and dy then T[slot()] = m:backward(dy, byte() % 3 + 1) end end,
    function() local m = M[slot()]; if m then m:backward_dw(byte() % 3 + 1) end end,
    function() tg.step_begin { microbatches = byte() % 3 + 1 } end,
    function() tg.step_end() end,
    function() local m, x = M[slot()], T[slot()]; if m and x then G[slot()] = tg.graph.make_graphed(m, { sample = x, microbatches = byte() % 2 + 1 }) end end,
    function() local g, x = G[slot()], T[slot()]; if g and g.forward and x then T[slot()] = g:forward(x) end end,
    function() collectgarbage() end,
  }
  while i < #s and i < 512 do
    pcall(calls[byte() % #calls + 1])
  end
  pcall(tg.step_end)
  if tg.stream.capturing("cpu") then fuzz_finding("a capture stayed open after its function returned or failed") end
  T, P, G, M = nil, nil, nil, nil
  collectgarbage()
  collectgarbage()
end
