-- graph-mode-matrix-fp8.lua — the mode matrix with every Linear in FP8 under delayed scaling (HYBRID: E4M3
-- forward, E5M2 gradients; amax history 4, so the history rolls over within the run): {eager, graphed,
-- partial (c1's MLP and c2's LayerNormLinear graphed in place), full iteration} x {delay_wgrad off, on} x
-- {fused accumulation off, on}, two orders, 4 steps. Gradients after every step, hook info sequences,
-- parameters after the optimizer and the FP8 scaling state (histories, scales) are bit-identical to eager:
-- the scale updates and weight casts captured in the microbatch-1 graphs replay as they run eagerly.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, H, TOK, M, STEPS = 16, 32, 16, 3, 4 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU
local recipe = tg.fp8.DelayedScaling{ amax_history_len = 4, amax_compute_algo = "max", margin = 0, fp8_format = "HYBRID" }

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
  partial = { "mlp", "lnl" }, partial_sample = tg.zeros({ TOK, H }), full = true, fp8 = true }

t.done_testing()
