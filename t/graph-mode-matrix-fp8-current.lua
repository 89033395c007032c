-- graph-mode-matrix-fp8-current.lua — the mode matrix with every Linear in FP8 under current scaling (E4M3 for
-- all tensors): each cast computes its tensor's amax and scale first, in the graphs as eagerly. {eager, graphed,
-- full iteration} x {delay_wgrad off, on} x {fused accumulation off, on}, two orders, 4 steps: gradients,
-- hook info sequences, parameters after the optimizer and the scales are bit-identical to eager.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, H, TOK, M, STEPS = 16, 32, 16, 3, 4 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU
local recipe = tg.fp8.CurrentScaling{ fp8_format = "E4M3" }

local function build(delay, fuse)
  tg.manual_seed(1234)
  local o = function(extra)
    extra.delay_wgrad, extra.fuse_wgrad_accumulation, extra.fp8 = delay, fuse, recipe
    return extra
  end
  local c1 = tg.nn.Sequential{
    tg.nn.Linear(D, H, o { name = "c1.fc" }),
    tg.nn.LayerNormMLP(H, 2 * H, o { name = "c1.mlp" }),
    name = "c1", chunk = 1 }
  local c2 = tg.nn.Sequential{
    tg.nn.LayerNormLinear(H, D, o { name = "c2.lnl", chunk = 2 }),
    tg.nn.Linear(D, D, o { name = "c2.fc", chunk = 2 }),
    name = "c2", chunk = 2 }
  return { c1, c2 }
end

tg.manual_seed(99)
local xs, dys = {}, {}
for m = 1, M do
  xs[m] = tg.randn({ TOK, D })
  dys[m] = tg.randn({ TOK, D })
end

local MM = require "mode_matrix"
MM.run{ t = t, build = build, xs = xs, dys = dys, sample = { xs[1], tg.zeros({ TOK, H }) }, steps = STEPS,
  full = true, fp8 = true }

t.done_testing()
