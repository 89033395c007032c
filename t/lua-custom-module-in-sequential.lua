-- Layers written in Lua (tables with forward/backward/backward_dw over tegraph.ops) work inside Sequential:
-- same values and gradients as the C modules, their parameters' hooks fire once per microbatch, errors carry FILE:LINE.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local tap = require "tap"

local ops = tg.ops
tg.manual_seed(11)
local M = 2

local function copy_params(dst, src)
  local d, s = dst:parameters(), src:parameters()
  for i = 1, #d do d[i].data:copy_(s[i].data) end
end

-- A LayerNorm written in Lua with the ops bindings; wgrad in backward_dw, overwriting or adding as the engine says.
local function lua_layernorm(c, name)
  local g = nn.Parameter(name .. ".weight", tg.ones({ c }))
  local b = nn.Parameter(name .. ".bias", tg.zeros({ c }))
  local self = { name = name, params = { g, b }, saved = {}, pending = {} }
  function self:forward(x, mb)
    local y, mean, rstd = ops.layernorm_forward(x, g.data, b.data, 1e-5)
    self.saved[mb] = { x, mean, rstd }
    return y
  end
  function self:backward(dy, mb)
    local s = self.saved[mb]
    self.saved[mb] = nil
    self.pending[mb] = { dy, s[1], s[2], s[3] }
    return ops.layernorm_backward(dy, s[1], g.data, s[2], s[3])
  end
  function self:backward_dw(mb, accumulate)
    local p = self.pending[mb]
    self.pending[mb] = nil
    ops.layernorm_backward_dw(g.wgrad, b.wgrad, p[1], p[2], p[3], p[4], accumulate and 1 or 0)
  end
  return self
end

-- A parameterless layer as a bare table (wrapped by Sequential itself).
local Double = {
  forward = function(_, x) return x * 2 end,
  backward = function(_, dy) return dy * 2 end,
}

local function build(lua, delay)
  local a, ln, b
  if lua then
    a = nn.LuaLinear(6, 8, { name = "a", delay_wgrad = delay })
    ln = lua_layernorm(8, "ln")
    ln.delay_wgrad = delay
  else
    a = nn.Linear(6, 8, { name = "a" })
    ln = nn.LayerNorm(8, { name = "ln" })
  end
  b = nn.Linear(8, 4, { name = "b" })
  return nn.Sequential { a, Double, ln, b, name = lua and "lua" or "c" }
end

local ref = build(false)
local function run(model, xs, dys, hooks)
  local outs, dxs = {}, {}
  tg.step_begin { microbatches = M }
  for mb = 1, M do
    outs[mb] = model:forward(xs[mb], mb)
    dxs[mb] = model:backward(dys[mb], mb)
  end
  while model:need_backward_dw() do model:backward_dw() end
  tg.step_end()
  return outs, dxs
end

local xs, dys = {}, {}
for mb = 1, M do
  xs[mb] = tg.randn({ 2, 3, 6 })
  dys[mb] = tg.randn({ 2, 3, 4 })
end
local ref_out, ref_dx = run(ref, xs, dys)

for _, delay in ipairs { false, true } do
  local mode = delay and "delayed" or "not delayed"
  local model = build(true, delay)
  copy_params(model, ref)
  local params = model:parameters()
  tap.is(#params, 6, mode .. ": Sequential lists the Lua layers' parameters (a.weight, a.bias, ln.weight, ln.bias) and b's")
  local fired, phase = {}, "F"
  model:register_wgrad_hook(function(p, info)
    local k = p.name .. "@" .. info.microbatch
    fired[k] = (fired[k] or 0) + 1
    if p.name:match("^a%.") or p.name:match("^ln%.") then
      fired[p.name .. ":phase"] = fired[p.name .. ":phase"] or phase
    end
  end)
  local outs, dxs = {}, {}
  tg.step_begin { microbatches = M }
  for mb = 1, M do
    phase = "F"
    outs[mb] = model:forward(xs[mb], mb)
    phase = "B"
    dxs[mb] = model:backward(dys[mb], mb)
  end
  phase = "W"
  while model:need_backward_dw() do model:backward_dw() end
  tap.lives_ok(function() tg.step_end() end, mode .. ": the step's hook check passes")
  local worst = 0
  for mb = 1, M do
    local _, d1 = tg.allclose(outs[mb], ref_out[mb])
    local _, d2 = tg.allclose(dxs[mb], ref_dx[mb])
    worst = math.max(worst, d1, d2)
  end
  tap.ok(worst < 1e-5, string.format("%s: outputs and input gradients match the C modules (max diff %.2g)", mode, worst))
  local gworst = 0
  local rp = ref:parameters()
  for i, p in ipairs(params) do
    local _, d = tg.allclose(p.wgrad, rp[i].wgrad)
    gworst = math.max(gworst, d)
  end
  tap.ok(gworst < 1e-5, string.format("%s: all weight gradients match the C modules (max diff %.2g)", mode, gworst))
  local once = true
  for _, p in ipairs(params) do
    for mb = 1, M do once = once and fired[p.name .. "@" .. mb] == 1 end
  end
  tap.ok(once, mode .. ": every parameter's hook fired once per microbatch, the Lua layers' included")
  local want = delay and "W" or "B"
  tap.ok(fired["a.weight:phase"] == want and fired["ln.bias:phase"] == want,
    mode .. ": the Lua layers' hooks fired in " .. (delay and "backward_dw" or "backward"))
end

-- The Module wrapping a table shows the table's fields and writes to it.
do
  local t = lua_layernorm(3, "f")
  local m = nn.Module(t)
  tap.ok(rawequal(nn.Module(t), m), "wrapping the same table twice gives the same Module")
  tap.is(m.name, "f", "m.name comes from the table")
  m.custom = 5
  tap.is(t.custom, 5, "fields set on the Module land in the table")
  tap.is(m.type, "Module", "its type is Module")
end

-- Errors inside Lua layers name the layer and carry the Lua FILE:LINE.
do
  local Broken = {
    name = "broken",
    forward = function(_, x) error("broken forward on " .. x:dim(1) .. " rows") end,
    backward = function(_, dy) return dy end,
  }
  local m = nn.Sequential { nn.Linear(2, 2), Broken }
  tap.error_like(function() m:forward(tg.ones({ 3, 2 })) end,
    "lua%-custom%-module%-in%-sequential%.lua:%d+: broken forward on 3 rows", "a Lua layer's error carries its file:line")
  local Wrong = { forward = function() return "nope" end, backward = function(_, dy) return dy end }
  tap.error_like(function() nn.Sequential({ Wrong }):forward(tg.ones({ 1, 2 })) end,
    "forward returned a string, expected a tensor", "a forward that returns no tensor is reported")
  tap.error_like(function() nn.Sequential { { forward = function() end } } end, "needs forward and backward",
    "a table without backward is refused")
  tap.error_like(function() nn.Sequential { 42 } end, "entry 1 is a number", "a non-module entry is refused")
  tap.error_like(function() nn.Module { forward = function() end, backward = function() end, params = { 1 } } end,
    "params%[1%] is a number", "a params list with a non-Parameter is refused")
end

tap.done_testing()
