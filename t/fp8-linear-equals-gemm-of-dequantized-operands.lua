-- fp8-linear-equals-gemm-of-dequantized-operands.lua — a Linear with fp8 = recipe computes its forward, dgrad and
-- wgrad GEMMs on FP8 operands: each equals the f32 GEMM of the operands cast with the scales its recipe gives
-- (x and the weight E4M3, dy E5M2 under HYBRID) and dequantized, and differs from the f32 Linear by the FP8
-- rounding. The bias gradient comes from dy in f32. The weight is cast once per step (microbatch 1) and reused by
-- the other microbatches; delayed scaling updates the scales at the next step's first forward from the amaxes the
-- step recorded; current scaling takes each tensor's own amax. f32 and bf16 modules, main_grad too.
local tg = require "tegraph"
local t = require "tap"

local function f32(x) return (string.unpack("f", string.pack("f", x))) end
local IN, OUT, N = 32, 48, 16 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU

-- q(x) = dequantize(fp8(x * scale)) as the module's cast gives it (scale_inv = 1 / scale in f32).
local function q(x, dtype, scale)
  local y = tg.ops.fp8_cast(x, dtype, { scale = tg.tensor({ scale }) })
  return tg.ops.fp8_dequantize(y, tg.tensor({ f32(1 / scale) }))
end

local function rel(a, b) return a:max_abs_diff(b) / b:max_abs() end
-- The CPU emulates the FP8 GEMMs exactly (products summed in double); a GPU's FP8 tensor cores keep about 14 bits
-- between their promotions to f32, so there the GEMMs equal the f32 GEMM of the dequantized operands to ~1e-4.
local TOL = tostring(tg.default_device()):match("cuda") and 1e-3 or 1e-5

-- y = a @ b^T (trans_b) or a @ b, in f32
local function mm(a, b, opts) return a:matmul(b, opts) end

-- --------------------------------------------------------------- current scaling: the three GEMMs
do
  local r = tg.fp8.CurrentScaling{ fp8_format = "HYBRID" }
  tg.manual_seed(7)
  local lin = tg.nn.Linear(IN, OUT, { fp8 = r, name = "fc", fuse_wgrad_accumulation = true })
  tg.manual_seed(7)
  local ref = tg.nn.Linear(IN, OUT, { name = "ref" })
  local w, b = lin:parameters()[1], lin:parameters()[2]
  b.data:copy_(tg.randn({ OUT }, { std = 0.1 }))
  ref:parameters()[2].data:copy_(b.data)
  local x, dy = tg.randn({ N, IN }), tg.randn({ N, OUT }, { std = 3 })
  local fired = 0
  lin:register_wgrad_hook(function() fired = fired + 1 end)

  tg.step_begin{ microbatches = 1 }
  local y = lin:forward(x)
  local dx = lin:backward(dy)
  tg.step_end()
  local yr, dxr = ref:forward(x), ref:backward(dy)
  t.is(fired, 2, "the weight and bias hooks fired once each")

  local sx, sw, sg = f32(448 / x:max_abs()), f32(448 / w.data:max_abs()), f32(57344 / dy:max_abs())
  local st = lin:fp8_state()[1]
  t.is_deeply(st.scale:totable(), { sx, sw, sg }, "current scaling: scales = fp8_max / amax of x, the weight and dy")
  local xq, wq, dyq = q(x, "e4m3", sx), q(w.data, "e4m3", sw), q(dy, "e5m2", sg)

  local yq = mm(xq, wq, { trans_b = true })
  yq = yq + tg.ones({ N, 1 }):matmul(b.data:view({ 1, OUT }))
  t.ok(rel(y, yq) < TOL, string.format("forward = x_q @ w_q^T + b (relative difference %.2g)", rel(y, yq)))
  t.ok(rel(y, yr) > 1e-4, string.format("and differs from the f32 Linear by the FP8 rounding (%.2g)", rel(y, yr)))
  local dxq = mm(dyq, wq)
  t.ok(rel(dx, dxq) < TOL, string.format("dgrad = dy_q (E5M2) @ w_q (relative difference %.2g)", rel(dx, dxq)))
  t.ok(rel(dx, dxr) > 1e-4, "dgrad differs from the f32 one")
  local dwq = mm(dyq, xq, { trans_a = true })
  t.ok(rel(w.main_grad, dwq) < TOL, string.format("wgrad into main_grad = dy_q^T @ x_q (relative difference %.2g)",
    rel(w.main_grad, dwq)))
  local dbr = ref:parameters()[2].grad
  t.ok(b.main_grad:max_abs_diff(dbr) < 1e-5, "the bias gradient is the column sum of dy in f32")
end

