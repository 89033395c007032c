-- lua-tensor-api.lua — the Lua tensor API computes what it says: constructors, shapes, totable, copy_, to(), dtypes, ops.
local tap = require "tap"
local tg = require "tegraph"

tap.ok(tg == _G.tg, "the global tg is require 'tegraph'")
tap.like(tg.version, "^%d+%.%d+%.%d+", "tg.version is a version string")
tap.like(tg.build_options, "cuda=", "tg.build_options names the CUDA option")
tap.is(tg.f32, "f32", "dtype names: tg.f32")
tap.is(tg.bf16, "bf16", "dtype names: tg.bf16")

-- constructors: shape as a table or as integers, options
local z = tg.zeros({2, 3}, { device = "cpu" })
tap.is_deeply(z:shape(), { 2, 3 }, "zeros({2,3}) has shape {2,3}")
tap.is(z:numel(), 6, "numel is 6")
tap.is(z:ndim(), 2, "ndim is 2")
tap.is(z:dim(1), 2, "dim(1) is 2 (1-based)")
tap.is(z:dim(-1), 3, "dim(-1) is the last dimension")
tap.is(z.dtype, "f32", "default dtype is f32")
tap.is(z.device, "cpu", "device field")
tap.is(z.name, nil, "no name by default")
tap.is(z:sum(), 0, "zeros sum to 0")

local o = tg.ones(4, 5, { dtype = "bf16", device = "cpu", name = "w" })
tap.is_deeply(o:shape(), { 4, 5 }, "ones(4, 5) takes integer dims")
tap.is(o.dtype, "bf16", "dtype option")
tap.is(o.name, "w", "name option")
tap.is(o:sum(), 20, "ones(4,5) sums to 20")
o.name = "renamed"
tap.is(o.name, "renamed", "name is writable")
tap.like(tostring(o), "bf16 %[4,5%] cpu 'renamed' {1, 1, 1, 1, 1, 1, 1, 1, ...}", "tostring shows dtype, shape, device, name, values")

local f = tg.full({3}, 2.5, { device = "cpu" })
tap.is_deeply(f:totable(), { 2.5, 2.5, 2.5 }, "full fills the value")

-- tensor from nested tables, and back
local t = tg.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = "cpu" })
tap.is_deeply(t:shape(), { 2, 3 }, "tensor() takes the shape of the nested table")
tap.is_deeply(t:totable(), { { 1, 2, 3 }, { 4, 5, 6 } }, "totable returns the nested values")
tap.is(t:sum(), 21, "sum of 1..6")
tap.is(tg.tensor({ 7 }, { device = "cpu" }):item(), 7, "item of a 1-element tensor")
tap.is(math.type(tg.tensor({ 1, 2 }, { dtype = "i32", device = "cpu" }):totable()[2]), "integer", "i32 totable gives integers")

-- bf16 rounds like the GPU stores: 1 + 2^-9 is not representable (8 bits of mantissa)
local b = tg.tensor({ 1 + 2 ^ -9, 1 + 2 ^ -7, 3.140625 }, { dtype = "bf16", device = "cpu" })
tap.is_deeply(b:totable(), { 1, 1 + 2 ^ -7, 3.140625 }, "bf16 rounds to nearest even")

-- copy_ and to()
local c = tg.zeros({ 2, 3 }, { device = "cpu" })
c:copy_(t)
tap.is_deeply(c:totable(), t:totable(), "copy_ from a tensor")
c:copy_({ { 6, 5, 4 }, { 3, 2, 1 } })
tap.is_deeply(c:totable(), { { 6, 5, 4 }, { 3, 2, 1 } }, "copy_ from a nested table")
tap.is(c:copy_(9):sum(), 54, "copy_ of a number fills, and returns self")

local tb = t:to("bf16")
tap.is(tb.dtype, "bf16", "to('bf16') converts the dtype")
tap.is_deeply(tb:totable(), t:totable(), "small integers survive f32 -> bf16")
tap.ok(not tb:same_memory(t), "to() with a change copies")
local same = t:to("cpu")
tap.ok(same:same_memory(t), "to() of the same device and dtype shares storage")
local back = tb:to({ dtype = "f32", device = "cpu" })
tap.is(back.dtype, "f32", "to{dtype=} back to f32")

-- clone, fill_, views
local cl = t:clone()
cl:fill_(1)
tap.is(t:sum(), 21, "clone does not share storage")
tap.is(cl:sum(), 6, "fill_ sets every element")

local v = t:view(3, 2)
tap.is_deeply(v:totable(), { { 1, 2 }, { 3, 4 }, { 5, 6 } }, "view(3, 2) reshapes")
tap.is_deeply(t:view(-1):shape(), { 6 }, "view(-1) infers the size")
tap.is_deeply(t:view({ 6, 1 }):shape(), { 6, 1 }, "view takes a table")
v:fill_(0)
tap.is(t:sum(), 0, "a view shares storage with its tensor")
t:copy_({ { 1, 2, 3 }, { 4, 5, 6 } })

local r = t:narrow(2, 1)
tap.is_deeply(r:totable(), { { 4, 5, 6 } }, "narrow(2, 1) is the second row (1-based start)")

