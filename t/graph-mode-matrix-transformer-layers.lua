-- graph-mode-matrix-transformer-layers.lua — the mode matrix (t/lib/mode_matrix.lua) on TransformerLayer chunks,
-- partial mode: every layer's attention and MLP graphed in place with the residual as their graphs' second input,
-- norms eager, bit-identical to default eager; orders include the 1F1B and ZB-H1 schedules' (static buffers reused)
-- (layernorm+gelu, rmsnorm+swiglu), whose residual adds run inside GEMMs and norm kernels and whose GELU
-- backward runs in fc2's dgrad: {eager, graphed} x {delay_wgrad off, on} x {fused accumulation off, on}, two
-- orders: identical gradients after every step, identical hook info sequences, identical parameters.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, H, TOK, M, STEPS = 8, 8, 4, 3, 2

-- Two chunks of a small model; every leaf gets the mode's options.
local function build(delay, fuse)
  tg.manual_seed(1234)
  local o = function(extra)
    extra.delay_wgrad, extra.fuse_wgrad_accumulation = delay, fuse
    return extra
  end
  local c1 = tg.nn.Sequential{
    tg.nn.TransformerLayer(D, 16, 2, o { name = "c1.l0", chunk = 1 }),
    tg.nn.TransformerLayer(D, 16, 2, o { normalization = "RMSNorm", activation = "swiglu", name = "c1.l1", chunk = 1 }),
    name = "c1", chunk = 1 }
  local c2 = tg.nn.Sequential{
    tg.nn.TransformerLayer(D, 16, 2, o { name = "c2.l0", chunk = 2 }),
    name = "c2", chunk = 2 }
  return { c1, c2 }
end

-- Fixed inputs and output gradients per microbatch (fresh random, never zeros).
tg.manual_seed(99)
local xs, dys = {}, {}
for m = 1, M do
  xs[m] = tg.randn({ 2, TOK, D })
  dys[m] = tg.randn({ 2, TOK, D })
end

local MM = require "mode_matrix" -- t/lib/mode_matrix.lua
MM.run{ t = t, build = build, xs = xs, dys = dys, sample = { xs[1], tg.zeros({ 2, TOK, H }) }, steps = STEPS,
  partial = { "attn", "mlp" }, partial_sample = tg.zeros({ 2, TOK, D }), full = true, schedules = true }

t.done_testing()
