-- accepted-but-wrong-is-refused.lua — inputs that used to run to a wrong result are refused with a message naming them:
-- token ids outside the embedding table and targets outside the vocabulary (at once on the CPU, a replay included), values that do not fit an integer dtype, a delayed wgrad popped in a later step, module calls from
-- a wgrad hook, the same hook twice, AdamW options and parameters, a step before any gradient, make_graphed warm-up,
-- script option bounds, steps skipped for a non-finite gradient norm, and misspelt options of AdamW, the
-- communicator calls, the tensor constructors, tensor:to, tg.stream.capture, the safetensors readers, matmul,
-- step_begin, make_graphed, the gemm and AdamW ops, and non-boolean values of boolean options; token ids outside
-- the table in the embedding's gradient; module eps / init_std out of range; a forward pre-hook that calls its
-- own module; and messages that name the option, the tensor or count rows as the call does.
local tg = require "tegraph"
local optim = require "tegraph.optim"
local progress = require "tegraph.progress"
local cli = require "tegraph.cli"
local tap = require "tap"

------------------------------------------------------------------------ ids outside their table
-- on the CPU, where a bad id is refused at once (a GPU records it for the next read:
-- t/cuda-bad-ids-fail-at-the-next-read.lua)
local CPU = "cpu"
local emb = tg.nn.Embedding { num_embeddings = 8, embedding_dim = 4, max_position_embeddings = 4, device = CPU }
tap.error_like(function() return emb:forward(tg.tensor({ { 1, 2, 9, 3 } }, { dtype = "i32", device = CPU })) end,
  "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*embedding: token id 9 at position 2 is outside the table of 8 rows %(ids 0 to 7%)",
  "an Embedding id past the table is refused at once, naming the id and its position")
tap.error_like(function() return emb:forward(tg.tensor({ { -3, 2, 1, 3 }, { 0, 0, 0, 0 } }, { dtype = "i32", device = CPU })) end,
  "token id %-3 at position 0", "a negative id is refused too")
