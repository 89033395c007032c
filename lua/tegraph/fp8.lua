-- tegraph.fp8 (tg.fp8): FP8 training in TransformerEngine's manner — recipes, fp8_autocast, the amax reduce
-- across data-parallel ranks.
--
--   local r = tg.fp8.DelayedScaling{ margin = 0, amax_history_len = 1024, amax_compute_algo = "max",
--                                    fp8_format = "HYBRID" }        -- or tg.fp8.CurrentScaling{ fp8_format = }
--   local layer = tg.nn.TransformerLayer{ hidden_size = 768, num_attention_heads = 12, fp8 = r }
--   tg.fp8_autocast(r, function() y = model:forward(x) end)          -- modules run FP8 inside
--   tg.fp8_autocast({ enabled = false }, function() ... end)         -- and not at all inside this one
--
-- Data parallelism: with delayed scaling every rank must use the same scales, so the amaxes each rank recorded
-- in a step are reduced (max) over the ranks before the next step's first forward updates the scales:
--   local amax = tg.fp8.amax_reduce{ model = model, comm = dp }     -- after the modules ran FP8 once, or with fp8 =
--   ... step_begin, forward / backward of every microbatch, step_end ...
--   amax:reduce()                                                     -- every step, before the next forward
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"

local M = {}
for k, v in pairs(core.fp8) do M[k] = v end

-- TE's recipe.Format names.
M.Format = { HYBRID = "HYBRID", E4M3 = "E4M3" }

-- fp8_autocast(recipe, fn, ...) or fp8_autocast({ enabled = true|false, fp8_recipe = recipe }, fn, ...):
-- runs fn(...) with the modules in FP8 under recipe (enabled; without a recipe: DelayedScaling{}), or with FP8
-- off (enabled = false), whatever the modules' own fp8 option; returns fn's results. The previous setting comes
-- back afterwards, also when fn fails. Nested calls nest.
-- fn runs through core.fp8.run, where it cannot yield: the setting would stay on for good if a coroutine
-- suspended inside fn were never resumed
local function no_yield(err, who)
  if type(err) == "string" and err:find("attempt to yield across a C%-call boundary") then
    return who .. ": fn yielded (a coroutine cannot yield inside " .. who .. ", which puts its setting back after fn)"
  end
  return err
end

function M.autocast(a, fn, ...)
  local enabled, recipe
  if core.fp8.is_recipe(a) then
    enabled, recipe = true, a
  elseif type(a) == "table" then
    options.check("fp8_autocast", a, { "enabled", "fp8_recipe" })
    enabled = a.enabled
    if enabled == nil then enabled = true end
    if type(enabled) ~= "boolean" then raise("fp8_autocast: enabled must be a boolean, got a " .. type(enabled)) end
    recipe = a.fp8_recipe
    if recipe ~= nil and not core.fp8.is_recipe(recipe) then
      raise("fp8_autocast: fp8_recipe must be an FP8 recipe (tg.fp8.DelayedScaling{...} or tg.fp8.CurrentScaling{...})")
    end
    if enabled and recipe == nil then recipe = core.fp8.DelayedScaling{} end
  else
    raise("fp8_autocast: the first argument must be an FP8 recipe or {enabled =, fp8_recipe =}, got a " .. type(a))
  end
  if type(fn) ~= "function" then raise("fp8_autocast: the second argument must be a function, got a " .. type(fn)) end
  local pa, pe, pr = core.fp8.autocast_get()
  core.fp8.autocast_set(true, enabled, recipe)
  local res = table.pack(pcall(core.fp8.run, fn, ...))
  core.fp8.autocast_set(pa, pe, pr)
  if not res[1] then error(no_yield(res[2], "fp8_autocast"), 0) end
  return table.unpack(res, 2, res.n)
end

