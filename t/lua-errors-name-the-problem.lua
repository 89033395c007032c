-- lua-errors-name-the-problem.lua — errors from Lua name the problem (dtype, shapes, closed tensors) at the caller's file:line.
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

tap.done_testing()