-- elementwise ops
local a = tg.tensor({ 1, 2, 3 }, { device = "cpu" })
local d = tg.tensor({ 4, 5, 6 }, { device = "cpu" })
tap.is_deeply(a:add(d):totable(), { 5, 7, 9 }, "add")
tap.is_deeply(d:sub(a):totable(), { 3, 3, 3 }, "sub")
tap.is_deeply(a:mul(d):totable(), { 4, 10, 18 }, "mul")
tap.is_deeply(d:div(a):totable(), { 4, 2.5, 2 }, "div")
tap.is_deeply((a + d):totable(), { 5, 7, 9 }, "__add")
tap.is_deeply((a * 2):totable(), { 2, 4, 6 }, "tensor * number")
tap.is_deeply((10 - a):totable(), { 9, 8, 7 }, "number - tensor")
tap.is_deeply((-a):totable(), { -1, -2, -3 }, "__unm")
local acc = a:clone()
acc:add_(d)
tap.is_deeply(acc:totable(), { 5, 7, 9 }, "add_ in place")
acc:add_(d, -1)
tap.is_deeply(acc:totable(), { 1, 2, 3 }, "add_(x, alpha) adds alpha * x")
acc:axpby_(2, d, 3)
tap.is_deeply(acc:totable(), { 11, 16, 21 }, "axpby_(2, x, 3) = 2x + 3self")
acc:mul_(2):div_(4)
tap.is_deeply(acc:totable(), { 5.5, 8, 10.5 }, "mul_ and div_ chain")
tap.is(a:max_abs_diff(d), 3, "max_abs_diff")
tap.is((-d):max_abs(), 6, "max_abs")

-- matmul, plain and transposed, against hand-computed products
local A = tg.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = "cpu" })    -- [2,3]
local B = tg.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { device = "cpu" }) -- [3,2]
tap.is_deeply(A:matmul(B):totable(), { { 4, 5 }, { 10, 11 } }, "matmul [2,3] @ [3,2]")
tap.is_deeply(A:matmul(A, { trans_b = true }):totable(), { { 14, 32 }, { 32, 77 } }, "matmul with trans_b: A A^T")
tap.is_deeply(A:matmul(A, { trans_a = true }):shape(), { 3, 3 }, "matmul with trans_a: A^T A is [3,3]")
local C = tg.ones({ 2, 2 }, { device = "cpu" })
A:matmul(B, { out = C, beta = 1, alpha = 2 })
tap.is_deeply(C:totable(), { { 9, 11 }, { 21, 23 } }, "matmul into out with alpha and beta")

-- RNG: same seed, same numbers; statistics of randn
tg.manual_seed(1234)
local x1 = tg.randn({ 1000 }, { device = "cpu" })
tg.manual_seed(1234)
local x2 = tg.randn({ 1000 }, { device = "cpu" })
tap.is(x1:max_abs_diff(x2), 0, "manual_seed makes randn repeatable")
local mean = x1:sum() / 1000
tap.ok(math.abs(mean) < 0.15, "randn mean is near 0 (" .. mean .. ")")
local u = tg.rand({ 1000 }, { lo = 2, hi = 3, device = "cpu" })
local vals = u:totable()
local lo, hi = math.huge, -math.huge
for _, e in ipairs(vals) do lo, hi = math.min(lo, e), math.max(hi, e) end
tap.ok(lo >= 2 and hi <= 3 and hi - lo > 0.9, "rand respects lo/hi")

-- allclose
tap.ok(tg.allclose(a, { 1, 2, 3 }), "allclose against a table")
local okc, diff = tg.allclose(a, { 1, 2, 3.5 }, 0, 0.1)
tap.ok(not okc and diff == 0.5, "allclose reports false and the max difference")

-- devices
tap.ok(tg.device_count("cpu") == 1, "one cpu device")
local devs = tg.devices()
tap.is(devs[1].id, "cpu", "devices() lists the cpu first")
tap.ok(type(tg.default_device()) == "string", "default_device is a name")

-- closing
do
  local tmp <close> = tg.zeros({ 2 }, { device = "cpu" })
  tap.ok(not tmp:is_closed(), "a to-be-closed tensor is open in its scope")
  _G.escaped = tmp
end
tap.ok(_G.escaped:is_closed(), "<close> closes the tensor at the end of the scope")
tap.like(tostring(_G.escaped), "closed", "tostring of a closed tensor says so")

do -- tg.ops.cross_entropy_fused as the README states it: one result (the losses); dlogits written into the tensor given
  local lg = tg.randn({ 4, 10 }, { device = "cpu" })
  local tgt = tg.tensor({ 1, 2, 3, 9 }, { dtype = "i32", device = "cpu" })
  local loss, losses = tg.ops.cross_entropy_forward(lg, tgt)
  tap.is(select("#", tg.ops.cross_entropy_fused(lg, tgt, loss)), 1, "cross_entropy_fused returns only the losses")
  tap.is(tg.ops.cross_entropy_fused(lg, tgt, loss):max_abs_diff(losses), 0, "... the rows' losses")
  local ref = tg.ops.cross_entropy_backward(lg, tgt, loss, 0.5)
  local dl = tg.zeros({ 4, 10 }, { device = "cpu" })
  tg.ops.cross_entropy_fused(lg, tgt, loss, 0.5, -1, dl)
  tap.ok(dl:max_abs_diff(ref) < 1e-6, "the dlogits argument is written with dloss / loss[2] (softmax - onehot)")
  local inplace = tg.zeros({ 4, 10 }, { device = "cpu" }):copy_(lg)
  tg.ops.cross_entropy_fused(inplace, tgt, loss, 0.5, -1, inplace)
  tap.ok(inplace:max_abs_diff(ref) < 1e-6, "... in place when dlogits is the logits")
end

tap.done_testing()
