-- lua-errors-name-the-problem.lua — errors from Lua name the problem (dtype, shapes, closed tensors) at the caller's file:line,
-- with the numbers as given (never an int-cast or block-relative value), and strings C would cut at a NUL are refused.
local tap = require "tap"
local tg = require "tegraph"

local cpu = { device = "cpu" }
local function here() return debug.getinfo(2, "l").currentline end
local file = debug.getinfo(1, "S").short_src

-- wrong dtype names
tap.error_like(function() tg.zeros({ 2 }, { dtype = "f64", device = "cpu" }) end,
  "unknown dtype 'f64'", "an unknown dtype is named")
tap.error_like(function() tg.zeros({ 2 }, { device = "tpu" }) end, "bad device 'tpu'", "an unknown device is named")
tap.error_like(function() tg.zeros({ 2, "x" }) end, "shape entry 2 is not an integer", "a bad shape entry is named")
tap.error_like(function() tg.zeros({ 1, 2, 3, 4, 5 }) end, "5 dimensions", "too many dimensions")
tap.error_like(function() tg.tensor({ { 1, 2 }, { 3 } }) end, "ragged table: element %[2%] has 1 elements, expected 2",
  "a ragged table is named with the offending row")
tap.error_like(function() tg.tensor({ 1, "two" }) end, "element %[2%] is a string", "a non-number element is named")

-- shape mismatches say both shapes
local a = tg.zeros({ 2, 3 }, cpu)
local b = tg.zeros({ 3, 2 }, cpu)
local line
local err = tap.error_like(function() line = here(); return a:add(b) end, "%[2,3%].*vs.*%[3,2%]",
  "add of [2,3] and [3,2] names both shapes")
tap.like(err or "", "^" .. file:gsub("%p", "%%%0") .. ":" .. tostring(line) .. ":",
  "the error position is the Lua caller's file:line")
tap.error_like(function() return a + b end, "shapes differ %(%[2,3%].*vs %[3,2%]", "__add names both shapes too")
tap.error_like(function() return a:matmul(a) end, "gemm: shapes do not match", "matmul with bad inner dimensions")
tap.error_like(function() return a:matmul(tg.zeros({ 6 }, cpu)) end, "matmul: expected two 2%-D or two 3%-D tensors, got %[2,3%] and %[6%]",
  "matmul of 2-D and 1-D is named")
tap.error_like(function() a:copy_({ 1, 2, 3 }) end, "table of shape %[3%].*tensor of shape %[2,3%]", "copy_ from a table of the wrong size")
tap.error_like(function() a:view(4, 2) end, "view: shape %[4,2%] has 8 elements, the tensor %[2,3%] has 6", "view with a wrong numel")
tap.error_like(function() a:narrow(3, 1) end, "narrow", "narrow out of range")
tap.error_like(function() a:item() end, "item: the tensor has 6 elements, expected 1", "item of a non-scalar")
tap.error_like(function() a:dim(3) end, "dimension out of range", "dim out of range")

-- wrong dtypes for an op
local ai = tg.zeros({ 2, 3 }, { dtype = "i32", device = "cpu" })
tap.error_like(function() return ai:add(ai) end, "dtype i32 is not a float type", "an op on i32 names the dtype")
local abf = tg.zeros({ 2, 3 }, { dtype = "bf16", device = "cpu" })
tap.error_like(function() return a:add(abf) end, "dtypes differ.*f32.*bf16", "mixed dtypes are named")

-- misuse raises argument errors
tap.error_like(function() a:add("x") end, "bad argument #1 to 'add' %(tensor or number expected, got string%)",
  "a string operand is an argument error")
tap.error_like(function() a.sum(nil) end, "tegraph.Tensor expected, got nil", "a method without self")
tap.error_like(function() a.shape = 1 end, "cannot set field 'shape'", "only name is writable")

-- use after close
local c = tg.zeros({ 2 }, cpu)
c:close()
tap.ok(c:is_closed(), "close() closes")
tap.error_like(function() return c:sum() end, "tensor used after close", "a method on a closed tensor")
tap.error_like(function() return c.dtype end, "tensor used after close", "a field of a closed tensor")
tap.error_like(function() return a:add(c) end, "tensor used after close", "a closed tensor as an argument")
tap.lives_ok(function() c:close() end, "closing twice is fine")
tap.ok(c:is_closed(), "and leaves the tensor closed")

-- errors raised inside a nested Lua function point at that function's line
local function inner() line = here(); return a:sub(b) end
err = tap.error_like(function() inner() end, "sub: shapes differ", "sub names the op")
tap.like(err or "", ":" .. tostring(line) .. ":", "the position is the line that called the method")


-- numbers in messages are the ones given
tap.error_like(function() return tg.zeros { math.mininteger } end, "shape entry 1 is negative %(%-9223372036854775808%)",
  "a shape entry of math.mininteger is named as it is (it read 0)")
tap.error_like(function() return tg.zeros { -(1 << 32) } end, "shape entry 1 is negative %(%-4294967296%)", "... and -(2^32)")
tap.error_like(function() return tg.arange(70000, { dtype = "u16" }) end,
  "arange: value 65536 at index 65536 does not fit u16 %(at most 65535; n = 70000%)",
  "arange into u16 names the index of the first value that does not fit in the tensor (it said index 0)")