-- keep_state(model, fn, ...) -> fn(...)'s results: runs fn and then puts back the delayed-scaling state (amax
-- histories, scales, scale_invs) of every FP8 Linear under model (a module, a list of modules, or anything with
-- fp8_state()) as it was before, also when fn raises. For forwards that are not training (an evaluation, a
-- generation) between steps: a forward records its amaxes and, at microbatch 1, updates the scales, so without
-- it an evaluation would change the scales the next training step uses. The weight cast it leaves is redone at
-- the next step's microbatch 1.
function M.keep_state(model, fn, ...)
  if type(fn) ~= "function" then raise("fp8.keep_state: fn must be a function, got " .. type(fn)) end
  local mods = (type(model) == "table" and model.fp8_state == nil) and model or { model }
  for i, m in ipairs(mods) do
    if (type(m) ~= "table" and type(m) ~= "userdata") or m.fp8_state == nil then
      raise(string.format("fp8.keep_state: model entry %d has no fp8_state() (a module or a GPT)", i))
    end
  end
  -- the states under the model, each keyed by its module and its place among that module's (the tensors
  -- handed out are new handles on every call)
  local function states()
    local out, seen = {}, {}
    for _, m in ipairs(mods) do
      for _, st in ipairs(m:fp8_state()) do
        local n = (seen[st.module] or 0) + 1
        seen[st.module] = n
        out[#out + 1] = { key = st.module .. "#" .. n, t = { st.amax_history, st.scale, st.scale_inv } }
      end
    end
    return out
  end
  local saved = {}
  for _, e in ipairs(states()) do saved[e.key] = { e.t[1]:clone(), e.t[2]:clone(), e.t[3]:clone() } end
  local res = table.pack(pcall(core.fp8.run, fn, ...))
  -- put back what was there; a state made inside fn (an autocast's first FP8 forward) goes back to how a state
  -- starts (a zero history, scales 1), so the first training forward finds what it would have made itself
  for _, e in ipairs(states()) do
    local old = saved[e.key]
    for j = 1, 3 do
      if old and table.concat(old[j]:shape(), ",") == table.concat(e.t[j]:shape(), ",") then e.t[j]:copy_(old[j])
      else e.t[j]:fill_(j == 1 and 0 or 1) end
    end
  end
  if not res[1] then error(no_yield(res[2], "fp8.keep_state"), 0) end
  return table.unpack(res, 2, res.n)
end

-- amax_reduce{ model = module or list of modules, comm = communicator } -> policy with policy:reduce():
-- all-reduces (max), over comm, row 0 of the amax history of every FP8 Linear under the model (the amaxes the
-- step's casts recorded), so each rank's next scale update computes the same scales. Call reduce() after each
-- step's last backward and before the next step's first forward (after tg.step_end()). The FP8 states must
-- exist: modules made with fp8 = recipe, or run once in FP8. Current scaling keeps no history: nothing to reduce.
function M.amax_reduce(o)
  if type(o) ~= "table" or o.model == nil then raise("fp8.amax_reduce: model (a module or a list of modules) is required") end
  options.check("fp8.amax_reduce", o, { "model", "comm" })
  if o.comm == nil then raise("fp8.amax_reduce: comm (a communicator) is required") end
  local mods = (type(o.model) == "table" and o.model.forward == nil) and o.model or { o.model }
  local rows = {}
  for _, m in ipairs(mods) do
    for _, s in ipairs(m:fp8_state()) do
      if s.recipe.scaling == "delayed" then rows[#rows + 1] = { module = s.module, amax = s.amax_history:narrow(1, 1) } end
    end
  end
  if #rows == 0 then raise("fp8.amax_reduce: no module under the model has a delayed-scaling FP8 state") end
  local policy = { rows = rows, comm = o.comm }
  function policy.reduce(self)
    for _, r in ipairs(self.rows) do self.comm:all_reduce(r.amax, { op = "max", name = "fp8 amax " .. r.module }) end
  end
  return policy
end

return M
