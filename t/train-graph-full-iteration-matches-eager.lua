-- train-graph-full-iteration-matches-eager.lua — tegraph.train with graph = "full" (gpt.lua --graph full): the first
-- step runs eagerly, the second captures the whole step (forward and backward of every microbatch, delayed wgrads,
-- the ddp hooks' reduce and finish, the gradient-norm clip and capturable AdamW) with tg.graph.capture_step, and
-- every later step fills static inputs and replays it. Losses, gradient norms and parameters equal the eager
-- trainer's bit for bit over several steps with a changing lr, the hook check holds at every replay, and what a
-- captured step cannot do is refused up front.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local train = require "tegraph.train"
local t = require "tap"

tg.hook_check(true)
local V, T, B, M, STEPS = 13, 6, 2, 2, 5

local function model()
  tg.manual_seed(1)
  return nn.GPT { vocab_size = V, max_position_embeddings = T, hidden_size = 8, num_attention_heads = 2,
    num_layers = 2, delay_wgrad = "layers", fuse_wgrad_accumulation = true }
end

math.randomseed(3)
local function ids()
  local v = {}
  for i = 1, B * T do v[i] = math.random(0, V - 1) end
  return tg.tensor(v, { dtype = "i32" }):view({ B, T })
end
local data = {}
for s = 1, STEPS do
  data[s] = { xs = {}, ys = {} }
  for m = 1, M do data[s].xs[m], data[s].ys[m] = ids(), ids() end
end

local function run(graph)
  local tr = train.new { model = model(), microbatches = M, graph = graph, reduce = "ddp",
    adamw = { lr = 1e-2, weight_decay = 0.1, max_norm = 0.5 } }
  local out = { losses = {}, norms = {}, tr = tr }
  for s = 1, STEPS do
    local r = tr:step(data[s].xs, data[s].ys, 1e-2 / s)
    out.losses[s] = tr:losses(r)
    out.norms[s] = tr:grad_norm()
  end
  out.params = {}
  for _, p in ipairs(tr:parameters()) do out.params[p.name] = p.data:view({ p.data:numel() }):totable() end
  return out
end

local eager, full = run(false), run("full")
t.like(full.tr:describe(), "full%-iteration capture", "describe names the full-iteration capture")
t.like(full.tr:describe(), "hooks: ddp", "with the ddp reduce driven by the hooks")
t.ok(full.tr.captured ~= nil, "the step was captured")
for s = 1, STEPS do
  t.ok(full.losses[s][1] == eager.losses[s][1] and full.losses[s][M] == eager.losses[s][M], string.format(
    "step %d (%s): losses equal eager's bit for bit (%.9g, %.9g)", s, s == 1 and "eager warm-up" or "replay",
    full.losses[s][1], full.losses[s][M]))
  t.ok(full.norms[s] == eager.norms[s], string.format("step %d: the clipped gradient norm equals eager's (%.9g)", s,
    full.norms[s]))
end
t.ok(eager.losses[STEPS][1] ~= eager.losses[1][1], "the losses change over the steps (the optimizer ran)")
local worst, n = 0, 0
for k, v in pairs(eager.params) do
  local w = full.params[k]
  for i = 1, #v do
    n = n + 1
    if v[i] ~= w[i] then worst = math.max(worst, math.abs(v[i] - w[i])) end
  end
end
t.ok(n > 0 and worst == 0, string.format("all %d parameter values after %d steps equal eager's bit for bit", n, STEPS))

-- What a captured step cannot do is refused.
local xs, ys = data[1].xs, data[1].ys
t.error_like(function() full.tr:step(xs, ys, 1e-2, { skip_nonfinite = true }) end,
  "skip_nonfinite .* use %-%-on%-nan stop with %-%-graph full", "--on-nan skip is refused (host decision inside the step)")
t.error_like(function() full.tr:step({ ids(), tg.zeros({ B, T + 1 }, { dtype = "i32" }) }, ys, 1e-2) end,
  "microbatch 2's inputs are %[2,7%] i32, the captured step's %[2,6%] i32", "a batch of another shape is refused, naming both")
t.error_like(function() train.new { model = model(), graph = "fulll" } end, "graph must be true .* or false %(got fulll%)",
  "an unknown graph mode is refused")
t.error_like(function() train.new { model = model(), graph = "full", reduce = "zero1" } end,
  "with zero1 is not supported", "zero1 with full capture is refused")
t.error_like(function() train.new { model = model(), graph = "full", graph_modules = { "attn" },
  sample = tg.zeros({ B, T }, { dtype = "i32" }) } end, "graph_modules is for the eager step",
  "partial capture inside a full capture is refused")

t.done_testing()