tap.error_like(function() return tg.ones { 2 }:to("f64") end,
  "'f64' is neither a dtype %(f32, bf16, f16, i32, u16, e4m3, e5m2%) nor a device %(cpu, cuda, cuda:N%)",
  "t:to with an unknown name says it is neither a dtype nor a device (it said 'bad device')")
tap.error_like(function() return tg.ones { 2 }:to("gpu:0") end, "'gpu:0' is neither a dtype", "... and for a misspelt device")
tap.error_like(function() return tg.ones { 2 }:to("cuda:x") end, "cuda:x", "a name that starts as a device gets the device's message")
tap.error_like(function() return tg.comm.world():broadcast(tg.ones { 2 }, 1.5) end,
  "bad argument #2 to 'broadcast' %(broadcast: root = 1%.5 must be an integer rank",
  "broadcast with a root of 1.5 names the argument as the root (it said 'table expected, got number')")
tap.error_like(function() return tg.comm.world():all_reduce(tg.ones { 2 }, "sum") end,
  "all_reduce: the options must be a table {op, async, name} %(got string sum%)", "a collective's options that are not a table are named")
local lin = tg.nn.Linear(4, 3, cpu)
tap.error_like(function() return lin:forward({ tg.randn({ 2, 4 }, cpu) }) end,
  "Linear takes one tensor, not a list: forward%(x, mb%), not forward%({x}, mb%) %(got a list of 1%)",
  "forward({x}) on a one-input module says it takes a tensor, not a list (it said 'takes one input, got 1')")
tap.error_like(function() return lin:backward({ tg.randn({ 2, 3 }, cpu) }) end,
  "Linear takes one output gradient tensor, not a list: backward%(dy, mb%)", "... and backward({dy})")

-- strings C reads up to a NUL: paths and tensor names holding one are refused, never cut short
local dir = os.getenv("TMPDIR") or "/tmp"
local base = string.format("%s/tg-nul-%d", dir, math.random(1 << 30))
tap.error_like(function() tg.save(base .. "\0.txt", { x = tg.ones({ 2 }, cpu) }) end,
  "the path \"" .. base:gsub("%p", "%%%0") .. "\\0%.%.%.\" holds a NUL byte at byte " .. #base,
  "tg.save refuses a path with a NUL byte (it wrote to the path cut there)")
tap.ok(io.open(base, "rb") == nil, "... and wrote nothing at the cut path")
tap.error_like(function() tg.save(base .. ".safetensors", { ["x\0y"] = tg.ones({ 2 }, cpu) }) end,
  "the tensor name \"x\\0%.%.%.\" holds a NUL byte", "tg.save refuses a tensor name with a NUL byte, naming it")
tap.error_like(function() tg.save(base .. ".safetensors", { x = tg.ones({ 2 }, cpu) }, { ["k\0"] = "v" }) end,
  "the metadata key \"k\\0%.%.%.\" holds a NUL byte", "... and a metadata key with one")
tap.error_like(function() return tg.load(base .. "\0") end, "holds a NUL byte", "tg.load refuses a path with a NUL byte")
tap.error_like(function() return tg.safetensors.open(base .. "\0") end, "holds a NUL byte", "... safetensors.open too")
tap.error_like(function() return tg.fs.isdir(dir .. "\0x") end, "holds a NUL byte", "... and the fs functions (isdir)")
tap.error_like(function() return tg.data.open(base .. "\0.bin") end, "data%.open: the path .* holds a NUL byte",
  "data.open refuses a path with a NUL byte (io.open would cut it)")
tap.error_like(function() return tg.data.tokenize(base .. "\0.txt", {}) end, "data%.tokenize: the path .* holds a NUL byte",
  "... and data.tokenize")

-- element access: [] is not an index of tensors, and random fills take sound parameters
local t = tg.ones({ 3 }, cpu)
tap.error_like(function() return t[1] end,
  "tensors are not indexed with %[%] %(got t%[1%]%): t:narrow%(start, len%) gives rows of dimension 1, t:item%(%) the value",
  "t[1] is an error naming what to use (it returned nil)")
tap.error_like(function() return t[1.5] end, "got t%[1%.5%]", "... t[1.5] too")
tap.error_like(function() return t[nil] end, "got t%[nil%]", "... and t[nil]")
tap.error_like(function() t[1] = 2 end, "tensors are not indexed with %[%]", "... and t[1] = 2")
tap.is(t.nosuch, nil, "a name that is no method still reads nil (t.x)")
tap.error_like(function() return tg.randn({ 3 }, { std = -1 }) end, "randn: mean = 0 and std = %-1 must be finite, std >= 0",
  "randn with std = -1 is refused (it drew with std 1)")
tap.error_like(function() return tg.randn({ 3 }, { std = 0 / 0 }) end, "randn: mean = 0 and std = %-?nan must be finite",
  "randn with std = NaN is refused (it filled NaN)")
tap.error_like(function() return tg.randn({ 3 }, { mean = 1 / 0 }) end, "mean = inf", "randn with an infinite mean is refused")
tap.error_like(function() return tg.rand({ 3 }, { lo = 2, hi = 1 }) end, "rand: lo = 2 and hi = 1 must be finite, lo <= hi",
  "rand with lo > hi is refused")
tap.is(tg.randn({ 3 }, { std = 0, mean = 2 }):totable()[2], 2, "randn with std = 0 fills the mean")
tap.done_testing()
