-- ops-copy-multi-copies-each-pair.lua — tg.ops.copy_multi(dsts, srcs) gives each destination what its own copy_ would
-- (f32 -> bf16 rounded to nearest even, bf16 -> f32, same dtypes bit for bit), leaves the elements around a
-- destination alone, handles more pairs than one launch's table and pairs longer than one work item, and refuses
-- mismatched pairs naming them. On a GPU (when there is one) the same copies equal the CPU's bit for bit.
local tg = require "tegraph"
local tap = require "tap"
local ops = tg.ops

local function bits_equal(a, b) return a:to("f32"):max_abs_diff(b:to("f32")) == 0 end
local C = { device = "cpu" } -- the CPU part pins its tensors (a GPU machine's default device is the GPU)
local function on_cpu(o) o = o or {}; o.device = "cpu"; return o end

-- the pairs: n elements each, values that need rounding to bf16 (1 + 2^-8 is a tie: to even, 1), both directions
local function make(dev, sizes, dts)
  local dsts, srcs = {}, {}
  tg.manual_seed(11)
  for i, n in ipairs(sizes) do
    local sdt, ddt = dts[i][1], dts[i][2]
    local v = tg.randn({ n }, { device = dev }):mul(1000)
    v:narrow(1, 1):fill_(1 + 2 ^ -8)
    srcs[i] = v:to(sdt)
    dsts[i] = tg.zeros({ n }, { dtype = ddt, device = dev })
  end
  return dsts, srcs
end

local sizes, dts = {}, {}
local kinds = { { "f32", "bf16" }, { "bf16", "f32" }, { "f32", "f32" }, { "bf16", "bf16" } }
for i = 1, 300 do -- more pairs than a launch's table (256), some longer than a work item (16384 elements)
  sizes[i] = (i % 50 == 0) and 40000 + i or (i * 37) % 500 + 1
  dts[i] = kinds[(i - 1) % 4 + 1]
end

local function check(dev)
  local dsts, srcs = make(dev, sizes, dts)
  ops.copy_multi(dsts, srcs)
  local ok = true
  for i = 1, #dsts do
    local want = tg.zeros({ sizes[i] }, { dtype = dts[i][2], device = dev })
    want:copy_(srcs[i])
    if not bits_equal(dsts[i], want) then
      ok = false
      io.stderr:write(string.format("%s pair %d (%s -> %s, %d elements) differs\n", dev, i, dts[i][1], dts[i][2], sizes[i]))
    end
  end
  tap.ok(ok, dev .. ": 300 pairs (f32/bf16 both ways, up to 40050 elements) equal one copy_ each")
  local tie = dsts[1]:narrow(1, 1):to("f32"):totable()[1]
  tap.is(tie, 1.0, dev .. ": f32 -> bf16 rounds the tie 1 + 2^-8 to even (1)")
  return dsts
end

local cpu = check("cpu")

-- the elements around a destination are not written
local buf = tg.full({ 10 }, 7, C)
ops.copy_multi({ buf:narrow(3, 4) }, { tg.ones({ 4 }, C) })
tap.is_deeply(buf:totable(), { 7, 7, 1, 1, 1, 1, 7, 7, 7, 7 }, "a destination view: only its 4 elements change")
tap.lives_ok(function() ops.copy_multi({}, {}) end, "no pairs: nothing to do")

-- refused, naming the pair
tap.error_like(function() ops.copy_multi({ tg.zeros({ 3 }, C), tg.zeros({ 4 }, C) }, { tg.ones({ 3 }, C), tg.ones({ 5 }, C) }) end,
  "copy_multi: pair 2: dst .*%[4%].* and src .*%[5%].* differ in size", "pair 2 of different sizes is refused, naming both shapes")
tap.error_like(function() ops.copy_multi({ tg.zeros({ 3 }, on_cpu { dtype = "i32" }) }, { tg.ones({ 3 }, C) }) end,
  "copy_multi: pair 1: dst .*i32.* must be f32 or bf16", "an i32 destination is refused")
tap.error_like(function() ops.copy_multi({ tg.zeros({ 3 }, C) }, {}) end, "copy_multi: 1 destinations but 0 sources",
  "lists of different lengths are refused")
tap.error_like(function() ops.copy_multi({ tg.zeros({ 3 }, C) }, { "x" }) end, "copy_multi: source 1 is not a tensor",
  "a source that is not a tensor is refused")

if tg.device_count("cuda") > 0 then
  local gpu = check("cuda:0")
  local all = true
  for i = 1, #cpu do
    local g = tg.zeros({ sizes[i] }, { dtype = dts[i][2], device = "cpu" })
    g:copy_(gpu[i])
    if not bits_equal(g, cpu[i]) then all = false end
  end
  tap.ok(all, "cuda:0: every pair equals the CPU's copy bit for bit")
  tap.error_like(function() ops.copy_multi({ tg.zeros({ 3 }, { device = "cuda:0" }) }, { tg.ones({ 3 }, { device = "cpu" }) }) end,
    "copy_multi: pair 1: .*on", "a source on another device than the destinations is refused")
else
  io.write("# no CUDA device: the GPU half does not run here\n")
end
tap.done_testing()
