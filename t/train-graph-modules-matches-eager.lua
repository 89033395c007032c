-- train-graph-modules-matches-eager.lua — tegraph.train with graph_modules = {"attn", "mlp"} (partial capture, gpt.lua
-- --graph-modules): every layer's attention and MLP replay their graphs inside the eager step, the hook check holds
-- with hooks on every parameter, the losses and parameters equal eager's bit for bit (the graphs take the residuals as
-- second inputs, so the adds stay fused as in eager), evaluation outside steps runs the modules eagerly, and bad options are refused.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local train = require "tegraph.train"
local t = require "tap"

tg.hook_check(true)
local V, T, B, M, STEPS = 11, 6, 2, 2, 3
local function gpt()
  tg.manual_seed(5)
  return nn.GPT { vocab_size = V, max_position_embeddings = T, hidden_size = 8, num_attention_heads = 2, num_layers = 2,
    delay_wgrad = "layers" }
end
math.randomseed(3)
local function ids()
  local v = {}
  for i = 1, B * T do v[i] = math.random(0, V - 1) end
  return tg.tensor(v, { dtype = "i32" }):view({ B, T })
end
local data = {}
for s = 1, STEPS do
  data[s] = { {}, {} }
  for m = 1, M do data[s][1][m], data[s][2][m] = ids(), ids() end
end

local function run(partial)
  local model = gpt()
  local tr = train.new { model = model, microbatches = M, hooks = "noop", adamw = { lr = 1e-2 },
    graph_modules = partial and { "attn", "mlp" } or nil, sample = partial and tg.zeros({ B, T }, { dtype = "i32" }) or nil }
  local losses = {}
  for s = 1, STEPS do
    local r = tr:step(data[s][1], data[s][2], 1e-2)
    losses[s] = tr:losses(r)
  end
  return model, tr, losses
end

local em, _, el = run(false)
local pm, ptr, pl = run(true)
local graphed = 0
for _, l in ipairs(pm.layers) do
  for _, c in ipairs(l:children()) do
    if c.exec_mode == "graphed" then graphed = graphed + 1 end
  end
end
t.is(graphed, 4, "both layers' attention and MLP run graphed (their norms eager)")
t.like(ptr:describe(), "partial capture %(4 modules graphed: attn,mlp%)", "describe names the partial capture")
local worst = 0
for s = 1, STEPS do
  for m = 1, M do worst = math.max(worst, math.abs(el[s][m] - pl[s][m])) end
end
t.ok(worst == 0, string.format("losses of every step equal eager's bit for bit (largest difference %.3g)", worst))
t.ok(el[STEPS][1] ~= el[1][1], "the losses change over the steps (the optimizer ran)")
local pdiff = 0
local ep = {}
for _, p in ipairs(em:parameters()) do ep[p.name] = p end
for _, p in ipairs(pm:parameters()) do pdiff = math.max(pdiff, p.data:max_abs_diff(ep[p.name].data)) end
t.ok(pdiff == 0, string.format("parameters after %d steps equal eager's bit for bit (largest difference %.3g)", STEPS, pdiff))

-- Outside a step (evaluation) the graphed modules run eagerly: the same loss as the eager model's.
local x, y = data[1][1][1], data[1][2][1]
local le, lp = em:eval_loss(x, y):totable()[1], pm:eval_loss(x, y):totable()[1]
t.ok(math.abs(le - lp) < 1e-5, string.format("an evaluation outside steps runs (%.6f vs eager %.6f)", lp, le))
-- and training goes on after it
local r = ptr:step(data[2][1], data[2][2], 1e-2)
t.ok(ptr:losses(r)[1] == ptr:losses(r)[1], "a step after the evaluation runs")

t.error_like(function()
  train.new { model = gpt(), microbatches = M, graph_modules = {}, sample = tg.zeros({ B, T }, { dtype = "i32" }) }
end, "train: graph_modules must be a list of module names", "an empty list is refused")
t.error_like(function() train.new { model = gpt(), microbatches = M, graph_modules = { "mlp" } } end,
  "train: graph_modules needs sample", "a missing sample is refused")
t.error_like(function()
  train.new { model = gpt(), microbatches = M, graph = true, graph_modules = { "mlp" }, sample = tg.zeros({ B, T }, { dtype = "i32" }) }
end, "graph_modules %(partial capture%) runs with the eager single%-stage step", "with graph = true it is refused")
t.error_like(function()
  train.new { model = gpt(), microbatches = M, graph_modules = { "nope" }, sample = tg.zeros({ B, T }, { dtype = "i32" }) }
end, "no module under the model is named nope", "a name no module has is refused, naming it")

t.done_testing()
