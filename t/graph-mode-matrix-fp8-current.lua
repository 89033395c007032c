-- graph-mode-matrix-fp8-current.lua — the mode matrix with every Linear in FP8 under current scaling (E4M3 for
-- all tensors): each cast computes its tensor's amax and scale first, in the graphs as eagerly. {eager, graphed,
-- full iteration} x {delay_wgrad off, on} x {fused accumulation off, on}, two orders, 4 steps: gradients,
-- hook info sequences, parameters after the optimizer and the scales are bit-identical to eager.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, H, TOK, M, STEPS = 16, 32, 16, 3, 4 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU
local recipe = tg.fp8.CurrentScaling{ fp8_format = "E4M3" }

local MM = require "mode_matrix" -- t/lib/mode_matrix.lua
-- two chunks of a small model, every leaf with the mode's options; fixed inputs and output gradients
local build = MM.two_chunks(D, H, recipe)
local xs, dys = MM.inputs(M, TOK, D)
MM.run{ t = t, build = build, xs = xs, dys = dys, sample = { xs[1], tg.zeros({ TOK, H }) }, steps = STEPS,
  full = true, fp8 = true }

t.done_testing()