local y = emb:forward(tg.tensor({ { 7, 0, 1, 2 } }, { dtype = "i32", device = CPU }))
tap.is(#y:shape(), 3, "ids inside the table still embed")
do -- the table's gradient, called directly: a bad id is refused too, not dropped from the sum
  local dw = tg.zeros({ 10, 4 }, { device = CPU })
  local dout = tg.ones({ 1, 2, 4 }, { device = CPU })
  tap.error_like(function()
    return tg.ops.embedding_backward_dw(dw, nil, dout, tg.tensor({ { 0, 100000000 } }, { dtype = "i32", device = CPU }))
  end, "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*embedding: token id 100000000 at position 1 is outside the table of 10 rows",
    "embedding_backward_dw refuses an id past the table, naming it and its position")
  dw:fill_(0)
  tg.ops.embedding_backward_dw(dw, nil, dout, tg.tensor({ { 0, 9 } }, { dtype = "i32", device = CPU }))
  tap.is(dw:sum(), 8, "... and sums the gradient of ids inside it (rows 0 and 9: 8)")
end
local logits = tg.randn({ 4, 8 }, { device = CPU })
tap.error_like(function() return tg.ops.cross_entropy_forward(logits, tg.tensor({ 1, 2, 3, 70 }, { dtype = "i32", device = CPU })) end,
  "cross_entropy: target 70 at row 3 is outside the vocabulary of 8 %(targets 0 to 7, or the ignore_index%)",
  "a cross-entropy target past the vocabulary is refused, naming it and its row")
local loss = tg.ops.cross_entropy_forward(logits, tg.tensor({ 1, -1, 3, 7 }, { dtype = "i32", device = CPU }))
tap.is(loss:totable()[2], 3, "the ignore_index (-1) is not a bad target: 3 rows counted")
tap.error_like(function() return tg.ops.cross_entropy_forward(logits, tg.tensor({ 1, -1, 3, 7 }, { dtype = "i32", device = CPU }), 5) end,
  "target %-1 at row 1", "with another ignore_index, -1 is a bad target")
do -- the backward and the fused pass check their targets too (a bad one gave a zero row or a NaN loss)
  local bad = tg.tensor({ 1, 2, 3, 70 }, { dtype = "i32", device = CPU })
  tap.error_like(function() return tg.ops.cross_entropy_backward(logits, bad, loss) end,
    "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*cross_entropy: target 70 at row 3 is outside the vocabulary of 8",
    "cross_entropy_backward refuses a target past the vocabulary, naming it and its row")
  tap.error_like(function() return tg.ops.cross_entropy_fused(logits, bad, loss, 1, -1, tg.zeros({ 4, 8 }, { device = CPU })) end,
    "cross_entropy: target 70 at row 3 is outside the vocabulary of 8", "cross_entropy_fused refuses it too")
  tap.error_like(function() return tg.ops.cross_entropy_fused(logits, bad, loss) end, "target 70 at row 3",
    "... also without dlogits (losses only)")
  local ign = tg.tensor({ 1, -1, 3, 7 }, { dtype = "i32", device = CPU })
  local d = tg.ops.cross_entropy_backward(logits, ign, loss)
  tap.is(d:narrow(2, 1):max_abs(), 0, "the ignore_index stays allowed in the backward (its row is zero)")
  tap.is(tg.ops.cross_entropy_fused(logits, ign, loss):totable()[2], 0, "... and in the fused pass (its loss is 0)")
end
-- captured: the ids change before a replay; on the CPU the replay has run when it returns, so it fails itself,
-- naming the bad id (a GPU's replay fails the device's next read: t/cuda-bad-ids-fail-at-the-next-read.lua)
local ids = tg.tensor({ { 1, 2, 3, 3 } }, { dtype = "i32", device = CPU })
local wte = emb:parameters()[1].data
local pool = tg.pool(CPU)
local out
local g = tg.stream.capture(function() out = tg.ops.embedding_forward(ids, wte) end, { pool = pool, device = CPU })
ids:copy_(tg.tensor({ { 1, 2, 3, 12 } }, { dtype = "i32", device = CPU }))
tap.error_like(function() g:replay() end,
  "accepted%-but%-wrong%-is%-refused%.lua:%d+: embedding: token id 12 at position 3 is outside the table of 8 rows",
  "a CPU replay with a bad id fails at the replay, naming the id")
tap.lives_ok(function() return out:sum(), out:max_abs(), tostring(out), out:totable() end,
  "... once: the reads after it (sum, max_abs, tostring, totable) have nothing left to report")
ids:copy_(tg.tensor({ { 1, 2, 3, 4 } }, { dtype = "i32", device = CPU }))
tap.lives_ok(function() g:replay() end, "a replay with good ids runs")
tap.lives_ok(function() return out:totable() end, "... and reads fine")
tap.lives_ok(function() return tg.ones { 3 }:totable() end, "... and no later read is blamed for the earlier bad replay")

------------------------------------------------------------------------ integer dtypes
tap.error_like(function() return tg.tensor({ 1, 3e9 }, { dtype = "i32" }) end,
  "write: value 3000000000 at index 1 does not fit i32 %(integers %-2147483648 to 2147483647%)", "3e9 into i32 is refused")
tap.error_like(function() return tg.tensor({ 1.5 }, { dtype = "i32" }) end, "value 1.5 at index 0 does not fit i32",
  "1.5 into i32 is refused, not truncated")
tap.error_like(function() return tg.tensor({ 70000 }, { dtype = "u16" }) end, "value 70000 at index 0 does not fit u16 %(integers 0 to 65535%)",
  "70000 into u16 is refused, not clamped")
tap.error_like(function() return tg.tensor({ -1 }, { dtype = "u16" }) end, "value %-1 at index 0 does not fit u16", "-1 into u16 is refused")
tap.error_like(function() return tg.zeros({ 2 }, { dtype = "i32" }):fill_(0 / 0) end, "fill: value .*nan.* does not fit i32",
  "NaN as an i32 fill is refused")
tap.error_like(function() return tg.zeros({ 2 }, { dtype = "i32" }):fill_(2 ^ 31) end, "fill: value 2147483648 does not fit i32",
  "2^31 as an i32 fill is refused")
tap.is(tg.tensor({ -2 ^ 31, 2 ^ 31 - 1 }, { dtype = "i32" }):totable()[1], -2147483648, "the i32 range itself is accepted")
tap.is(tg.tensor({ 65535 }, { dtype = "u16" }):totable()[1], 65535, "the u16 range itself is accepted")
-- tensor-to-tensor conversions (to, copy_) refuse such values too, naming the first and its index
local F32 = { device = CPU }
tap.error_like(function() return tg.tensor({ 1.5, 3e9, -1 / 0, 0 / 0 }, F32):to("i32") end,
  "copy: value 1%.5 at index 0 of the f32 source does not fit i32 %(integers %-2147483648 to 2147483647%)",
  "f32 1.5 to i32 is refused, naming the value and its index (not truncated to 1)")
tap.error_like(function() return tg.tensor({ 1, 3e9 }, F32):to("i32") end, "value 3e%+09 at index 1 of the f32 source",
  "f32 3e9 to i32 is refused (not clamped to 2147483647)")
tap.error_like(function() return tg.tensor({ 0, -1 / 0 }, F32):to("i32") end, "value %-inf at index 1", "-inf to i32 is refused")
tap.error_like(function() return tg.tensor({ 0, 1, 0 / 0 }, F32):to("i32") end, "value %-?nan at index 2", "NaN to i32 is refused (not 0)")
tap.error_like(function() return tg.tensor({ 3, 70000, -1 }, { dtype = "i32", device = CPU }):to("u16") end,
  "copy: value 70000 at index 1 of the i32 source does not fit u16 %(integers 0 to 65535%)",
  "i32 70000 to u16 is refused (not clamped to 65535)")
tap.error_like(function() return tg.tensor({ 3, -1 }, { dtype = "i32", device = CPU }):to("u16") end,
  "value %-1 at index 1 of the i32 source does not fit u16", "i32 -1 to u16 is refused")
tap.error_like(function() return tg.tensor({ 1, 2.5 }, F32):to("bf16"):to("u16") end, "value 2%.5 at index 1 of the bf16 source",
  "bf16 2.5 to u16 is refused")
do
  local i = tg.tensor({ 7, 8 }, { dtype = "i32", device = CPU })
  tap.error_like(function() i:copy_(tg.tensor({ 2.7, -3e10 }, F32)) end, "copy: value 2%.7 at index 0 of the f32 source does not fit i32",
    "copy_ of f32 2.7 into i32 is refused")
  tap.is_deeply(i:totable(), { 7, 8 }, "... and the destination keeps its values")
end
tap.is_deeply(tg.tensor({ -2 ^ 31, 2 ^ 31 - 128, 3 }, F32):to("i32"):totable(), { -2147483648, 2147483520, 3 },
  "integral f32 values inside the i32 range convert")
tap.is_deeply(tg.tensor({ 0, 65535 }, { dtype = "i32", device = CPU }):to("u16"):totable(), { 0, 65535 }, "i32 0 and 65535 convert to u16")
tap.is_deeply(tg.tensor({ 0, 65535 }, { dtype = "u16", device = CPU }):to("i32"):totable(), { 0, 65535 }, "u16 to i32 converts")
tap.is(tg.tensor({ 1.5, 3e9, 0 / 0 }, F32):to("bf16"):to("f32"):totable()[1], 1.5, "float-to-float conversions are unchanged")

------------------------------------------------------------------------ outputs that overlap their inputs
do -- a GEMM writes C tile by tile while A and B are read: C must share no memory with them (a:matmul(b, {out = a}) was wrong)
  local a, b = tg.randn({ 8, 8 }, F32), tg.randn({ 8, 8 }, F32)
  tap.error_like(function() a:matmul(b, { out = a }) end, "gemm: C %[8,8%] f32 and A %[8,8%] f32 share memory",
    "matmul with out = its own left operand is refused")
  tap.error_like(function() a:matmul(b, { out = b }) end, "gemm: C %[8,8%] f32 and B %[8,8%] f32 share memory",
    "... and out = its right operand")
  tap.error_like(function() tg.ops.gemm(b, a, false, b, false) end, "C %[8,8%] f32 and B %[8,8%] f32 share memory",
    "tg.ops.gemm(d, c, false, d, false) is refused")
  local big = tg.randn({ 16, 8 }, F32)
  tap.error_like(function() big:narrow(1, 8):matmul(b, { out = big:narrow(5, 8) }) end, "share memory",
    "... and so is an output view that overlaps part of an operand")
  local ref = a:matmul(b)
  local out = tg.zeros({ 8, 8 }, F32)
  a:matmul(b, { out = out })
  tap.is(out:max_abs_diff(ref), 0, "an output apart from the operands is written as before")
end
do -- elementwise in place: the very same memory is fine, a partly overlapping view is not (c[i+1] += c[i] raced)
  local c = tg.arange(9, F32)
  tap.error_like(function() c:narrow(2, 8):add_(c:narrow(1, 8)) end,
    "add: out %[8%] f32 partly overlaps b %[8%] f32 %(in place, an output must be its input itself%)",
    "add_ of a view shifted by one over its own storage is refused")
  tap.error_like(function() c:narrow(1, 8):mul_(c:narrow(2, 8)) end, "mul: out %[8%] f32 partly overlaps b", "... mul_ too")
  tap.error_like(function() c:narrow(2, 8):axpby_(1, c:narrow(1, 8), 1) end, "axpby: y %[8%] f32 partly overlaps x", "... and axpby_")
  tap.error_like(function() c:narrow(2, 8):copy_(c:narrow(1, 8)) end,
    "copy: destination %[8%] f32 and source %[8%] f32 share memory", "... and a copy_ between overlapping views")
  local v = c:narrow(2, 4)
  v:add_(v)
  tap.is_deeply(c:totable(), { 0, 2, 4, 6, 8, 5, 6, 7, 8 }, "x:add_(x) in place on the same view still works")
  c:narrow(1, 4):add_(c:narrow(5, 4))
  tap.is_deeply(c:totable(), { 8, 7, 10, 13, 8, 5, 6, 7, 8 }, "views of one storage that do not overlap still add")
end

------------------------------------------------------------------------ the wgrad store and hooks
local lin = tg.nn.Linear(4, 4, { delay_wgrad = true })
local x, dy = tg.randn { 2, 4 }, tg.randn { 2, 4 }
tg.step_begin { microbatches = 1 }
lin:forward(x, 1)
lin:backward(dy, 1)
tap.error_like(function() tg.step_end() end,
  "step_end: step %d+ has delayed wgrads that have not run: Linear %(microbatch 1%) %(run their backward_dw before step_end, or drop them with drop_saved%(%); the step stays open%)",
  "step_end with a delayed wgrad of the step still queued is refused, naming the module and the microbatch")
tap.ok(tg.step_open(), "... and the step stays open")
lin:backward_dw(1)
tap.lives_ok(function() tg.step_end() end, "once the wgrad ran, step_end closes the step")
local lw = lin:parameters()[1]
tap.ok(lw.has_grad and lw.grad:max_abs() > 0, "... with the gradient in the weight")

lin:forward(x, 1) -- outside steps
lin:backward(dy, 1)
tap.error_like(function() tg.step_begin { microbatches = 1 } end,
  "step_begin: delayed wgrads queued outside steps have not run: Linear %(microbatch 1%)",
  "step_begin while a wgrad queued outside steps waits is refused, naming it")
tap.ok(not tg.step_open(), "... and opens no step")
lin:drop_saved()
tap.ok(not lin:need_backward_dw(), "drop_saved() drops the queued wgrads too")
tap.lives_ok(function() tg.step_begin { microbatches = 1 }; tg.step_end() end, "... and a step can begin again")

tg.step_begin { microbatches = 2 }
lin:forward(x, 1)
tap.error_like(function() lin:forward(x, 1) end,
  "forward of microbatch 1 again in step %d+ before its backward %(a module runs one forward per microbatch in a step: is it in the model twice%?%)",
  "a second forward of a microbatch in one step before its backward is refused")
tg.step_end()
tg.step_begin { microbatches = 2 }
tap.error_like(function() lin:backward(dy, 1) end,
  "backward of microbatch 1 in step (%d+), but its forward ran in step (%d+) %(a microbatch's forward and backward belong to one step; run the forward again%)",
  "a backward whose forward ran in an earlier step is refused, naming both steps")
lin:forward(x, 1)
tap.lives_ok(function() lin:backward(dy, 1); lin:backward_dw(1) end, "... and after the forward again it runs")
tg.step_end()
local seq = tg.nn.Sequential { lin, lin }
tg.step_begin { microbatches = 1 }
tap.error_like(function() seq:forward(x, 1) end, "forward of microbatch 1 again in step %d+ before its backward",
  "a module placed twice in a Sequential is refused at its second forward")
lin:drop_saved()
tg.step_end()
local seqd = tg.nn.Sequential { tg.nn.Linear(4, 4, { delay_wgrad = true }) }
tap.error_like(function() seqd:backward_dw(1) end,
  "backward_dw with nothing queued on Sequential or its children %(some delay their wgrad",
  "backward_dw on a Sequential of delayed modules with nothing queued says its children delay")

local lin2 = tg.nn.Linear(4, 4)
local calls = 0
lin2:register_wgrad_hook(function() calls = calls + 1; lin2:forward(x) end)
lin2:forward(x, 1)
tap.error_like(function() lin2:backward(dy, 1) end,
  "Linear forward called from a wgrad hook while a module call runs: hooks must not call modules' forward, backward or backward_dw",
  "a hook calling its module's forward re-entrantly is refused")
local lin3 = tg.nn.Linear(4, 4)
lin3:register_wgrad_hook(function() lin3:backward(dy, 1) end)
lin3:forward(x, 1)
tap.error_like(function() lin3:backward(dy, 1) end, "Linear backward %(microbatch 1%) called from a wgrad hook",
  "a hook calling its module's backward re-entrantly is refused")

local p = lin2:parameters()[1]
local f = function() end
p:register_hook(f)
tap.error_like(function() p:register_hook(f) end, "register hook on weight: this function is already one of its hooks %(hook id %d+%); it would fire twice",
  "the same hook function registered twice is refused")
tap.error_like(function() lin2:register_wgrad_hook(f) end, "already one of its hooks",
  "... through register_wgrad_hook too")
local fired = 0
local lin4 = tg.nn.Linear(4, 4)
local h = function() fired = fired + 1 end
lin4:register_wgrad_hook(h)
lin4:forward(x, 1)
lin4:backward(dy, 1)
tap.is(fired, 2, "one registration fires once per parameter (weight, bias)")

------------------------------------------------------------------------ AdamW
local function params()
  return { tg.nn.Parameter("w", tg.randn { 3, 2 }), tg.nn.Parameter("b", tg.randn { 2 }) }
end
local bad = {
  { { lr = -1e-3 }, "accepted%-but%-wrong%-is%-refused%.lua:%d+: AdamW: lr must be >= 0 %(got %-0.001%)", "a negative lr (at the caller's line)" },
  { { lr = 0 / 0 }, "AdamW: lr must be a finite number", "a NaN lr" },
  { { lr = math.huge }, "AdamW: lr must be a finite number %(got inf%)", "an infinite lr" },
  { { beta1 = 1 }, "AdamW: beta1 must be a number in %[0, 1%) %(got 1%)", "beta1 = 1" },
  { { beta2 = -0.1 }, "AdamW: beta2 must be a number in %[0, 1%)", "a negative beta2" },
  { { betas = { 0.9, 1.5 } }, "AdamW: beta2 must be a number in %[0, 1%) %(got 1.5%)", "betas = {0.9, 1.5}" },
  { { eps = 0 }, "AdamW: eps must be > 0 %(got 0%)", "eps = 0" },
  { { eps = -1e-8 }, "AdamW: eps must be > 0", "a negative eps" },
  { { weight_decay = -0.1 }, "AdamW: weight_decay must be >= 0", "a negative weight_decay" },
  { { max_norm = 0 }, "AdamW: max_norm must be > 0", "max_norm = 0" },
  { { lr = 1e-3, weight_decy = 0.1 }, "AdamW: unknown option 'weight_decy' %(known: beta1, beta2, betas, capturable, eps, foreach, lr, max_norm, no_decay, sync_norm, weight_decay%)",
    "a misspelt option (it would be ignored)" },
}
for _, b in ipairs(bad) do
  tap.error_like(function() optim.AdamW(params(), b[1]) end, b[2], b[3] .. " is refused at construction")
end
tap.error_like(function() require("tegraph.reduce.zero1").new { params = params(), eps = 0 } end,
  "accepted%-but%-wrong%-is%-refused%.lua:%d+: zero1: eps must be > 0", "zero1 refuses AdamW's bad options the same way")
tap.error_like(function() optim.AdamW({ tg.randn { 2 } }) end, "AdamW: params%[1%] is a tegraph.Tensor .*not a parameter",
  "a tensor in the parameter list is refused at construction")
tap.error_like(function() optim.AdamW({ params()[1], "w" }) end, "AdamW: params%[2%] is a string, not a parameter",
  "a string in the parameter list is refused")
local ps = params()
local before = ps[1].data:totable()
local opt = optim.AdamW(ps, { lr = 0.1, weight_decay = 0.5 })
tap.error_like(function() opt:step() end, "AdamW:step: no parameter has a gradient yet %(run a backward pass before the first step%)",
  "a step before any gradient is refused")
tap.is_deeply(ps[1].data:totable(), before, "... and the weights did not change")
tap.error_like(function() opt:step { lr = -1 } end, "AdamW:step: lr must be >= 0", "step{lr = -1} is refused")
local m = tg.nn.Linear(2, 2)
local om = optim.AdamW(m:parameters(), { lr = 0.1 })
m:forward(tg.randn { 3, 2 }, 1)
m:backward(tg.randn { 3, 2 }, 1)
tap.lives_ok(function() om:step() end, "after a backward pass the step runs")

------------------------------------------------------------------------ make_graphed, script options, skipped steps
tap.error_like(function() tg.graph.make_graphed(tg.nn.Linear(4, 4), { sample = tg.zeros { 2, 4 }, warmup = -5 }) end,
  "make_graphed: warmup must be >= 1 %(got %-5%)", "make_graphed{warmup = -5} is refused")

local defs = { { "layers", 2, "layers", min = 1 }, { "lr", 0.1, "lr", min = 0, max = 1 } }
local o, err = cli.try(defs, { "--layers", "-1" })
tap.ok(o == nil and err == "--layers must be at least 1 (got '-1')", "cli: a value under min is refused, naming the option")
o, err = cli.try(defs, { "--lr=2" })
tap.ok(o == nil and err == "--lr must be at most 1 (got '2')", "cli: a value over max is refused")
o = cli.try(defs, { "--layers", "3", "--lr", "0" })
tap.ok(o and o.layers == 3 and o.lr == 0, "cli: values within the bounds are accepted")
tap.error_like(function() cli.try({ { "name", "x", "a string", min = 1 } }, {}) end, "min needs a number option",
  "cli: a bound on a string option is the script's error")

local lines = {}
local sink = { write = function(self, ...) for _, v in ipairs { ... } do lines[#lines + 1] = v end return self end, flush = function() end }
local bar = progress.new { total = 10, out = sink, tty = false, every = 1, max_skips = 3 }
bar:update(1, { loss = 1, norm = 0.5 })
local l2 = bar:update(2, { loss = 1, norm = math.huge })
tap.like(l2, "skipped 1", "a step with an infinite gradient norm is counted in the progress line")
bar:update(3, { loss = 1, norm = 0 / 0 })
tap.is(bar.skipped, 2, "... NaN too")
bar:update(4, { loss = 1, norm = 0.3 })
tap.is(bar.consecutive_skips, 0, "a finite norm ends the run of skips")
bar:update(5, { loss = 1, norm = math.huge })
bar:update(6, { loss = 1, norm = math.huge })
tap.error_like(function() bar:update(7, { loss = 1, norm = math.huge }) end,
  "step 7: 3 steps in a row skipped: the loss or gradient norm is not finite %(loss 1, gradient norm inf%)", "max_skips steps in a row stop the run")
local bar2 = progress.new { total = 10, out = sink, tty = false, every = 1, max_skips = 2 }
bar2:update(1, { loss = 0 / 0, norm = 1.0, skipped = true })
tap.is(bar2.skipped, 1, "a step reported skipped (a NaN loss) counts though its norm is finite")
tap.error_like(function() bar2:update(2, { loss = 0 / 0, skipped = true }) end, "step 2: 2 steps in a row skipped",
  "... and two in a row stop a run with max_skips = 2")
------------------------------------------------------------------------ communicator options
-- a misspelt option of a collective, a send or a barrier would be ignored (a max that sums): refused, naming it
tap.error_like(function() tg.comm.all_reduce(tg.ones { 2 }, { opp = "max" }) end,
  "accepted%-but%-wrong%-is%-refused%.lua:%d+: all_reduce: unknown option 'opp' %(known: op, async, name%)",
  "all_reduce with a misspelt op option is refused")
tap.error_like(function() tg.comm.broadcast(tg.ones { 2 }, { root = 0, op = "sum" }) end,
  "broadcast: unknown option 'op' %(known: root, async, name%)", "broadcast refuses an option it does not take")
tap.error_like(function() tg.comm.barrier { nam = "epoch" } end, "barrier: unknown option 'nam' %(known: name%)",
  "barrier refuses a misspelt name")
tap.error_like(function() tg.comm.all_gather(tg.ones { 2 }, tg.ones { 2 }, { true }) end,
  "all_gather: unknown option number key %(known: async, name%)", "a list entry in the options is refused")
tap.is(tg.comm.all_reduce(tg.ones { 2 }, { op = "max", async = false, name = "x" }):totable()[1], 1,
  "known options are taken (one rank: the tensor as it is)")
-- a barrier inside a capture is host work that the replays would not repeat: refused on one rank as on several
tap.error_like(function() tg.stream.capture(function() tg.comm.barrier() end, { pool = tg.pool() }) end,
  "barrier: not allowed while %S+ captures", "a barrier inside a capture is refused on a one-rank world too")
tap.lives_ok(function() tg.comm.barrier() end, "... and a barrier outside a capture still runs")
tap.error_like(function() tg.stream.capture(function() tg.comm.group(function() end) end, { pool = tg.pool() }) end,
  "group: not allowed while %S+ captures", "a group inside a capture is refused on a one-rank world too")
tap.lives_ok(function() tg.comm.group(function() end) end, "... and a group outside a capture still runs")
------------------------------------------------------------------------ misspelt options of tensors, captures and files
for _, c in ipairs {
  { "tg.zeros", function() return tg.zeros({ 2 }, { dtyp = "bf16" }) end, "dtyp", "dtype, device, name" },
  { "tg.ones", function() return tg.ones({ 2 }, { devcie = CPU }) end, "devcie", "dtype, device, name" },
  { "tg.empty", function() return tg.empty({ 2 }, { nmae = "x" }) end, "nmae", "dtype, device, name" },
  { "tg.full", function() return tg.full({ 2 }, 3, { dtpye = "f32" }) end, "dtpye", "dtype, device, name" },
  { "tg.randn", function() return tg.randn({ 2 }, { sdt = 2 }) end, "sdt", "dtype, device, name, mean, std" },
  { "tg.rand", function() return tg.rand({ 2 }, { high = 2 }) end, "high", "dtype, device, name, lo, hi" },
  { "tg.tensor", function() return tg.tensor({ 1, 2 }, { type = "i32" }) end, "type", "dtype, device, name" },
  { "tg.arange", function() return tg.arange(3, { dtype = "i32", devices = CPU }) end, "devices", "dtype, device, name" },
  { "tensor:to", function() return tg.ones { 2 }:to { dtype = "bf16", devise = CPU } end, "devise", "dtype, device" },
  { "tg.stream.capture", function() return tg.stream.capture(function() end, { steam = tg.stream.current(CPU) }) end,
    "steam", "stream, pool, device" },
  { "tg.from_bytes", function() return tg.from_bytes(string.rep("\0", 8), "f32", { 2 }, { dev = CPU }) end, "dev",
    "device" },
} do
  tap.error_like(c[2], "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*" .. c[1]:gsub("%.", "%%.") .. ": unknown option '" ..
    c[3] .. "' %(known: " .. c[4] .. "%)", c[1] .. " refuses the misspelt option '" .. c[3] .. "', naming the known ones")
end
do -- the options of ops, steps and graphs: a misspelt key is refused, not ignored
  local a, b = tg.randn({ 3, 3 }, { device = CPU }), tg.randn({ 3, 3 }, { device = CPU })
  local m = tg.nn.Linear(4, 2, { device = CPU })
  local p, g, z = tg.ones({ 3 }, { device = CPU }), tg.ones({ 3 }, { device = CPU }), tg.zeros({ 3 }, { device = CPU })
  for _, c in ipairs {
    { "matmul", function() return a:matmul(b, { transb = true }) end, "transb", "trans_a, trans_b, alpha, beta, out, dtype" },
    { "step_begin", function() return tg.step_begin { microbatchs = 4 } end, "microbatchs", "microbatches" },
    { "make_graphed", function() return tg.graph.make_graphed(m, { sample = tg.ones({ 2, 4 }, { device = CPU }), microbatchs = 2 }) end,
      "microbatchs", "sample, microbatches, order, warmup, pool, share, reuse, chain, in_place, tuple" },
    { "gemm", function() return tg.ops.gemm(tg.zeros({ 3, 3 }, { device = CPU }), a, false, b, false, 1, 0, { epilog = "bias" }) end,
      "epilog", "epilogue, bias, aux, bgrad, bgrad_accumulate" },
    { "adamw_step", function() return tg.ops.adamw_step(p, nil, g, z, tg.zeros({ 3 }, { device = CPU }), { lr = 0.1, step = 1, betaa = 3 }) end,
      "betaa", "lr, step, beta1, beta2, eps, weight_decay, grad_scale" },
  } do
    tap.error_like(c[2], "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*" .. c[1] .. ": unknown option '" .. c[3] ..
      "' %(known: " .. c[4]:gsub("%p", "%%%0") .. "%)", c[1] .. " refuses the misspelt option '" .. c[3] .. "'")
  end
  tap.ok(not tg.step_open(), "... and the refused step_begin opened no step")
  tap.error_like(function() return tg.step_begin { microbatches = "x" } end,
    "step_begin: microbatches must be an integer %(got string x%)", "step_begin names a microbatches that is not an integer")
  tap.error_like(function() return tg.graph.make_graphed(42, { sample = a }) end,
    "make_graphed: the first argument must be a module or a list of modules %(got a number%)",
    "make_graphed names a first argument that is not a module")
  tap.error_like(function() return tg.graph.make_graphed(m, { sample = a, microbatches = 0 }) end,
    "make_graphed: opts%.microbatches = 0 is out of range %(an integer from 1 to 1048576%)", "make_graphed names a bad microbatches")
  tap.ok(a:matmul(b, { trans_b = true }):max_abs_diff(a:matmul(b)) > 0, "matmul takes its known option trans_b (a @ b^T is not a @ b)")
end
do -- the Lua library's option tables: graph_modules, zeros_like, data.tokenize, fp8.amax_reduce and order entries
  local layer = tg.nn.TransformerLayer(16, 64, 2, { device = CPU })
  local sample = tg.randn({ 1, 4, 16 }, { device = CPU })
  tap.error_like(function() local set = tg.graph.graph_modules(layer, { "attn", "mlp" }, { sample = sample, microbatch = 4 }); return set end,
    "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*graph_modules: unknown option 'microbatch' %(known: microbatches, order, pool, sample, share, warmup%)",
    "graph_modules refuses the misspelt option 'microbatch' (the set was made for 1 microbatch)")
  tap.error_like(function()
    return tg.graph.graph_modules(layer, { "attn" }, { sample = sample, order = { { op = "F", mb = 1, chunck = 1 } } })
  end, "graph_modules: order%[1%]: unknown option 'chunck' %(known: chunk, mb, op%)", "... and a misspelt key of an order entry")
  tap.error_like(function()
    return tg.graph.make_graphed(m, { sample = tg.ones({ 2, 4 }, { device = CPU }), order = { { op = "F", mb = 1, chnk = 1 } } })
  end, "make_graphed: order%[1%]: unknown option 'chnk' %(known: op, chunk, mb, w%)", "make_graphed refuses a misspelt key of an order entry")
  tap.error_like(function() return tg.zeros_like(tg.ones({ 2 }, { device = CPU }), { dtyp = "bf16" }) end,
    "zeros_like: unknown option 'dtyp' %(known: device, dtype, name%)", "zeros_like refuses the misspelt option 'dtyp' (it made f32)")
  tap.is(tg.zeros_like(tg.ones({ 2 }, { device = CPU }), { dtype = "bf16" }).dtype, "bf16", "zeros_like takes its known option dtype")
  tap.error_like(function() return tg.data.tokenize("no-such-file.txt", {}, { tokeniser_id = "x" }) end,
    "data%.tokenize: unknown option 'tokeniser_id' %(known: progress, quiet, tokenizer_id%)", "data.tokenize refuses a misspelt option")
  tap.error_like(function() return tg.fp8.amax_reduce { model = layer, comm = tg.comm.world(), op = "max" } end,
    "fp8%.amax_reduce: unknown option 'op' %(known: comm, model%)", "fp8.amax_reduce refuses an unknown option")
end
do -- module options out of range are refused, not replaced by a default; messages name the option or the value
  tap.error_like(function() return tg.nn.LayerNorm(4, { eps = -1, device = CPU }) end,
    "nn%.LayerNorm: option 'eps' must be a finite number > 0 %(got number %-1%)", "LayerNorm refuses eps = -1 (it was taken as 1e-5)")
  tap.error_like(function() return tg.nn.Linear(4, 2, { init_std = 0 / 0, device = CPU }) end,
    "nn%.Linear: option 'init_std' must be a finite number >= 0", "Linear refuses init_std = NaN (it gave zero weights)")
  tap.error_like(function() return tg.nn.Linear(4, 2, { init_std = -1, device = CPU }) end, "option 'init_std' must be",
    "... and a negative init_std")
  tap.error_like(function() return tg.nn.LayerNorm(4, { eps = "x", device = CPU }) end,
    "nn%.LayerNorm: option 'eps' must be a finite number > 0 %(got string x%)", "a non-number option is named")
  tap.error_like(function() return tg.nn.Linear(4, 2, { eps = 1e-5, device = CPU }) end,
    "nn%.Linear: unknown option 'eps' %(known: in_features, out_features, bias, init_std, fp8, dtype",
    "an option the module has no use for (a Linear has no norm) is refused, not ignored")
  tap.error_like(function() return tg.nn.Embedding(8, 4, { bias = true, device = CPU }) end,
    "nn%.Embedding: unknown option 'bias'", "... an Embedding's bias")
  tap.error_like(function() return tg.nn.RMSNorm(4, { bias = true, device = CPU }) end,
    "nn%.RMSNorm: unknown option 'bias'", "... an RMSNorm's bias")
  tap.error_like(function() return tg.nn.LayerNorm(4, { init_std = 1, device = CPU }) end,
    "nn%.LayerNorm: unknown option 'init_std'", "... a LayerNorm's init_std")
  tap.error_like(function() return tg.nn.Sequential { tg.nn.Linear(4, 4), eps = 1 } end,
    "nn%.Sequential: unknown option 'eps'", "... a Sequential's eps")
  tap.error_like(function() return tg.nn.Linear(4, 2, { name = {}, device = CPU }) end,
    "nn%.Linear: option 'name' must be a string %(got a table%)", "a non-string name is named")
  tap.is(tg.nn.Linear(4, 2, { init_std = 0, device = CPU }):parameters()[1].data:max_abs_diff(tg.zeros({ 2, 4 }, { device = CPU })), 0,
    "init_std = 0 still gives zero weights")
  tap.error_like(function() return tg.fp8.CurrentScaling { fp8_fromat = "E4M3" } end,
    "CurrentScaling: unknown field 'fp8_fromat' %(known: fp8_format%)", "a misspelt recipe field lists the known fields")
  tap.error_like(function() return tg.zeros({ 4, 3 }, { device = CPU }):narrow(3, 5) end,
    "narrow: 5 rows from row 3 %(1%-based%) out of range for shape %[4,3%]", "narrow's error counts rows as its arguments do")
  tap.error_like(function() return tg.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = CPU }):narrow(2, 1, 2) end,
    "narrow%(start, len%) takes rows of the first dimension %(start 1%-based%), got 3 arguments",
    "PyTorch's narrow(dim, start, length) is refused (it returned row 2)")
  tap.error_like(function() return tg.zeros({ 4, 3 }, { device = CPU }):narrow(2, math.maxinteger) end,
    "narrow: 9223372036854775807 rows from row 2", "... without overflow")
  tap.error_like(function() return tg.nn.Linear(4, 2, { device = CPU }):forward(tg.ones({ 3, 4 }, { device = CPU }), 2 ^ 40) end,
    "microbatch must be >= 1 and <= 1073741824", "a microbatch too large is called too large")
  tg.step_begin(2)
  tap.error_like(function() return tg.nn.Linear(4, 2, { device = CPU }):forward(tg.ones({ 3, 4 }, { device = CPU }), 3) end,
    "microbatch 3, but the open step has 2 microbatches", "a forward of microbatch 3 in a step of 2 is refused (its backward was)")
  tg.step_end()
  local closed = tg.ones({ 2 }, { device = CPU })
  closed:close()
  tap.error_like(function() tg.save(os.tmpname(), { a = closed }) end, "tensor 'a' was closed", "tg.save names a closed tensor")
  local lin = tg.nn.Linear(4, 2, { device = CPU })
  lin:register_forward_pre_hook(function(mm) mm:forward(tg.ones({ 3, 4 }, { device = CPU })) end)
  local ok, err = pcall(function() return lin:forward(tg.ones({ 3, 4 }, { device = CPU })) end)
  tap.ok(not ok and err:find("called from one of its own forward pre%-hooks") ~= nil and #err < 2000,
    "a forward pre-hook calling its own module's forward is refused at once (not a C stack overflow): " .. tostring(err):sub(1, 120))
end
tap.error_like(function() return tg.zeros({ 2 }, { "bf16" }) end, "tg%.zeros: unknown option number key",
  "a list entry in a constructor's options is refused")
do
  local path = os.tmpname()
  tg.save(path, { w = tg.ones({ 3 }, { device = CPU }) })
  tap.error_like(function() return tg.load(path, { devcie = CPU }) end, "tg%.load: unknown option 'devcie' %(known: device%)",
    "tg.load refuses a misspelt option")
  local t = tg.load(path, { device = CPU })
  tap.is(t.w:totable()[3], 1, "tg.load with its known option loads")
  os.remove(path)
end
-- boolean options take booleans: 0 is true in Lua, so a number there would silently mean the opposite
for _, c in ipairs {
  { "bias", function() return tg.nn.Linear(4, 4, { bias = 0, device = CPU }) end },
  { "delay_wgrad", function() return tg.nn.Linear(4, 4, { delay_wgrad = 1, device = CPU }) end },
  { "async", function() return tg.comm.all_reduce(tg.ones { 2 }, { async = 0 }) end },
  { "accumulate", function()
    return tg.ops.fp8_cast(tg.ones({ 2 }, { device = CPU }), "e4m3", { accumulate = 0 }) end },
  { "gelu", function()
    return tg.ops.fp8_cast_transpose(tg.ones({ 2, 2 }, { device = CPU }), "e4m3", { gelu = "yes" }) end },
} do
  tap.error_like(c[2], "accepted%-but%-wrong%-is%-refused%.lua:%d+: .*option '" .. c[1] ..
    "' must be a boolean %(true or false%), got a", "option '" .. c[1] .. "' refuses a non-boolean")
end
tap.is(#tg.nn.Linear(4, 4, { bias = false, device = CPU }):parameters(), 1, "bias = false still makes a Linear without a bias")
local z = tg.randn({ 4 }, { dtype = "f32", device = CPU, name = "z", mean = 5, std = 0 })
tap.is(z:totable()[4], 5, "known constructor options are taken (randn mean 5, std 0)")
tap.is(tg.ones { 2 }:to({ dtype = "bf16", device = CPU }).dtype, "bf16", "tensor:to with its known options converts")
------------------------------------------------------------------------ steps, gradients and options
do -- hooks do not begin or end steps: a step_end from a hook would cut the step's bookkeeping in two
  local lh = tg.nn.Linear(4, 4, { device = CPU })
  local xh = tg.randn({ 2, 4 }, { device = CPU })
  for _, call in ipairs { "step_end", "step_begin" } do
    local _, id = lh:parameters()[1]:register_hook(function()
      if call == "step_end" then tg.step_end() else tg.step_begin { microbatches = 1 } end
    end)
    tg.step_begin { microbatches = 1 }
    lh:forward(xh, 1)
    tap.error_like(function() lh:backward(xh, 1) end, call .. " called from a wgrad hook %(steps begin and end outside hooks%)",
      call .. " from a wgrad hook is refused")
    tap.ok(tg.step_open(), "... and the step is still open")
    lh:parameters()[1]:remove_hook(id)
    lh:drop_saved()
    tg.step_end()
  end
  lh:register_forward_pre_hook(function() tg.step_end() end)
  tg.step_begin { microbatches = 1 }
  tap.error_like(function() lh:forward(xh, 1) end, "step_end called from a forward pre%-hook", "... and from a forward pre-hook")
  tg.step_end()
end

do -- outside steps a microbatch number is a label: a large one costs no memory per number
  local lm = tg.nn.Linear(4, 4, { device = CPU })
  local seen
  lm:parameters()[1]:register_hook(function(_, info) seen = info.microbatch end)
  local xm = tg.randn({ 2, 4 }, { device = CPU })
  lm:forward(xm, 1000000000)
  tap.lives_ok(function() lm:backward(xm, 1000000000) end, "a backward of microbatch 1e9 outside steps runs")
  tap.is(seen, 1000000000, "... and its hooks see that microbatch")
end

do -- reading a gradient is not having one; p.grad = t is
  local lg = tg.nn.Linear(4, 4, { device = CPU })
  local w, b = lg:parameters()[1], lg:parameters()[2]
  local opt = tg.optim.AdamW({ w, b }, { lr = 0.1 })
  local _ = tostring(w.grad), tostring(w.wgrad), tostring(w.main_grad)
  tap.ok(not w.has_grad, "reading p.grad / p.wgrad does not give p a gradient")
  tap.error_like(function() opt:step() end, "no parameter has a gradient yet", "... so a step before any backward is refused")
  w.grad = tg.ones({ 4, 4 }, { device = CPU })
  tap.ok(w.has_grad and w.grad:sum() == 16, "p.grad = t copies t in and gives p a gradient")
  tap.lives_ok(function() opt:step() end, "... and the step runs")
  tap.error_like(function() w.grad = tg.ones({ 2, 8 }, { device = CPU }) end,
    "Parameter 'weight': grad is %[4,4%], the tensor given is %[2,8%]", "p.grad = t of another shape is refused")
  tap.error_like(function() w.name = "x" end, "field 'name' cannot be set %(settable: data, grad, main_grad, wgrad%)",
    "other fields are read-only")
end

do -- p.data = t sets a bf16 parameter's values in its f32 master too, so the next step starts from them
  local lb = tg.nn.Linear(2, 2, { device = CPU, dtype = "bf16", bias = false })
  local w = lb:parameters()[1]
  local opt = tg.optim.AdamW({ w }, { lr = 0, weight_decay = 0 })
  w.grad = tg.zeros({ 2, 2 }, { device = CPU })
  local vals = tg.tensor({ { 1, 2 }, { 3, 4.5 } }, { device = CPU })
  w.data = vals
  tap.is(w.master:max_abs_diff(vals), 0, "p.data = t writes the f32 master of a bf16 parameter")
  opt:step()
  tap.is(w.data:to("f32"):max_abs_diff(vals), 0, "... so an lr-0 step keeps the values set (not the old master's)")
  tap.error_like(function() w.data = tg.ones({ 4, 1 }, { device = CPU }) end,
    "Parameter 'weight': data is %[2,2%], the tensor given is %[4,1%]", "p.data = t of another shape is refused")
  local lf = tg.nn.Linear(2, 2, { device = CPU, bias = false })
  lf:parameters()[1].data = vals
  tap.is(lf:parameters()[1].data:max_abs_diff(vals), 0, "p.data = t on an f32 parameter copies t in")
end

for _, k in ipairs { "lr", "eps", "weight_decay", "beta1" } do
  local lp = tg.nn.Linear(2, 2, { device = CPU })
  tap.error_like(function() tg.optim.AdamW(lp:parameters(), { [k] = false }) end, "AdamW: " .. k .. " must be .* %(got boolean%)",
    "AdamW{" .. k .. " = false} is refused, not taken as the default")
end

do -- misspelt options of the reduce policies and the FP8 amax reduce are refused, not ignored
  local lz = tg.nn.Linear(4, 4, { device = CPU })
  tap.error_like(function() tg.reduce.zero1 { params = lz:parameters(), weight_decy = 0.1 } end,
    "zero1: unknown option 'weight_decy' %(known: ", "zero1{weight_decy = } is refused naming the known options")
  tap.error_like(function() tg.fp8.amax_reduce { model = lz, comn = 1 } end, "fp8.amax_reduce: unknown option 'comn'",
    "fp8.amax_reduce{comn = } too")
end

do -- hooks: all or none, each function once, switches take booleans
  local a = tg.nn.Linear(4, 4, { device = CPU })
  local f = function() end
  a:parameters()[2]:register_hook(f) -- the bias has f already: the module-wide registration must add nothing
  tap.error_like(function() a:register_wgrad_hook(f) end, "this function is already one of its hooks",
    "a module-wide hook that one parameter already has is refused")
  tap.is(a:parameters()[1].nhooks, 0, "... and no parameter got it (all or none)")
  local g = function() end
  local m, ids = a:register_wgrad_hook(g)
  tap.ok(m == a and #ids == 2 and a:parameters()[1].nhooks == 1, "register_wgrad_hook returns the module and the ids")
  a:parameters()[1]:remove_hook(ids[1])
  tap.is(a:parameters()[1].nhooks, 0, "... which remove_hook takes")
  local pre = function() end
  a:register_forward_pre_hook(pre)
  tap.error_like(function() a:register_forward_pre_hook(pre) end, "this function is already one of its pre%-hooks",
    "the same forward pre-hook twice is refused (it would run twice)")
  tap.error_like(function() tg.hook_check("off") end, "boolean expected", "tg.hook_check('off') is refused (it read as on)")
end

do -- modules written as Lua tables: their options and their dx are checked
  local w = tg.nn.Parameter("lw", tg.randn({ 4, 4 }, { device = CPU }))
  local function lua_mod(extra)
    local t = { params = { w } }
    function t:forward(x) return x:clone() end
    function t:backward(dy) return dy:clone() end
    for k, v in pairs(extra) do t[k] = v end
    return t
  end
  tap.error_like(function() tg.nn.Module(lua_mod { delay_wgrad = true }) end,
    "a Lua module with delay_wgrad = true needs a backward_dw function", "delay_wgrad without backward_dw is refused")
  tap.error_like(function() tg.nn.Module(lua_mod { name = 5 }) end, "a Lua module's name must be a string",
    "a name that is not a string is refused")
  tap.error_like(function() tg.nn.Module(lua_mod { chunk = 0 }) end,
    "a Lua module's chunk must be an integer from 1 to", "chunk = 0 is refused")
  local bad = lua_mod {}
  function bad:backward() return tg.zeros({ 3, 3 }, { device = CPU }) end
  local mb = tg.nn.Module(bad)
  local x = tg.randn({ 2, 4 }, { device = CPU })
  mb:forward(x, 1)
  tap.error_like(function() mb:backward(x, 1) end,
    "backward %(microbatch 1%) returned dx %[3,3%] f32, but its input was %[2,4%] f32",
    "a Lua module's dx of another shape than its input is refused")
end

tap.done_testing()
