-- fp8-producers-equal-the-unfused-chain.lua — under FP8 delayed scaling the LayerNorm of LayerNormLinear and
-- LayerNormMLP writes the next Linear's E4M3 input (and its transpose) directly, and LayerNormMLP's fc1 writes
-- fc2's from its pre-activation (GELU and the cast in one pass): the outputs, input gradients, parameter
-- gradients and amax histories / scales equal those of the unfused chain (the test switch
-- fp8_unfused_producers: the norm and GELU outputs stored, the next Linear casts them) bit for bit, over 3 steps
-- of 2 microbatches, f32 and bf16, also inside a TransformerLayer; the high-precision outputs are never stored
-- (less memory held between forward and backward, one kernel less per MLP forward). Current scaling and RMSNorm
-- keep the unfused chain.
local tg = require "tegraph"
local t = require "tap"

local D, F, N = 32, 64, 48 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU
local recipe = tg.fp8.DelayedScaling{ amax_history_len = 2, amax_compute_algo = "max", fp8_format = "HYBRID" }
local STEPS, MB = 3, 2
local CPU = { device = "cpu" } -- the memory and kernel counts below are the CPU device's

local function bits(x) return x:to({ dtype = "f32" }):totable() end

-- The first element where two flattened tables differ, or nil.
local function differ(a, b, path)
  if type(a) ~= "table" then
    if a ~= b and not (a ~= a and b ~= b) then return string.format("%s: %.9g vs %.9g", path, a, b) end
    return nil
  end
  if #a ~= #b then return path .. ": sizes differ" end
  for i = 1, #a do
    local d = differ(a[i], b[i], path .. "[" .. i .. "]")
    if d then return d end
  end
  return nil
end

-- Runs a fresh module (seeded) for STEPS steps of MB microbatches with the switch set as given; returns every
-- output, input gradient, parameter gradient and FP8 state after each step, and the memory the forwards held.
local function run(make, dtype, unfused, xs, dys)
  tg.manual_seed(11)
  local m = make(dtype)
  local prev = tg.debug("fp8_unfused_producers", unfused)
  local rec, held, kernels = {}, 0, 0
  for s = 1, STEPS do
    tg.step_begin{ microbatches = MB }
    collectgarbage("collect") -- no tensor of an earlier step is freed by the collector inside the measured window
    collectgarbage("stop")
    local before = tg.device_stats("cpu")
    local ys = {}
    for mb = 1, MB do ys[mb] = m:forward(xs[s][mb], mb) end
    local after = tg.device_stats("cpu")
    collectgarbage("restart")
    held = held + (after.memory - before.memory)
    kernels = kernels + (after.kernels - before.kernels)
    for mb = MB, 1, -1 do
      rec[#rec + 1] = bits(ys[mb])
      rec[#rec + 1] = bits(m:backward(dys[s][mb], mb))
    end
    tg.step_end()
    for _, p in ipairs(m:parameters()) do rec[#rec + 1] = bits(p.grad) end
    for _, st in ipairs(m:fp8_state()) do
      rec[#rec + 1] = st.amax_history:totable()
      rec[#rec + 1] = st.scale:totable()
      rec[#rec + 1] = st.scale_inv:totable()
    end
  end
  tg.debug("fp8_unfused_producers", prev)
  return rec, held, kernels
end

local function inputs(dtype, out)
  local xs, dys = {}, {}
  tg.manual_seed(5)
  for s = 1, STEPS do
    xs[s], dys[s] = {}, {}
    for mb = 1, MB do
      -- large and tiny values: the scales move and some codes saturate or flush in the next step
      local scale = (s == 2 and mb == 1) and 40 or (s == 3 and 0.01 or 1)
      xs[s][mb] = (tg.randn({ 2, N / 2, D }, CPU) * scale):to({ dtype = dtype })
      dys[s][mb] = tg.randn({ 2, N / 2, out }, CPU):to({ dtype = dtype })
    end
  end
  return xs, dys
end

local kinds = {
  { "LayerNormLinear", D, function(dt)
      return tg.nn.LayerNormLinear(D, D, { fp8 = recipe, dtype = dt, name = "lnl", device = "cpu" })
    end, N * D },
  { "LayerNormMLP", D, function(dt)
      return tg.nn.LayerNormMLP(D, F, { fp8 = recipe, dtype = dt, name = "mlp", device = "cpu" })
    end, N * D + N * F },
  { "TransformerLayer", D, function(dt)
      return tg.nn.TransformerLayer{ hidden_size = D, ffn_hidden_size = F, num_attention_heads = 2, fp8 = recipe,
        dtype = dt, name = "h", device = "cpu" }
    end, 2 * N * D + N * F },
}

for _, dt in ipairs({ "f32", "bf16" }) do
  local esize = dt == "f32" and 4 or 2
  for _, k in ipairs(kinds) do
    local name, out, make, saved = k[1], k[2], k[3], k[4]
    local xs, dys = inputs(dt, out)
    local fused, held_f, kern_f = run(make, dt, false, xs, dys)
    local plain, held_p, kern_p = run(make, dt, true, xs, dys)
    local d = differ(fused, plain, "record")
    t.ok(d == nil, string.format("%s %s: outputs, gradients and FP8 states equal the unfused chain's bit for bit%s",
      name, dt, d and (" (" .. d .. ")") or ""))
    local want = STEPS * MB * saved * esize
    t.is(held_p - held_f, want, string.format("%s %s: the forwards hold %d bytes less (the norm's%s high-precision "
      .. "output is not stored)", name, dt, want, name == "LayerNormLinear" and "" or " and the GELU's"))
    if name ~= "LayerNormLinear" then
      t.is(kern_p - kern_f, STEPS * MB, string.format("%s %s: one kernel less per forward (fc1's GELU and fc2's "
        .. "cast are one pass)", name, dt))
    end
  end
end

-- current scaling and RMSNorm: the chain as before (the switch changes nothing)
do
  local cur = tg.fp8.CurrentScaling{}
  local function mk(opts)
    return function(dt)
      local o = { dtype = dt, name = "m", device = "cpu" }
      for kk, v in pairs(opts) do o[kk] = v end
      return tg.nn.LayerNormMLP(D, F, o)
    end
  end
  for _, c in ipairs({ { "current scaling", { fp8 = cur } },
    { "RMSNorm", { fp8 = recipe, normalization = "RMSNorm" } } }) do
    local xs, dys = inputs("bf16", D)
    local a, ha = run(mk(c[2]), "bf16", false, xs, dys)
    local b, hb = run(mk(c[2]), "bf16", true, xs, dys)
    t.ok(differ(a, b, "r") == nil, c[1] .. ": same results with and without the switch")
    local extra = c[1] == "RMSNorm" and STEPS * MB * N * F * 2 or 0
    t.is(hb - ha, extra, c[1] .. (c[1] == "RMSNorm" and ": only the GELU output is cast by its producer" or
      ": nothing is written by a producer"))
  end
end

t.done_testing()
