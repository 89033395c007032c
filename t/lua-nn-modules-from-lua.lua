-- tegraph.nn from Lua: constructors and their option errors, Parameter fields sharing storage, FIFO microbatch
-- pairing, the LM head's loss and dloss, the GPT builder's tied table, and the tegraph.ops bindings' values.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local tap = require "tap"

local ops = tg.ops
tg.manual_seed(5)

local function names(m)
  local out = {}
  for i, p in ipairs(m:parameters()) do out[i] = p.name end
  return table.concat(out, " ")
end

-- constructors and parameter names / shapes
local lin = nn.Linear(4, 3, { name = "lin" })
tap.is(names(lin), "lin.weight lin.bias", "Linear has weight and bias")
tap.is_deeply(lin:parameters()[1].shape, { 3, 4 }, "Linear weight is (out, in)")
tap.is(names(nn.Linear(4, 3, { name = "nb", bias = false })), "nb.weight", "bias = false drops the bias")
tap.is(names(nn.RMSNorm(4, { name = "r" })), "r.weight", "RMSNorm has a gain only")
tap.is(#nn.LayerNorm(4):parameters(), 2, "LayerNorm has gain and bias")
tap.ok(#nn.LayerNormMLP { hidden_size = 8, activation = "swiglu", normalization = "RMSNorm" }:parameters() >= 3, "LayerNormMLP (swiglu, RMSNorm) builds")
tap.ok(#nn.TransformerLayer({ hidden_size = 8, num_attention_heads = 2 }):parameters() >= 8, "TransformerLayer builds")
tap.ok(#nn.CausalSelfAttention(8, 2):parameters() >= 2, "CausalSelfAttention builds")
tap.ok(#nn.LayerNormLinear(8, 4):parameters() >= 3, "LayerNormLinear builds")
tap.is(lin.type, "Linear", "m.type")
tap.is(lin.name, "lin", "m.name")
tap.is(lin.exec_mode, "eager", "m.exec_mode")
tap.is(lin.delay_wgrad, false, "m.delay_wgrad")
tap.is(lin.chunk, 1, "m.chunk defaults to 1")
tap.like(tostring(lin), "tegraph.Module Linear 'lin'", "tostring names type and name")
tap.is(lin:num_parameters(), 15, "num_parameters counts elements")

tap.error_like(function() nn.Linear(4, 3, { delay_wgard = true }) end, "nn%.Linear: unknown option 'delay_wgard'",
  "a misspelt option is refused, named")
tap.error_like(function() nn.Linear { in_features = 4 } end, "nn%.Linear: option 'out_features' %(an integer%) is required",
  "a missing size is named")
tap.error_like(function() nn.Linear { in_features = 4, out_features = 0 } end, "'out_features' must be a positive integer, got 0",
  "a zero size is refused")
tap.error_like(function() nn.Linear(4, 3, { dtype = "f64" }) end, "unknown dtype 'f64'", "a bad dtype is named")
tap.error_like(function() nn.LMHead { hidden_size = 4, vocab_size = 5, tied = lin } end, "tied", "LMHead tied to a non-Embedding is refused")
tap.error_like(function() nn.Sequential {} end, "at least one module", "an empty Sequential is refused")
do -- a second head on one token table would leave its hooks waiting for a third contribution
  local emb = nn.Embedding(5, 4, { max_position_embeddings = 3, name = "twice" })
  local head1 = nn.LMHead { hidden_size = 4, vocab_size = 5, tied = emb }
  tap.error_like(function() nn.LMHead { hidden_size = 4, vocab_size = 5, tied = emb } end, "already tied to another LMHead",
    "tying a second LMHead to the same token table is refused")
end

-- Parameter fields share storage with the module
local W, Bp = lin:parameters()[1], lin:parameters()[2]
tap.is(W.name, "lin.weight", "p.name")
tap.is(W.dtype, "f32", "p.dtype")
tap.ok(W.data:same_memory(W.data), "p.data handles address the same elements")
W.data:copy_({ { 1, 0, 0, 0 }, { 0, 2, 0, 0 }, { 0, 0, 0, 3 } })
Bp.data:copy_({ 0.5, 0, 0 })
local x = tg.tensor({ { 1, 2, 3, 4 } })
tap.is_deeply(lin:forward(x):totable(), { { 1.5, 4, 12 } }, "writing p.data changes what forward computes")
lin:backward(tg.tensor({ { 1, 1, 1 } }))
tap.is_deeply(W.grad:totable(), { { 1, 2, 3, 4 }, { 1, 2, 3, 4 }, { 1, 2, 3, 4 } }, "p.grad holds dy^T x after backward")
tap.is(W.main_grad, nil, "no main_grad without fuse_wgrad_accumulation")
tap.ok(W.wgrad:same_memory(W.grad), "p.wgrad is grad when not fused")
W:zero_grad()
tap.is(W.grad:sum(), 0, "p:zero_grad() zeroes the gradient")
local fz = nn.Linear(2, 2, { fuse_wgrad_accumulation = true })
local fp = fz:parameters()[1]
tap.ok(fp.main_grad ~= nil and fp.main_grad.dtype == "f32" and fp.wgrad:same_memory(fp.main_grad),
  "fused: p.wgrad is the f32 main_grad")
local buf = tg.zeros({ 10 })
fp:set_main_grad(buf:narrow(1, 4))
fz:forward(tg.ones({ 1, 2 }))
fz:backward(tg.ones({ 1, 2 }))
tap.is(buf:sum(), 4.0, "set_main_grad: the wgrad lands in the given buffer")
local bl = nn.Linear(2, 2, { dtype = "bf16" })
tap.ok(bl.dtype == "bf16" and bl:parameters()[1].master ~= nil, "bf16 modules have f32 master weights")
tap.is(bl:forward(tg.ones({ 1, 2 }, { dtype = "bf16" })).dtype, "bf16", "and compute in bf16")
local bm, mbuf = bl:parameters()[1], tg.zeros({ 10 })
bm:set_master(mbuf:narrow(3, 4))
mbuf:narrow(3, 4):fill_(0.5)
tap.is_deeply(bm.master:totable(), { { 0.5, 0.5 }, { 0.5, 0.5 } },
  "set_master: a bf16 parameter's master is then the buffer's stretch, in the parameter's shape")
local ok_f32, err_f32 = pcall(fp.set_master, fp, buf:narrow(1, 4))
tap.ok(not ok_f32 and tostring(err_f32):find("has no f32 master copy", 1, true),
  "set_master refuses an f32 parameter (its data is the master): " .. tostring(err_f32))
local ok_n, err_n = pcall(bm.set_master, bm, mbuf:narrow(1, 3))
tap.ok(not ok_n and tostring(err_n):find("expected 4 f32 elements", 1, true),
  "set_master refuses a view of the wrong size, naming the size: " .. tostring(err_n))

-- In a step, omitting mb pairs each backward with the oldest forward waiting for one
do
  local m = nn.Linear(3, 2, { name = "fifo" })
  local x1, x2 = tg.randn({ 2, 3 }), tg.randn({ 2, 3 })
  local d1, d2 = tg.randn({ 2, 2 }), tg.randn({ 2, 2 })
  tg.step_begin { microbatches = 2 }
  m:forward(x1)
  m:forward(x2)
  local dx1 = m:backward(d1)
  local dx2 = m:backward(d2)
  tg.step_end()
  local g_fifo = m:parameters()[1].grad:clone()
  m:zero_grad()
  m:forward(x2, 7)
  m:forward(x1, 9)
  m:backward(d1, 9)
  m:backward(d2, 7)
  tap.ok(tg.allclose(m:parameters()[1].grad, g_fifo, 1e-6, 1e-7), "omitting mb pairs backward with forward in order")
  m:forward(x1, 3)
  local ok1 = tg.allclose(dx1, m:backward(d1, 3), 1e-6, 1e-7)
  m:forward(x2, 3)
  tap.ok(ok1 and tg.allclose(dx2, m:backward(d2, 3), 1e-6, 1e-7), "... and each dx is that of its own forward")
end
do
  local m = nn.Linear(3, 2, { name = "early" })
  tap.error_like(function() m:backward(tg.ones({ 1, 2 }), 4) end, "backward of microbatch 4 before its forward",
    "backward before forward is refused")
  tap.error_like(function() m:backward_dw() end, "backward_dw with nothing queued", "backward_dw with nothing queued is refused")
  tap.error_like(function() m:forward(tg.ones({ 1, 2 })) end, "x is %[1,2%] f32, expected", "a wrong input shape is named")
  tap.error_like(function() m:forward(tg.ones({ 1, 3 }), 0) end, "microbatch must be >= 1", "mb 0 is refused")
end

-- Sequential returns the same Module objects as children
do
  local a, b = nn.Linear(2, 2), nn.Linear(2, 2)
  local s = nn.Sequential { a, b, name = "s" }
  local kids = s:children()
  tap.ok(rawequal(kids[1], a) and rawequal(kids[2], b), "m:children() gives back the same Module objects")
end

-- LM head: the loss is the mean cross-entropy; backward(dloss) scales dx
do
  local head = nn.LMHead { hidden_size = 4, vocab_size = 5, name = "head" }
  local h = tg.randn({ 2, 3, 4 })
  local targets = tg.tensor({ { 1, 4, -1 }, { 0, 2, 3 } }, { dtype = "i32" })
  local loss = head:loss(h, targets)
  local logits = head:forward(h, 99)
  local ref = ops.cross_entropy_forward(logits:view(6, 5), targets:view(6))
  tap.near(nn.loss_value(loss), ref:totable()[1], 1e-6, "lm:loss is the mean cross-entropy of its logits")
  tap.is(loss:totable()[2], 5.0, "... over the 5 targets that are not ignore_index (-1)")
  head:drop_saved()
  head:loss(h, targets, 1)
  local dx1 = head:backward(nil, 1)
  head:loss(h, targets, 2)
  local dx4 = head:backward(0.25, 2)
  tap.ok(tg.allclose(dx4, dx1 * 0.25, 1e-5, 1e-8), "backward(0.25) gives a quarter of backward()'s dx")
  tap.error_like(function() head:backward(nil, 3) end, "forward_loss of microbatch 3 first", "LM head backward needs a loss")
end

-- GPT: the tied token table is listed once and its hooks fire once per microbatch
do
  local g = nn.GPT { vocab_size = 7, max_position_embeddings = 5, hidden_size = 8, num_attention_heads = 2, num_layers = 1 }
  local params = g:parameters()
  local seen, wte = {}, nil
  for _, p in ipairs(params) do
    seen[p.name] = (seen[p.name] or 0) + 1
    if p.name:match("wte") then wte = p end
  end
  tap.ok(wte and seen[wte.name] == 1 and wte.contributors == 2, "GPT lists the tied table once; it has 2 contributors")
  local fires = {}
  g:register_wgrad_hook(function(p, info) fires[p.name .. "@" .. info.microbatch] = (fires[p.name .. "@" .. info.microbatch] or 0) + 1 end)
  tg.step_begin { microbatches = 2 }
  local idx = tg.tensor({ { 1, 2, 3, 4, 5 } }, { dtype = "i32" })
  for mb = 1, 2 do
    g:forward_loss(idx, idx, mb)
    g:backward(0.5, mb)
  end
  tap.lives_ok(function() tg.step_end() end, "GPT step: every parameter fired once per microbatch (hook check)")
  tap.ok(fires[wte.name .. "@1"] == 1 and fires[wte.name .. "@2"] == 1, "the tied table fired once per microbatch, not twice")
  local out = g:generate({ { 1, 2 }, { 3, 4 } }, 3)
  tap.ok(#out == 2 and #out[1] == 3 and math.type(out[1][1]) == "integer", "generate returns n new tokens per prompt")
end

-- GPT with make_vocab_size_divisible_by: the token table and logits are rounded up, generation never picks a padded id
do
  local g = nn.GPT { vocab_size = 10, make_vocab_size_divisible_by = 8, max_position_embeddings = 4, hidden_size = 8,
    num_attention_heads = 2, num_layers = 1 }
  local wte
  for _, p in ipairs(g:parameters()) do if p.name:match("wte") then wte = p end end
  tap.is(wte.shape[1], 16, "vocab 10 padded to a multiple of 8: a 16-row token table")
  local logits = g:logits(tg.tensor({ { 1, 2, 3, 4 } }, { dtype = "i32" }))
  tap.is(logits:dim(3), 16, "... and 16 logits per position")
  -- real ids' rows zero (logit 0), padded ids' rows random: some padded id has the largest logit,
  -- yet generation must pick a real one
  tg.manual_seed(3)
  local pr = tg.randn({ 6, 8 }):totable()
  local rows = {}
  for i = 1, 16 do
    rows[i] = {}
    for j = 1, 8 do rows[i][j] = i > 10 and 10 * pr[i - 10][j] or 0 end
  end
  wte.data:copy_(tg.tensor(rows))
  local l2 = g:logits(tg.tensor({ { 1, 2, 0, 0 } }, { dtype = "i32" })):view(4, 16):totable()[2]
  tap.ok(nn.argmax(l2) > 10, string.format("(set-up: a padded id has the largest logit, id %d)", nn.argmax(l2) - 1))
  local out = g:generate({ { 1, 2 } }, 2)
  tap.ok(out[1][1] < 10 and out[1][2] < 10, string.format("generate picks ids below the real vocab (%d, %d)", out[1][1], out[1][2]))
  tap.error_like(function()
    nn.GPT { vocab_size = 10, make_vocab_size_divisible_by = 0, max_position_embeddings = 4, hidden_size = 8,
      num_attention_heads = 2, num_layers = 1 }
  end, "make_vocab_size_divisible_by must be a positive integer", "a bad make_vocab_size_divisible_by is named")
end

-- tegraph.ops against values computed by hand
do
  local xs = { -2, -0.5, 0, 1, 3 }
  local y = ops.gelu_forward(tg.tensor(xs)):totable()
  local worst = 0
  for i, v in ipairs(xs) do
    local ref = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
    worst = math.max(worst, math.abs(y[i] - ref))
  end
  tap.ok(worst < 1e-6, "gelu_forward is the tanh approximation")
  local a = tg.tensor({ { 1, 2, 3, 6 } })
  local ln = ops.layernorm_forward(a, tg.ones({ 4 }), tg.zeros({ 4 }), 0):totable()[1]
  tap.near(ln[1] + ln[2] + ln[3] + ln[4], 0, 1e-5, "layernorm_forward rows have mean 0")
  tap.near((ln[1] ^ 2 + ln[2] ^ 2 + ln[3] ^ 2 + ln[4] ^ 2) / 4, 1, 1e-4, "... and variance 1")
  local l = ops.cross_entropy_forward(tg.tensor({ { 0, 0, math.log(2) } }), tg.tensor({ 2 }, { dtype = "i32" }))
  tap.near(l:totable()[1], -math.log(0.5), 1e-6, "cross_entropy_forward: -log softmax of the target")
  local lg, tgt2 = tg.tensor({ { 0, 0, math.log(2) } }), tg.tensor({ 2 }, { dtype = "i32" })
  local fl = ops.cross_entropy_fused(lg, tgt2, l, 2, -1, lg)
  tap.near(fl:totable()[1], -math.log(0.5), 1e-6, "cross_entropy_fused: the row's loss")
  tap.is_deeply(lg:totable(), { { 0.5, 0.5, -1 } }, "... and dloss / count (softmax - onehot) in place of the logits", 1e-6)
  local sw = ops.swiglu_forward(tg.tensor({ { 1, 2 } })):totable()[1][1]
  tap.near(sw, 1 / (1 + math.exp(-1)) * 2, 1e-6, "swiglu_forward: silu(a) * b")
  local qkv = tg.tensor({ { { 1, 2, 3, 4, 5, 6 } } }) -- B=1, T=1, C=2: attention to itself returns v
  tap.is_deeply(ops.attention_forward(qkv, 1):totable(), { { { 5, 6 } } }, "attention_forward over one token returns v", 1e-6)
  local e = ops.embedding_forward(tg.tensor({ { 2, 0 } }, { dtype = "i32" }), tg.tensor({ { 1, 1 }, { 2, 2 }, { 3, 3 } }))
  tap.is_deeply(e:totable(), { { { 3, 3 }, { 1, 1 } } }, "embedding_forward picks rows of the table")
  tap.near(ops.sumsq(tg.tensor({ 3, 4 })), 25, 1e-6, "sumsq")
  tap.is_deeply(ops.bias_add(tg.zeros({ 2, 2 }), tg.tensor({ 1, 2 })):totable(), { { 1, 2 }, { 1, 2 } }, "bias_add adds per column")
  tap.is_deeply(ops.matmul(tg.tensor({ { 1, 2 } }), tg.tensor({ { 3, 4 } }), false, true):totable(), { { 11 } },
    "matmul with trans_b")
  local mx, at = ops.u16_scan(string.pack("<I2I2I2", 5, 900, 7), 0, 3)
  tap.ok(mx == 900 and at == 1, "u16_scan finds the largest id and its position")
end

tap.ok(type(tg.time()) == "number" and tg.isatty(io.stdout) ~= nil, "tg.time and tg.isatty exist")
tap.done_testing()
