-- tegraph: the Lua library — the C core (tensors, streams, graphs) plus Lua-side helpers.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"

local M = {}
for k, v in pairs(core) do M[k] = v end

M.core = core
M.host = M.host or {} -- C functions a host registered (tg_runtime_register)

-- A new tensor like t (same shape, dtype, device), zero-filled.
function M.zeros_like(t, opts)
  if not core.is_tensor(t) then raise("zeros_like: t must be a tensor, got " .. type(t)) end
  if opts ~= nil and type(opts) ~= "table" then
    raise("zeros_like: options must be a table {dtype=, device=, name=}, got " .. type(opts))
  end
  opts = options.check("zeros_like", opts or {}, { "dtype", "device", "name" })
  return core.zeros(t:shape(), { dtype = opts.dtype or t.dtype, device = opts.device or t.device, name = opts.name })
end

-- Formats a shape table as "[2,3]", the way error messages do.
function M.shape_str(shape)
  return "[" .. table.concat(shape, ",") .. "]"
end

-- tg.fp8: FP8 recipes, fp8_autocast, the amax reduce (lua/tegraph/fp8.lua over core.fp8).
M.fp8 = require "tegraph.fp8"
M.fp8_autocast = M.fp8.autocast

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

-- tg.graph.graph_modules(model, names, opts) -> the graphed set (a list of callables, one per module):
-- partial capture (Megatron's --cuda-graph-modules attn|mlp). The modules under `model` whose name is one of
-- `names` or ends with "." .. one of them (e.g. {"attn", "mlp"}: every TransformerLayer's attention and MLP)
-- are graphed in place: `model` keeps running eagerly and its composites call the graphs in place of those
-- children, with the same hooks, delayed wgrad and step check. `model` is a module or a list of chunks.
-- opts: sample = a tensor (every module's input shape) or a list, one per module in forward order;
-- microbatches =; order = the model's order, a list of {op = "F"|"B"|"W", mb =, chunk = (default 1)} (default:
-- every forward, then backward and backward_dw from the last microbatch back), which becomes the modules'
-- order (a chunk's F: its graphed modules' F in forward order; B and W: in reverse); warmup =, pool =, share =.
-- The set's modules are in `set.modules`; g:free() makes them run eagerly again.
function M.graph.graph_modules(model, names, opts)
  opts = options.check("graph_modules", opts or {}, { "sample", "microbatches", "order", "warmup", "pool", "share" })
  if opts.warmup ~= nil and (math.type(opts.warmup) ~= "integer" or opts.warmup < 1) then
    raise("graph_modules: warmup must be an integer >= 1, got " .. tostring(opts.warmup))
  end
  if type(names) ~= "table" or #names == 0 then raise("graph_modules: names must be a list of module names, e.g. {\"attn\", \"mlp\"}") end
  local chunks = (type(model) == "table" and model.forward == nil) and model or { model }
  local mods, of_chunk = {}, {}
  local function wanted(name)
    for _, n in ipairs(names) do
      if name == n or name:sub(-#n - 1) == "." .. n then return true end
    end
    return false
  end
  local function walk(m, c)
    if wanted(m.name or "") then
      mods[#mods + 1] = m
      of_chunk[c][#of_chunk[c] + 1] = #mods
      return
    end
    if type(m.children) == "function" then for _, k in ipairs(m:children()) do walk(k, c) end end
  end
  for c, m in ipairs(chunks) do
    of_chunk[c] = {}
    walk(m, c)
  end
  if #mods == 0 then
    raise(string.format("graph_modules: no module under the model is named %s or ends with one of those names",
      table.concat(names, ", ")))
  end
  local nmb = opts.microbatches or 1
  local order = opts.order
  if not order then
    order = {}
    for c = 1, #chunks do
      for m = 1, nmb do order[#order + 1] = { op = "F", mb = m, chunk = c } end
    end
    for m = nmb, 1, -1 do
      for c = #chunks, 1, -1 do
        order[#order + 1] = { op = "B", mb = m, chunk = c }
        order[#order + 1] = { op = "W", mb = m, chunk = c }
      end
    end
  end
  local expanded = {}
  for i, a in ipairs(order) do
    local c = type(a) == "table" and (a.chunk or 1)
    if not c or (a.op ~= "F" and a.op ~= "B" and a.op ~= "W") or math.type(a.mb) ~= "integer" or not of_chunk[c] then
      raise(string.format("graph_modules: order[%d] must be {op = \"F\"|\"B\"|\"W\", mb = integer, chunk = 1..%d}", i, #chunks))
    end
    options.check(string.format("graph_modules: order[%d]", i), a, { "op", "mb", "chunk" })
    local list = of_chunk[c]
    local first, last, step = 1, #list, 1
    if a.op ~= "F" then first, last, step = #list, 1, -1 end
    for k = first, last, step do expanded[#expanded + 1] = { op = a.op, chunk = list[k], mb = a.mb } end
  end
  local sample = opts.sample
  if sample == nil then raise("graph_modules: opts.sample is missing (a tensor, or a list with one per module)") end
  if type(sample) ~= "table" then
    local s = {}
    for k = 1, #mods do s[k] = sample end
    sample = s
  elseif #sample ~= #mods then
    local t = {}
    for _, m in ipairs(mods) do t[#t + 1] = m.name end
    raise(string.format("graph_modules: %d sample inputs for %d modules (%s)", #sample, #mods, table.concat(t, ", ")))
  end
  local set = M.graph.make_graphed(mods, { sample = sample, microbatches = nmb, order = expanded, warmup = opts.warmup,
    pool = opts.pool, share = opts.share, in_place = true })
  set.modules = mods
  return set
end

-- tg.graph.capture_step(fn, opts) -> a captured step: full-iteration capture (Megatron's full_iteration).
-- fn runs one whole training step — the forward and backward of every microbatch, reading static input
-- buffers that a loader fills before each replay, the hook-driven reduce, the optimizer step — and is
-- captured once (tg.stream.capture) inside a step of its own, with the engine in full-iteration mode: hooks
-- and forward pre-hooks run during the capture, so their device work is in the graph, and overwrite or
-- accumulate is decided as in an eager step. step:replay([stream, event]) runs one step: step_begin, the graph
-- (its hooks do not run again on the host: the engine counts the firings the capture recorded), step_end with
-- the step check. opts: microbatches = (default 1), stream =, pool = (default: a new one). step.graph is the graph.
function M.graph.capture_step(fn, opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise("capture_step: opts must be a table {microbatches=, stream=, pool=}, got " .. type(opts))
  end
  opts = opts or {}
  options.check("capture_step", opts, { "microbatches", "stream", "pool" })
  if type(fn) ~= "function" then raise("capture_step: fn must be a function that runs one whole training step") end
  local nmb = opts.microbatches or 1
  if math.type(nmb) ~= "integer" or nmb < 1 then
    raise("capture_step: opts.microbatches must be an integer >= 1 (got " .. tostring(nmb) .. ")")
  end
  M.step_begin{ microbatches = nmb }
  M.graph.full_capture(nmb)
  local ok, g = pcall(M.stream.capture, fn, { stream = opts.stream, pool = opts.pool or M.pool() })
  M.graph.full_capture(0)
  local closed, err = pcall(M.step_end)
  if not ok then raise("capture_step: " .. tostring(g)) end
  if not closed then raise("capture_step: the captured step fails the step check: " .. tostring(err)) end
  local step = { graph = g, microbatches = nmb }
  function step.replay(self, s, ev)
    M.step_begin{ microbatches = nmb }
    local rok, rerr
    if s then rok, rerr = pcall(g.replay, g, s, ev) else rok, rerr = pcall(g.replay, g) end
    if not rok then
      pcall(M.step_end)
      raise(rerr)
    end
    M.step_end()
  end
  return step
end

-- tg.nn: the C module constructors plus the Lua helpers of tegraph/nn.lua (GPT builder, ...).
M.nn = require "tegraph.nn"

return M
