-- tegraph: the Lua library — the C core (tensors, streams, graphs) plus Lua-side helpers.
local core = require "tegraph.core"

local M = {}
for k, v in pairs(core) do M[k] = v end

M.core = core
M.host = M.host or {} -- C functions a host registered (tg_runtime_register)

-- A new tensor like t (same shape, dtype, device), zero-filled.
function M.zeros_like(t, opts)
  opts = opts or {}
  return core.zeros(t:shape(), { dtype = opts.dtype or t.dtype, device = opts.device or t.device, name = opts.name })
end

-- Formats a shape table as "[2,3]", the way error messages do.
function M.shape_str(shape)
  return "[" .. table.concat(shape, ",") .. "]"
end

-- Lua parts of the library, loaded on first use: tg.optim, tg.data, tg.progress,
-- tg.schedule, tg.reduce, tg.train, tg.text (each also require-able as "tegraph.NAME").
local lazy = { optim = true, data = true, progress = true, schedule = true, reduce = true, train = true, text = true }
setmetatable(M, {
  __index = function(t, k)
    if lazy[k] then
      local mod = require("tegraph." .. k)
      rawset(t, k, mod)
      return mod
    end
  end,
})

-- tg.nn: the C module constructors plus the Lua helpers of tegraph/nn.lua (GPT builder, ...).
M.nn = require "tegraph.nn"

return M
