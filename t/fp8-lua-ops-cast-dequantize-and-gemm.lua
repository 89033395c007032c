-- fp8-lua-ops-cast-dequantize-and-gemm.lua — the FP8 tensor layer from Lua (tg.ops.fp8_*): dtype names, FP8 tensors
-- made from numbers and read back on the grid, casts with scale / amax / scale_inv (new or given outputs,
-- accumulated amax), the transposed copy, dequantize, the GEMM against a reference computed here, safetensors
-- files keeping the codes, and errors naming the problem and the script line.
local tg = require "tegraph"
local tap = require "tap"
local ops = tg.ops
local CPU = { device = "cpu" }

local function f32(t) return tg.tensor(t, CPU) end

------------------------------------------------------------------------ dtypes and single values
tap.is(tg.e4m3, "e4m3", "tg.e4m3 names the dtype")
tap.is(tg.e5m2, "e5m2", "tg.e5m2 too")
tap.is(ops.fp8_max("e4m3"), 448, "e4m3's largest finite value is 448")
tap.is(ops.fp8_max("float8_e5m2"), 57344, "e5m2's (by its PyTorch name) 57344")
tap.is(ops.fp8_from_f32("e4m3", 1.0625), 0x38, "1.0625 ties to the even code 0x38 (1.0)")
tap.is(ops.fp8_from_f32("e5m2", math.huge), 0x7b, "+Inf saturates to e5m2's max code")
tap.is(ops.fp8_to_f32("e4m3", 0x01), 2 ^ -9, "code 1 is e4m3's smallest subnormal 2^-9")

local q = tg.tensor({ 0.3, 448, -1e-9, 3 }, { dtype = "float8_e4m3fn", device = "cpu" })
tap.is(q.dtype, "e4m3", "a tensor made with dtype float8_e4m3fn is e4m3")
local v = q:totable()
tap.ok(v[1] == ops.fp8_to_f32("e4m3", ops.fp8_from_f32("e4m3", 0.3)) and v[2] == 448 and v[3] == 0 and v[4] == 3,
  "its values read back on the grid: 0.3 rounded, 448 (the max) kept, -1e-9 to -0, 3 exact")
-- values from the host past the format's range are refused (no scale brings them in; fp8_cast scales), not saturated
tap.error_like(function() return tg.tensor({ 0.3, 500 }, { dtype = "e4m3", device = "cpu" }) end,
  "write: value 500 at index 1 is outside e4m3's range %(%-448 to 448", "a constructor value past e4m3's max is refused, naming it")
tap.error_like(function() return tg.full({ 2 }, 1000, { dtype = "e4m3", device = "cpu" }) end,
  "fill: value 1000 is outside e4m3's range", "tg.full / fill past the max is refused (it used to store 448)")
tap.error_like(function() return tg.zeros({ 2 }, { dtype = "e5m2", device = "cpu" }):fill_(0 / 0) end,
  "fill: value .*nan is outside e5m2's range", "a NaN fill is refused too")
tap.is(tg.zeros({ 2 }, { dtype = "e5m2", device = "cpu" }):fill_(-57344):totable()[1], -57344, "a fill at the max is kept")
do -- copy between FP8 and f32 is deliberate and unscaled: values as codes, saturating like the cast
  local d = tg.zeros({ 2 }, { dtype = "e4m3", device = "cpu" })
  d:copy_(f32 { 3, 1000 })
  tap.is_deeply(d:totable(), { 3, 448 }, "copy_ from f32 into e4m3 is unscaled and saturates past the max")
end

