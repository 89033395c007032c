-- ops.lua — time of each transformer kernel and GEMM at the layer shapes of layers.lua (bf16): ms per call, GB/s, TFLOP/s.
--   tegraph run examples/bench/ops.lua [--only SUBSTRING] [--iters 20] [--cfg gpt2|large|small]
-- Each op: 3 warm-up calls, then --iters calls back to back and one synchronisation (device time per call,
-- launch included). GB/s counts each input read once and each output written once; attention TFLOP/s uses
-- the causal count (forward 2 b t^2 C, backward 2.5x that), as peers/kernels.py does. On a Hopper GPU the
-- attention rows time the wgmma kernels; TG_DEBUG=attention_mma_sync times
-- the mma.sync ones instead.
local tg = require "tegraph"
local ops = tg.ops

local opt = require("tegraph.cli").parse("examples/bench/ops.lua", {
  { "iters", 20, "calls per op after 3 warm-up calls" },
  { "cfg", "gpt2,large", "comma-separated layer shapes: small, gpt2, large" },
  { "only", nil, "only the ops whose name contains this substring" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
}, arg)
local device = opt.device or tg.default_device()
local stream = tg.stream.current(device)
local cfgs = {
  small = { b = 2, t = 1024, h = 1024, nh = 16 },
  gpt2 = { b = 8, t = 1024, h = 768, nh = 12 },
  large = { b = 2, t = 2048, h = 4096, nh = 32 },
}

local function randn(shape, dt) return tg.randn(shape, { dtype = dt or "bf16", device = device }) end

local function timed(fn)
  for _ = 1, 3 do fn() end
  stream:sync()
  collectgarbage()
  local t0 = tg.time()
  for _ = 1, opt.iters do fn() end
  stream:sync()
  local ms = (tg.time() - t0) * 1e3 / opt.iters
  collectgarbage()
  return ms
end

local function report(cfg, name, ms, bytes, flops)
  if opt.only and not name:find(opt.only, 1, true) then return end
  print(string.format("%-6s %-34s %9.4f ms %9s %10s", cfg, name, ms,
    bytes and string.format("%.0f GB/s", bytes / ms / 1e6) or "",
    flops and string.format("%.1f TFLOP/s", flops / ms / 1e9) or ""))
end

local function want(name) return not opt.only or name:find(opt.only, 1, true) end
-- A group of rows runs when the filter is part of its name or names one of its rows (which carry the group's
-- name: --only attention_backward runs the attention group, whose report() then prints that row only).
local function want_group(g) return want(g) or opt.only:find(g, 1, true) ~= nil end

print(string.format("tegraph kernels, device %s, %d calls each", tostring(device), opt.iters))
for cname in tostring(opt.cfg):gmatch("[^,]+") do
  local c = assert(cfgs[cname], "unknown cfg " .. cname)
  local N, C, F = c.b * c.t, c.h, 4 * c.h
  if want_group("attention") then
    local qkv, dout = randn { c.b, c.t, 3 * C }, randn { c.b, c.t, C }
    local out, lse = ops.attention_forward(qkv, c.nh)
    -- ~100 ms of both first: the first timed op of a process otherwise runs before the clocks have risen
    local t0 = tg.time()
    while tg.time() - t0 < 0.1 do
      for _ = 1, 10 do
        ops.attention_forward(qkv, c.nh)
        ops.attention_backward(dout, qkv, out, lse, c.nh)
      end
      stream:sync()
    end
    local fl = 2 * c.b * c.t * c.t * C
    report(cname, "attention_forward", timed(function() ops.attention_forward(qkv, c.nh) end), nil, fl)
    report(cname, "attention_backward", timed(function() ops.attention_backward(dout, qkv, out, lse, c.nh) end), nil,
      2.5 * fl)
  end
  if want_group("norm") then
    local x, dy, g, be = randn { N, C }, randn { N, C }, randn { C }, randn { C }
    local _, mean, rstd = ops.layernorm_forward(x, g, be)
    local dg, db = tg.zeros({ C }, { dtype = "f32", device = device }), tg.zeros({ C }, { dtype = "f32", device = device })
    report(cname, "layernorm_forward (N,C)", timed(function() ops.layernorm_forward(x, g, be) end), 4 * N * C)
    report(cname, "layernorm_backward (N,C)", timed(function() ops.layernorm_backward(dy, x, g, mean, rstd) end), 6 * N * C)
    report(cname, "layernorm_backward_dw (N,C)",
      timed(function() ops.layernorm_backward_dw(dg, db, dy, x, mean, rstd, 1) end), 4 * N * C)
  end
  if want_group("gelu") or want_group("bias") then
    local h, dh, bias = randn { N, F }, randn { N, F }, randn { F }
    local dbias = tg.zeros({ F }, { dtype = "bf16", device = device })
    report(cname, "gelu_forward (N,4C)", timed(function() ops.gelu_forward(h) end), 4 * N * F)
    report(cname, "gelu_backward (N,4C)", timed(function() ops.gelu_backward(dh, h) end), 6 * N * F)
    report(cname, "bias_add (N,4C)", timed(function() ops.bias_add(h, bias) end), 4 * N * F)
    report(cname, "bias_backward_dw (N,4C)", timed(function() ops.bias_backward_dw(dbias, dh, 1) end), 2 * N * F)
    local dy, dbc = randn { N, C }, tg.zeros({ C }, { dtype = "f32", device = device })
    report(cname, "bias_backward_dw (N,C) f32", timed(function() ops.bias_backward_dw(dbc, dy, 1) end), 2 * N * C)
  end
  if want_group("gemm") then
    local x, w1, h = randn { N, C }, randn { F, C }, randn { N, F }
    local wq = randn { 3 * C, C }
    local g32 = tg.zeros({ F, C }, { dtype = "f32", device = device })
    local y = tg.zeros({ N, F }, { dtype = "bf16", device = device })
    local fl = 2 * N * C * F
    report(cname, "gemm fc1 fwd x W^T", timed(function() ops.gemm(y, x, false, w1, true) end), nil, fl)
    report(cname, "gemm fc1 dgrad dy W", timed(function() ops.matmul(h, w1) end), nil, fl)
    report(cname, "gemm fc1 wgrad dy^T x (bf16)", timed(function() ops.matmul(h, x, true, false) end), nil, fl)
    report(cname, "gemm fc1 wgrad dy^T x (+= f32)", timed(function() ops.gemm(g32, h, true, x, false, 1, 1) end), nil, fl)
    report(cname, "gemm qkv fwd x Wqkv^T", timed(function() ops.matmul(x, wq, false, true) end), nil, 2 * N * C * 3 * C)
    -- the fused epilogues the modules use: fc1 forward = bias + gelu (saving the pre-activation), wgrad + bias grad
    local b1, pre = randn { F }, randn { N, F }
    local db32, db16 = tg.zeros({ F }, { dtype = "f32", device = device }), tg.zeros({ F }, { dtype = "bf16", device = device })
    local w16 = tg.zeros({ F, C }, { dtype = "bf16", device = device })
    report(cname, "gemm fc1 fwd +bias (fused)", timed(function()
      ops.gemm(y, x, false, w1, true, 1, 0, { epilogue = "bias", bias = b1 }) end), nil, fl)
    report(cname, "gemm fc1 fwd +bias+gelu+aux (fused)", timed(function()
      ops.gemm(y, x, false, w1, true, 1, 0, { epilogue = "bias_gelu", bias = b1, aux = pre }) end), nil, fl)
    -- fc2's dgrad with fc1's gelu backward in its epilogue (LayerNormMLP(gelu)): compare with the plain
    -- fc2 dgrad + "gelu_backward (N,4C)"
    local w2 = randn { C, F }
    report(cname, "gemm fc2 dgrad dy W2", timed(function() ops.gemm(y, x, false, w2, false) end), nil, fl)
    report(cname, "gemm fc2 dgrad +dgelu (fused)", timed(function()
      ops.gemm(y, x, false, w2, false, 1, 0, { epilogue = "dgelu", aux = pre }) end), nil, fl)
    report(cname, "gemm fc1 wgrad +bgrad (bf16)", timed(function()
      ops.gemm(w16, h, true, x, false, 1, 0, { epilogue = "bgrad", bgrad = db16 }) end), nil, fl)
    report(cname, "gemm fc1 wgrad +bgrad (+= f32)", timed(function()
      ops.gemm(g32, h, true, x, false, 1, 1, { epilogue = "bgrad", bgrad = db32, bgrad_accumulate = 1 }) end), nil, fl)
  end
  if want_group("fp8") then
    -- the FP8 passes of a Linear: dy (N,4C) cast with its transpose (delayed: amax accumulated), the plain cast, the
    -- amax of current scaling, and the delayed-scaling update of a Linear's (1024, 3) amax history
    local dh = randn { N, F }
    local y8, yt8 = tg.zeros({ N, F }, { dtype = "e5m2", device = device }), tg.zeros({ F, N }, { dtype = "e5m2", device = device })
    local f32 = function(shape, v) return tg.full(shape, v, { dtype = "f32", device = device }) end
    local sc, am, si = f32({ 1 }, 1), f32({ 1 }, 0), f32({ 1 }, 1)
    local cast = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = y8, y_t = yt8 }
    report(cname, "fp8_cast_transpose (N,4C) y+y_t", timed(function() ops.fp8_cast_transpose(dh, "e5m2", cast) end),
      2 * N * F + 2 * N * F)
    local only_t = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = false, y_t = yt8 }
    report(cname, "fp8_cast_transpose (N,4C) y_t", timed(function() ops.fp8_cast_transpose(dh, "e5m2", only_t) end),
      2 * N * F + N * F)
    -- the FP8 Linear's gradient cast of fc1's output gradient: gelu'(h) applied, cast, transposed, bias partials
    local pre = randn { N, F }
    local part = tg.zeros({ ops.fp8_dbias_chunks(N), F }, { dtype = "f32", device = device })
    local grad = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = y8, y_t = yt8, gelu_x = pre,
      dbias_part = part }
    report(cname, "fp8_cast_transpose (N,4C) +dgelu +dbias", timed(function() ops.fp8_cast_transpose(dh, "e5m2", grad) end),
      2 * N * F + 2 * N * F + 2 * N * F)
    local dg = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = y8, y_t = yt8, gelu_x = pre }
    report(cname, "fp8_cast_transpose (N,4C) +dgelu", timed(function() ops.fp8_cast_transpose(dh, "e5m2", dg) end),
      2 * N * F + 2 * N * F + 2 * N * F)
    local dbo = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = y8, y_t = yt8, dbias_part = part }
    report(cname, "fp8_cast_transpose (N,4C) +dbias", timed(function() ops.fp8_cast_transpose(dh, "e5m2", dbo) end),
      2 * N * F + 2 * N * F)
    local db = tg.zeros({ F }, { dtype = "f32", device = device })
    report(cname, "fp8_dbias_finish (4C)", timed(function() ops.fp8_dbias_finish(db, part, 1) end),
      4 * F * ops.fp8_dbias_chunks(N))
    local plain = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = y8 }
    report(cname, "fp8_cast (N,4C)", timed(function() ops.fp8_cast(dh, "e5m2", plain) end), 2 * N * F + N * F)
    report(cname, "fp8_amax (N,4C)", timed(function() ops.fp8_amax(am, dh) end), 2 * N * F)
    -- the producers' casts (delayed scaling): fc1's GELU written as fc2's E4M3 input with its transpose, from the
    -- pre-activation (compare with "gelu_forward (N,4C)" + "fp8_cast_transpose (N,4C) y+y_t"), and the LayerNorm
    -- written as the next Linear's E4M3 input, then transposed (compare with "layernorm_forward (N,C)" + an
    -- (N,C) fp8_cast_transpose)
    local g8, g8t = tg.zeros({ N, F }, { dtype = "e4m3", device = device }), tg.zeros({ F, N }, { dtype = "e4m3", device = device })
    local fwd = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = g8, y_t = g8t, gelu = true }
    report(cname, "fp8_cast_transpose_gelu (N,4C) y+y_t", timed(function() ops.fp8_cast_transpose(pre, "e4m3", fwd) end),
      2 * N * F + 2 * N * F)
    local xn, gn, bn = randn { N, C }, randn { C }, randn { C }
    local l8, l8t = tg.zeros({ N, C }, { dtype = "e4m3", device = device }), tg.zeros({ C, N }, { dtype = "e4m3", device = device })
    local lno = { scale = sc, amax = am, scale_inv = si, accumulate = true, y = l8 }
    report(cname, "fp8_layernorm (N,C) y", timed(function() ops.fp8_layernorm(xn, gn, bn, "e4m3", lno) end),
      2 * N * C + N * C + 8 * N)
    report(cname, "fp8_layernorm (N,C) y + fp8_transpose", timed(function()
      ops.fp8_layernorm(xn, gn, bn, "e4m3", lno)
      ops.fp8_transpose(l8, l8t) end), 2 * N * C + 3 * N * C + 8 * N)
    report(cname, "layernorm_forward + fp8_cast_transpose (N,C) unfused", timed(function()
      local yn = ops.layernorm_forward(xn, gn, bn)
      ops.fp8_cast_transpose(yn, "e4m3", { scale = sc, amax = am, scale_inv = si, accumulate = true, y = l8, y_t = l8t }) end),
      2 * N * C + 2 * N * C + 8 * N + 2 * N * C + 2 * N * C)
    local hist, s3, si3 = f32({ 1024, 3 }, 0.5), f32({ 3 }, 1), f32({ 3 }, 1)
    report(cname, "fp8 scale_update (1024,3)", timed(function()
      tg.fp8.scale_update(hist, s3, si3, { 448, 448, 57344 }) end), 2 * 4 * 1024 * 3)
  end
  -- LM head and embedding wgrad at GPT-2's padded vocabulary. Ideal bytes: cross-entropy reads the logits once
  -- (backward also writes dlogits); the embedding wgrad reads dout (and its f32 table rows once per id).
  local V = 50304
  local function row(name, fn, bytes, flops) -- times fn only when --only selects the row
    if want(name) then report(cname, name, timed(fn), bytes, flops) end
  end
  -- the fused LM head's kernel as a GPT-2 step runs it: a chunk of 2048 rows, losses and dlogits in place
  local fname = "cross_entropy_fused (2048,V)" -- dlogits in place
  if want(fname) then
    local R = 2048
    local chunk = randn { R, V }
    local tc = {}
    for r = 1, R do tc[r] = (r * 7919) % V end
    local ctargets = tg.tensor(tc, { dtype = "i32", device = device })
    local count = ops.cross_entropy_forward(chunk, ctargets)
    local ms = timed(function() ops.cross_entropy_fused(chunk, ctargets, count, 1, -1, chunk) end)
    report(cname, fname, ms, 4 * R * V)
    print(string.format("%-6s %-34s %9.1f us a call", cname, fname, ms * 1e3))
  end
  if want_group("cross_entropy") or want_group("lm_head") then
    local logits, x, wte = randn { N, V }, randn { N, C }, randn { V, C }
    local tl = {}
    for r = 1, N do tl[r] = (r * 7919) % V end
    tl[2] = -1 -- an ignored row, as the gpt example's masked targets
    local targets = tg.tensor(tl, { dtype = "i32", device = device })
    local loss = ops.cross_entropy_forward(logits, targets)
    row("cross_entropy_forward (N,V)", function() ops.cross_entropy_forward(logits, targets) end, 2 * N * V)
    row("cross_entropy_backward (N,V)", function()
      ops.cross_entropy_backward(logits, targets, loss)
      collectgarbage() -- hands the last dlogits back to the allocator: no new 0.8 GB block a call
    end, 4 * N * V)
    local g32 = tg.zeros({ V, C }, { dtype = "f32", device = device })
    local fl = 2 * N * V * C
    row("gemm lm_head fwd x Wte^T", function() ops.gemm(logits, x, false, wte, true) end, nil, fl)
    row("gemm lm_head dgrad dlogits Wte", function() ops.gemm(x, logits, false, wte, false) end, nil, fl)
    row("gemm lm_head wgrad dlogits^T x (+= f32)", function() ops.gemm(g32, logits, true, x, false, 1, 1) end, nil, fl)
  end
  if want_group("embedding") then
    -- token ids with a heavy head, as text: P(id < k) = (k/V)^(1/3) (id 0: 2.7% of the tokens)
    math.randomseed(1)
    local rows = {}
    for b = 1, c.b do
      local r = {}
      for t = 1, c.t do r[t] = math.floor(V * math.random() ^ 3) end
      rows[b] = r
    end
    local idx = tg.tensor(rows, { dtype = "i32", device = device })
    local dout = randn { c.b, c.t, C }
    local dwte = tg.zeros({ V, C }, { dtype = "f32", device = device })
    local dwpe = tg.zeros({ c.t, C }, { dtype = "f32", device = device })
    row("embedding_backward_dw wte+wpe (+= f32)", function() ops.embedding_backward_dw(dwte, dwpe, dout, idx, 1) end,
      2 * N * C)
    row("embedding_backward_dw wte (= f32)", function() ops.embedding_backward_dw(dwte, nil, dout, idx, 0) end,
      2 * N * C + 4 * V * C)
    row("embedding_backward_dw wpe (+= f32)", function() ops.embedding_backward_dw(nil, dwpe, dout, idx, 1) end,
      2 * N * C + 8 * c.t * C)
  end
end
