-- fp8-casts-of-empty-matrices.lua — every FP8 cast of a matrix with no elements ((64, 0), (0, 64), (0, 0), bf16)
-- runs: y and y_t come back empty (y_t is (cols, rows) with rows = numel / cols, so 0 when cols is 0), amax is
-- overwritten with 0 (or kept when accumulated), scale_inv = 1 / scale, and the bias partials of the gradient form
-- are zeros. On the CPU, and on the GPU too when there is one.
local tg = require "tegraph"
local tap = require "tap"
local ops = tg.ops

local devices = { "cpu" }
if tg.device_count("cuda") > 0 then devices[2] = "cuda" end

local function scalar(v, dev) return tg.tensor({ v }, { device = dev }) end
local function shape_is(t, r, c) local s = t:shape(); return #s == 2 and s[1] == r and s[2] == c end

for _, dev in ipairs(devices) do
  for _, sh in ipairs { { 64, 0 }, { 0, 64 }, { 0, 0 } } do
    local r, c = sh[1], sh[2]
    local what = string.format("%s [%d,%d]", dev, r, c)
    local tr = c > 0 and r or 0 -- y_t's second dimension: numel / cols
    local x = tg.empty({ r, c }, { dtype = "bf16", device = dev })
    local amax, sinv = scalar(7, dev), scalar(0, dev)
    local y = ops.fp8_cast(x, "e4m3", { scale = scalar(4, dev), amax = amax, scale_inv = sinv })
    tap.ok(shape_is(y, r, c) and y.dtype == "e4m3", what .. ": fp8_cast returns an empty e4m3 y of x's shape")
    tap.is(amax:totable()[1], 0, what .. ": ... its amax overwritten with 0")
    tap.is(sinv:totable()[1], 0.25, what .. ": ... scale_inv = 1 / scale")

    amax, sinv = scalar(7, dev), scalar(0, dev)
    local yy, yt = ops.fp8_cast_transpose(x, "e5m2", { scale = scalar(2, dev), amax = amax, scale_inv = sinv })
    tap.ok(shape_is(yy, r, c) and shape_is(yt, c, tr), what .. ": fp8_cast_transpose returns y and y_t of the empty shapes")
    tap.ok(amax:totable()[1] == 0 and sinv:totable()[1] == 0.5, what .. ": ... amax 0, scale_inv 0.5")

    amax = scalar(7, dev)
    ops.fp8_cast_transpose(x, "e4m3", { amax = amax, accumulate = true })
    tap.is(amax:totable()[1], 7, what .. ": an accumulated amax keeps its value")

    amax, sinv = scalar(7, dev), scalar(0, dev)
    local gy, gyt = ops.fp8_cast_transpose(x, "e4m3", { gelu = true, scale = scalar(8, dev), amax = amax, scale_inv = sinv })
    tap.ok(shape_is(gy, r, c) and shape_is(gyt, c, tr) and amax:totable()[1] == 0 and sinv:totable()[1] == 0.125,
      what .. ": the GELU cast too (amax 0, scale_inv 1 / 8)")

    local h = tg.empty({ r, c }, { dtype = "bf16", device = dev })
    local chunks = ops.fp8_dbias_chunks(r)
    local part = tg.zeros({ chunks, c }, { dtype = "f32", device = dev }):fill_(9)
    amax, sinv = scalar(7, dev), scalar(0, dev)
    local dy8, dy8t = ops.fp8_cast_transpose(x, "e5m2", { gelu_x = h, dbias_part = part, amax = amax, scale_inv = sinv })
    local zeros = true
    for _, row in ipairs(part:totable()) do for _, v in ipairs(row) do zeros = zeros and v == 0 end end
    tap.ok(shape_is(dy8, r, c) and shape_is(dy8t, c, tr) and amax:totable()[1] == 0 and sinv:totable()[1] == 1,
      what .. ": the gradient form through gelu' with bias partials runs (amax 0, scale_inv 1)")
    tap.ok(zeros, string.format("%s: ... its %d x %d bias partials are all 0", what, chunks, c))
  end
end
tap.done_testing()
