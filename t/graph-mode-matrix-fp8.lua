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

local MM = require "mode_matrix" -- t/lib/mode_matrix.lua
-- two chunks of a small model, every leaf with the mode's options; fixed inputs and output gradients
local build = MM.two_chunks(D, H, recipe)
local xs, dys = MM.inputs(M, TOK, D)
MM.run{ t = t, build = build, xs = xs, dys = dys, sample = { xs[1], tg.zeros({ TOK, H }) }, steps = STEPS,
  partial = { "mlp", "lnl" }, partial_sample = tg.zeros({ TOK, H }), full = true, fp8 = true }

t.done_testing()