-- --------------------------------------------------------------- delayed scaling: weight caching, next-step scales
do
  local r = tg.fp8.DelayedScaling{ amax_history_len = 8, fp8_format = "HYBRID" }
  tg.manual_seed(8)
  local lin = tg.nn.Linear(IN, OUT, { fp8 = r, bias = false, name = "fc" })
  local w = lin:parameters()[1]
  local x1, x2 = tg.randn({ N, IN }), tg.randn({ N, IN }, { std = 2 })
  local dy1, dy2 = tg.randn({ N, OUT }), tg.randn({ N, OUT }, { std = 0.5 })
  local w0 = w.data:clone()

  tg.step_begin{ microbatches = 2 }
  local y1 = lin:forward(x1, 1)
  w.data:mul_(2) -- changed inside the step: microbatch 2 still uses the cast made at microbatch 1
  local y2 = lin:forward(x2, 2)
  lin:backward(dy1, 1)
  lin:backward(dy2, 2)
  tg.step_end()
  t.is_deeply(lin:fp8_state()[1].scale:totable(), { 1, 1, 1 }, "step 1: the scales start at 1 (no amax recorded yet)")
  local y2q = mm(q(x2, "e4m3", 1), q(w0, "e4m3", 1), { trans_b = true })
  t.ok(rel(y2, y2q) < TOL, "microbatch 2 used the weight cast of microbatch 1 (the weight changed in between)")
  local wgq = mm(q(dy1, "e5m2", 1), q(x1, "e4m3", 1), { trans_a = true }) + mm(q(dy2, "e5m2", 1), q(x2, "e4m3", 1), { trans_a = true })
  t.ok(rel(w.grad, wgq) < TOL, "the wgrads of both microbatches accumulate, each on its own FP8 x and dy")
  local hist = lin:fp8_state()[1].amax_history:totable()
  t.is_deeply(hist[1], { f32(math.max(x1:max_abs(), x2:max_abs())), f32(w0:max_abs()), f32(math.max(dy1:max_abs(), dy2:max_abs())) },
    "step 1 recorded the amaxes (max over the microbatches) in history row 0")

  tg.step_begin{ microbatches = 1 }
  local y3 = lin:forward(x1, 1)
  lin:backward(dy1, 1)
  tg.step_end()
  local sx = f32(448 / math.max(x1:max_abs(), x2:max_abs()))
  local sw = f32(448 / w0:max_abs())
  local sg = f32(57344 / math.max(dy1:max_abs(), dy2:max_abs()))
  t.is_deeply(lin:fp8_state()[1].scale:totable(), { sx, sw, sg },
    "step 2 runs with scales from step 1's amaxes (the update at its first forward)")
  local y3q = mm(q(x1, "e4m3", sx), q(w.data, "e4m3", sw), { trans_b = true })
  t.ok(rel(y3, y3q) < TOL, "step 2 recast the changed weight at microbatch 1, with the new scale")
  hist = lin:fp8_state()[1].amax_history:totable()
  t.is(hist[8][2], f32(w0:max_abs()), "the update rolled step 1's amaxes to the history's last row")
  t.is(hist[1][2], f32(w.data:max_abs()), "and step 2's weight amax is in row 0")
end

-- --------------------------------------------------------------- bf16 modules, E4M3 format, gelu MLP
do
  local r = tg.fp8.CurrentScaling{ fp8_format = "E4M3" }
  tg.manual_seed(9)
  local lin = tg.nn.Linear(IN, OUT, { fp8 = r, dtype = "bf16", name = "fc" })
  local w, b = lin:parameters()[1], lin:parameters()[2]
  b.data:copy_(tg.randn({ OUT }, { std = 0.1 }))
  local x, dy = tg.randn({ N, IN }):to({ dtype = "bf16" }), tg.randn({ N, OUT }):to({ dtype = "bf16" })
  local y = lin:forward(x)
  local dx = lin:backward(dy)
  local xf, wf, dyf = x:to({ dtype = "f32" }), w.data:to({ dtype = "f32" }), dy:to({ dtype = "f32" })
  local sx, sw, sg = f32(448 / xf:max_abs()), f32(448 / wf:max_abs()), f32(448 / dyf:max_abs())
  t.is_deeply(lin:fp8_state()[1].scale:totable(), { sx, sw, sg }, "E4M3 format: dy is cast to E4M3 too (fp8_max 448)")
  local yq = mm(q(xf, "e4m3", sx), q(wf, "e4m3", sw), { trans_b = true }) + tg.ones({ N, 1 }):matmul(b.data:to({ dtype = "f32" }):view({ 1, OUT }))
  t.ok(rel(y:to({ dtype = "f32" }), yq) < 1e-2, "bf16 module: forward with the bias in the FP8 GEMM's epilogue, within bf16 rounding")
  local dxq = mm(q(dyf, "e4m3", sg), q(wf, "e4m3", sw))
  t.ok(rel(dx:to({ dtype = "f32" }), dxq) < 1e-2, "bf16 module: dgrad on E4M3 dy, within bf16 rounding")

  tg.manual_seed(10)
  local mlp = tg.nn.LayerNormMLP(IN, 2 * IN, { fp8 = r, dtype = "bf16", name = "mlp" })
  tg.manual_seed(10)
  local mref = tg.nn.LayerNormMLP(IN, 2 * IN, { dtype = "bf16", name = "mref" })
  local xm = tg.randn({ N, IN }):to({ dtype = "bf16" })
  local ym, yr = mlp:forward(xm), mref:forward(xm)
  local dxm, dxr = mlp:backward(xm), mref:backward(xm)
  local e1, e2 = rel(ym:to({ dtype = "f32" }), yr:to({ dtype = "f32" })), rel(dxm:to({ dtype = "f32" }), dxr:to({ dtype = "f32" }))
  t.ok(e1 > 0 and e1 < 0.15, string.format("LayerNormMLP (gelu) in FP8 stays near the bf16 one: forward %.3g", e1))
  t.ok(e2 > 0 and e2 < 0.3, string.format("and its dgrad (gelu' applied in fc1's FP8 gradient cast): %.3g", e2))
  local names = {}
  for _, s in ipairs(mlp:fp8_state()) do names[#names + 1] = s.module end
  t.is(table.concat(names, " "), "mlp.fc1 mlp.fc2", "LayerNormMLP's two Linears hold the FP8 states")
end

t.done_testing()
