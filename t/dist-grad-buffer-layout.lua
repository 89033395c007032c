-- dist-grad-buffer-layout.lua — grad buffers: main_grads are views laid out in backward order, aligned, in padded buckets, and wgrads land
-- there; on one rank (no launcher) the communicator is "self" and ddp / zero1 reduce to plain training.
local tg = require "tegraph"
local t = require "tap"
local reduce = require "tegraph.reduce"
local optim = require "tegraph.optim"

local D, H, TOK = 8, 12, 5

local function build(fuse)
  tg.manual_seed(55)
  return tg.nn.Sequential {
    tg.nn.Linear(D, H, { name = "fc_in", fuse_wgrad_accumulation = fuse }),
    tg.nn.LayerNormMLP(H, 2 * H, { name = "mlp", fuse_wgrad_accumulation = fuse }),
    tg.nn.Linear(H, D, { name = "fc_out", fuse_wgrad_accumulation = fuse }),
    name = "net",
  }
end

local function step(model, x, dy)
  tg.step_begin { microbatches = 1 }
  model:forward(x, 1)
  model:backward(dy, 1)
  tg.step_end()
end

-- layout
local model = build(false)
local params = model:parameters()
local gb = tg.comm.grad_buffer(params, { bucket_numel = 150, align = 16, pad_to = 4 })
local bp = gb:params()
local reversed = #bp == #params
for i = 1, #params do reversed = reversed and bp[i] == params[#params + 1 - i] end
t.ok(reversed, "buffer order is the reverse of parameters() (backward order)")
local aligned, disjoint, prev_end = true, true, 1
for _, p in ipairs(bp) do
  aligned = aligned and (gb:offset(p) - 1) % 16 == 0
  disjoint = disjoint and gb:offset(p) >= prev_end
  prev_end = gb:offset(p) + p:numel()
end
t.ok(aligned, "every parameter starts at a multiple of align (16)")
t.ok(disjoint and prev_end - 1 <= gb.numel, "parameters do not overlap and fit in the buffer")
local buckets = gb:buckets()
local cover, padded, sized, member = 1, true, true, true
for i, b in ipairs(buckets) do
  cover = (b.start == cover) and b.start + b.numel or -1
  padded = padded and b.numel % 4 == 0
  local held = gb:offset(b.params[#b.params]) + b.params[#b.params]:numel() - b.start
  if i < #buckets then sized = sized and held >= 150 end
  for _, p in ipairs(b.params) do
    member = member and gb:bucket_of(p) == i and gb:offset(p) >= b.start and gb:offset(p) + p:numel() <= b.start + b.numel
  end
end
t.ok(#buckets >= 3 and cover == gb.numel + 1, string.format("%d buckets tile the buffer of %d elements", #buckets, gb.numel))
t.ok(padded, "every bucket's size is a multiple of pad_to (4)")
t.ok(sized, "every bucket but the last holds at least bucket_numel (150) elements")
t.ok(member, "each parameter lies inside its bucket")
t.is(gb.nbuckets, #buckets, "nbuckets")
t.is(gb.nparams, #params, "nparams")

-- main_grad views, fused accumulation, wgrads in the buffer
local fused = true
for _, p in ipairs(params) do fused = fused and p.fused end
t.ok(fused, "the buffer turns fused wgrad accumulation on")
tg.manual_seed(3)
local x, dy = tg.randn({ TOK, D }), tg.randn({ TOK, D })
step(model, x, dy)
local ref = build(false)
step(ref, x, dy)
local rp = ref:parameters()
local same, inbuf = true, true
for i, p in ipairs(params) do
  same = same and tg.allclose(p.main_grad, rp[i].grad, 0, 0)
  inbuf = inbuf and tg.allclose(gb.data:narrow(gb:offset(p), p:numel()), p.main_grad:view(-1), 0, 0)
end
t.ok(same, "wgrads into the buffer equal the plain gradients, bit for bit")
t.ok(inbuf, "and are in the buffer, at each parameter's offset")
local b1 = buckets[1]
b1.tensor:fill_(2)
t.is(bp[1].main_grad:sum(), 2 * bp[1]:numel(), "a bucket's tensor is a view of its parameters' main_grads")
gb:zero()
t.is(gb.data:max_abs(), 0, "zero() clears the buffer")

-- existing main_grads are kept, tied parameters counted once
local m2 = build(true)
local p2 = m2:parameters()
p2[1].main_grad:fill_(0.25)
local dup = { p2[1], p2[2], p2[1] }
local g2 = tg.comm.grad_buffer(dup)
t.is(g2.nparams, 2, "a parameter listed twice (tied) is laid out once")
t.is(p2[1].main_grad:sum(), 0.25 * p2[1]:numel(), "the buffer starts with the parameters' main_grad values")
t.error_like(function() tg.comm.grad_buffer({}) end, "no parameters", "an empty list is refused")
t.error_like(function() tg.comm.grad_buffer({ p2[1], 42 }) end, "entry 2 is a number, not a parameter",
  "a non-parameter entry is named")

-- one rank: the "self" communicator
local c = tg.comm.world()
t.is(c:size(), 1, "without a launcher the world has one rank")
t.is(tg.comm.backend(), "self", "its backend is self")
local v = tg.tensor({ 1, 2, 3 })
t.is_deeply(tg.comm.all_reduce(v, { op = "avg" }):totable(), { 1, 2, 3 }, "all_reduce on one rank is the identity")
t.is_deeply(tg.comm.reduce_scatter(tg.zeros({ 3 }), v):totable(), { 1, 2, 3 }, "reduce_scatter copies")
t.is_deeply(tg.comm.all_gather(tg.zeros({ 3 }), v, { async = true }):wait():totable(), { 1, 2, 3 }, "all_gather copies")
t.error_like(function() tg.comm.send(v, 1) end, "peer 1 is not another rank", "send has no peer")
t.lives_ok(function() tg.comm.barrier() end, "barrier returns at once on one rank")
local g1, g2 = tg.comm.group(function() return 1, 2 end)
t.ok(g1 == 1 and g2 == 2, "group(fn) returns fn's results")
t.error_like(function() tg.comm.group(function() error("inside the group") end) end, "inside the group",
  "an error in a group's function propagates (and the group is closed)")

-- ddp and zero1 on one rank: plain training
local a, b, r0 = build(false), build(false), build(false)
local ddp = reduce.ddp { params = a:parameters(), bucket_numel = 100 }
local z = reduce.zero1 { params = b:parameters(), bucket_numel = 100, lr = 1e-2, weight_decay = 0.1 }
local oa = optim.AdamW(a:parameters(), { lr = 1e-2, weight_decay = 0.1 })
local o0 = optim.AdamW(r0:parameters(), { lr = 1e-2, weight_decay = 0.1 })
for s = 1, 2 do
  tg.manual_seed(10 + s)
  local xs, dys = tg.randn({ TOK, D }), tg.randn({ TOK, D })
  step(a, xs, dys)
  ddp:finish()
  oa:step()
  step(b, xs, dys)
  z:finish()
  z:step()
  step(r0, xs, dys)
  o0:step()
end
local eq_a, eq_b = true, true
for i, p in ipairs(r0:parameters()) do
  eq_a = eq_a and tg.allclose(a:parameters()[i].data, p.data, 0, 0)
  eq_b = eq_b and tg.allclose(b:parameters()[i].data, p.data, 0, 0)
end
t.ok(eq_a, "ddp + AdamW on one rank trains exactly like AdamW alone")
t.ok(eq_b, "zero1 on one rank trains exactly like AdamW alone")

t.done_testing()