------------------------------------------------------------------------ casts
local x = f32 { { 1, -3, 0.3 }, { 1000, 2, 4 } }
local scale, amax, sinv = f32 { 2 }, f32 { 0 }, f32 { 0 }
local y = ops.fp8_cast(x, "e4m3", { scale = scale, amax = amax, scale_inv = sinv })
tap.is(y.dtype, "e4m3", "fp8_cast returns an e4m3 tensor")
tap.is(#y:shape(), 2, "of x's shape")
local yv = y:totable()
tap.ok(yv[1][1] == 2 and yv[1][2] == -6 and yv[2][1] == 448, "y = e4m3(x * 2): 2, -6, and 2000 saturated to 448")
tap.is(amax:totable()[1], 1000, "amax = max|x| of the unscaled input")
tap.is(sinv:totable()[1], 0.5, "scale_inv = 1 / scale")
amax = f32 { 5000 }
local y2 = tg.empty({ 2, 3 }, { dtype = "e4m3", device = "cpu" })
local got = ops.fp8_cast(x, "e4m3", { scale = scale, amax = amax, accumulate = true, y = y2 })
tap.ok(rawequal(got, y2), "a given y is written and returned")
tap.is(amax:totable()[1], 5000, "accumulate keeps the larger old amax")

local yy, yt = ops.fp8_cast_transpose(x, "e5m2", { scale = scale })
tap.ok(yy.dtype == "e5m2" and yt:shape()[1] == 3 and yt:shape()[2] == 2, "fp8_cast_transpose returns y and y_t (3 x 2)")
local yyv, ytv = yy:totable(), yt:totable()
local same = true
for r = 1, 2 do for c = 1, 3 do same = same and yyv[r][c] == ytv[c][r] end end
tap.ok(same, "y_t[c][r] = y[r][c]")
local only = ops.fp8_cast_transpose(x, "e5m2", { y = false })
tap.is(only:shape()[1], 3, "with y = false only y_t comes back")
tap.is(ops.fp8_transpose(yy):totable()[3][2], ytv[3][2], "fp8_transpose of y gives y_t")

-- a gradient's cast: gelu'(h) * dy cast with its transpose and the bias gradient's column partials
local dy = tg.tensor({ { 1, -2, 0.5 }, { 3, 0.25, -1 } }, CPU)
local h = tg.tensor({ { 0, 0, 0 }, { 0, 0, 0 } }, CPU) -- gelu'(0) = 0.5
local part = tg.zeros({ ops.fp8_dbias_chunks(2), 3 }, { dtype = "f32", device = "cpu" })
local gy, gyt = ops.fp8_cast_transpose(dy, "e5m2", { gelu_x = h, dbias_part = part })
tap.is(ops.fp8_dbias_chunks(2), 1, "fp8_dbias_chunks: 2 rows are one chunk")
tap.is_deeply(ops.fp8_dequantize(gy):totable(), { { 0.5, -1, 0.25 }, { 1.5, 0.125, -0.5 } },
  "fp8_cast_transpose with gelu_x casts gelu'(h) * dy (gelu'(0) = 1/2)")
tap.is_deeply(part:totable(), { { 2, -0.875, -0.25 } }, "dbias_part gets the column sums of gelu'(h) * dy")
local db = f32 { 1, 1, 1 }
tap.ok(rawequal(ops.fp8_dbias_finish(db, part, 1), db), "fp8_dbias_finish returns dbias")
tap.is_deeply(db:totable(), { 3, 0.125, 0.75 }, "dbias = 1 * dbias + the partials' sum")
tap.is(gyt:totable()[2][1], gy:totable()[1][2], "and y_t is y's transpose")
tap.error_like(function() ops.fp8_cast_transpose(dy, "e5m2", { dbias_part = f32 { 0, 0, 0 } }) end,
  "vs dbias_part %[3%] f32 %(dbias_part %[1,3%] f32 expected", "a dbias_part of the wrong shape is refused naming it")

local dq = ops.fp8_dequantize(y, sinv)
tap.ok(dq.dtype == "f32" and dq:totable()[1][2] == -3 and dq:totable()[2][1] == 224,
  "dequantize: -6 * 0.5 = -3, 448 * 0.5 = 224 (f32)")
tap.is(ops.fp8_dequantize(y, sinv, "bf16").dtype, "bf16", "or into bf16")
local am = f32 { 0 }
ops.fp8_amax(am, x)
tap.is(am:totable()[1], 1000, "fp8_amax")

------------------------------------------------------------------------ GEMM
local A = f32 { { 1, 2, 0.5, -1 }, { 0.25, -2, 3, 1 }, { 4, 0, -0.5, 2 } }  -- (3, 4), all on the e4m3 grid
local B = f32 { { 1, 1, 1, 1 }, { -1, 0.5, 2, 0 } }                        -- (2, 4)
local a8, b8 = ops.fp8_cast(A, "e4m3"), ops.fp8_cast(B, "e4m3")
local sa, sb = f32 { 0.5 }, f32 { 4 }
local bias = tg.tensor({ 1, -1 }, { dtype = "bf16", device = "cpu" })
local D, amax_d = tg.zeros({ 3, 2 }, CPU), f32 { 0 }
ops.fp8_gemm(D, a8, false, b8, true, { a_scale_inv = sa, b_scale_inv = sb, alpha = 2, epilogue = "bias", bias = bias,
  amax_d = amax_d })
local Av, Bv, Dv = A:totable(), B:totable(), D:totable()
local ok_all, mx = true, 0
for i = 1, 3 do
  for j = 1, 2 do
    local s = 0
    for p = 1, 4 do s = s + Av[i][p] * Bv[j][p] end
    local want = 2 * 0.5 * 4 * s + (j == 1 and 1 or -1)
    ok_all = ok_all and Dv[i][j] == want
    mx = math.max(mx, math.abs(want))
  end
end
tap.ok(ok_all, "fp8_gemm: D = alpha * sa * sb * A B^T + bias, exactly (small integers)")
tap.is(amax_d:totable()[1], mx, "amax_d = max|D|")
local s0 = tg.device_stats "cpu"
ops.fp8_gemm(D, a8, false, b8, true)
ops.fp8_cast(A, "e4m3", { y = a8 })
local s1 = tg.device_stats "cpu"
tap.ok(s1.gemms - s0.gemms == 1 and s1.kernels - s0.kernels == 1,
  "tg.device_stats counts an FP8 GEMM as a GEMM and a cast as a kernel")

------------------------------------------------------------------------ files
local dir = os.tmpname()
os.remove(dir)
local path = dir .. ".safetensors"
tg.save(path, { w = y, s = sinv })
local back = tg.load(path)
tap.is(back.w.dtype, "e4m3", "an e4m3 tensor saves and loads as e4m3 (F8_E4M3)")
tap.ok(back.w:totable()[2][1] == 448 and back.w:totable()[1][2] == -6, "with its codes")
local f = tg.safetensors.open(path)
local into = tg.zeros({ 2, 3 }, CPU)
tap.error_like(function() f:read_into("w", into) end, "F8_E4M3 in the file, which does not load into a f32 tensor",
  "an F8_E4M3 tensor is not loaded into an f32 one (its values need the scale)")
f:close()
os.remove(path)

------------------------------------------------------------------------ producers' casts
do
  tg.manual_seed(4)
  local h = (tg.randn({ 24, 40 }, CPU) * 3):to({ dtype = "bf16" })
  local sc = f32 { 16 }
  local a1, a2, s1, s2 = f32 { 0 }, f32 { 0 }, f32 { 0 }, f32 { 0 }
  local g8, g8t = ops.fp8_cast_transpose(h, "e4m3", { gelu = true, scale = sc, amax = a1, scale_inv = s1 })
  local r8, r8t = ops.fp8_cast_transpose(ops.gelu_forward(h), "e4m3", { scale = sc, amax = a2, scale_inv = s2 })
  tap.is_deeply({ g8:totable(), g8t:totable(), a1:totable(), s1:totable() },
    { r8:totable(), r8t:totable(), a2:totable(), s2:totable() },
    "fp8_cast_transpose{gelu = true} of h = fp8_cast_transpose of gelu_forward(h): codes, transpose, amax, scale_inv")
  local x = (tg.randn({ 2, 12, 40 }, CPU) * 5 + 1):to({ dtype = "bf16" })
  local gm, bt = tg.randn({ 40 }, CPU):to({ dtype = "bf16" }), tg.randn({ 40 }, CPU):to({ dtype = "bf16" })
  local l8, lm, lr = ops.fp8_layernorm(x, gm, bt, "e4m3", { scale = sc, amax = a1, scale_inv = s1, eps = 1e-5 })
  local ly, rm, rr = ops.layernorm_forward(x, gm, bt, 1e-5)
  local c8 = ops.fp8_cast(ly, "e4m3", { scale = sc, amax = a2, scale_inv = s2 })
  tap.is_deeply({ l8:totable(), lm:totable(), lr:totable(), a1:totable() },
    { c8:totable(), rm:totable(), rr:totable(), a2:totable() },
    "fp8_layernorm = fp8_cast of layernorm_forward: codes, mean, rstd, amax")
  tap.error_like(function() ops.fp8_cast_transpose(h, "e4m3", { gelu = true, gelu_x = h }) end,
    "option gelu %(the forward form%) goes with neither gelu_x nor dbias_part", "gelu with gelu_x is refused")
  tap.error_like(function() ops.fp8_layernorm(x, gm, bt, "e4m3", { epsilon = 1 }) end,
    "fp8_layernorm: unknown option 'epsilon'", "fp8_layernorm refuses a misspelt option")
end

------------------------------------------------------------------------ errors
tap.error_like(function() ops.fp8_cast(x, "bf16") end, "dtype bf16 is not an FP8 dtype", "fp8_cast to bf16 is refused")
tap.error_like(function() ops.fp8_cast(x, "e4m3", { scael = scale }) end,
  "fp8%-lua%-ops%-cast%-dequantize%-and%-gemm%.lua:%d+: fp8_cast: unknown option 'scael' %(known: scale, amax, scale_inv, accumulate, y, y_t%)",
  "a misspelt option is refused, naming it and the script line")
tap.error_like(function() ops.fp8_cast(x, "e4m3", { scale = 2 }) end, "option scale must be a tensor",
  "a number as scale is refused (scales are device tensors)")
tap.error_like(function() ops.fp8_gemm(D, a8, false, b8, false) end,
  "fp8%-lua%-ops%-cast%-dequantize%-and%-gemm%.lua:%d+: .*FP8 GEMMs take A %(m,k%) and B %(n,k%)",
  "a non-TN layout is refused with the line and the layouts taken")
tap.error_like(function() ops.matmul(a8, b8, false, true) end, "e4m3", "tg.ops.matmul refuses FP8 operands")
tap.error_like(function() ops.add(y, y) end, "e4m3", "elementwise add refuses FP8 tensors")
tap.error_like(function() ops.fp8_gemm(D, a8, false, b8, true, { epilogue = "dgelu" }) end,
  "unknown epilogue 'dgelu'", "an epilogue FP8 GEMMs do not have is refused")
tap.done_testing()
