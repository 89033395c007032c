-- bf16-study-pairs-inputs-and-emulates-autocast.lua — the bf16 study's tools: examples/bench/bf16_study.lua
-- writes initial weights and window offsets from which another framework reproduces its run (the first step's
-- loss recomputed from those files and the text's raw bytes is the logged one), refuses bad options; and the
-- CPU study switches compute as bf16 autocast does: autocast_gemm gives the bf16 GEMM's rounded product from f32
-- tensors while beta * C stays f32, round_grads rounds what accumulates.
local tap = require "tap"
local tg = require "tegraph"
local nn = require "tegraph.nn"
local ex = require "run_example"

local CPU = { device = "cpu" } -- the study switches are the CPU backend's

------------------------------------------------------------------------ the switches
local function bits_equal(x, y)
  local worst = 0
  for i = 1, #x do
    for j = 1, #x[i] do worst = math.max(worst, math.abs(x[i][j] - y[i][j])) end
  end
  return worst
end
local function round_bf16(t) return t:to("bf16"):to("f32") end

local a, b = tg.randn({ 37, 29 }, CPU), tg.randn({ 29, 21 }, CPU)
local plain = a:matmul(b):totable()
-- the bf16 GEMM of the rounded operands, rounded once on store
local want = a:to("bf16"):matmul(b:to("bf16")):to("f32"):totable()
tg.debug("autocast_gemm", true)
local got = a:matmul(b):totable()
tap.is(bits_equal(got, want), 0, "autocast_gemm: an f32 GEMM gives the bf16 GEMM's product of the rounded operands")
tap.ok(bits_equal(got, plain) > 1e-4, "and differs from the f32 product")

-- beta * C is added in f32 (a residual, a gradient accumulation): C + the rounded product, not rounded again
local c0 = tg.randn({ 37, 21 }, CPU)
local c = tg.zeros({ 37, 21 }, CPU)
c:copy_(c0)
tg.ops.gemm(c, a, false, b, false, 1.0, 1.0)
local c0t, ct = c0:totable(), c:totable()
local off = 0
for i = 1, #ct do
  for j = 1, #ct[i] do
    local s = c0t[i][j] + want[i][j]
    off = math.max(off, math.abs(ct[i][j] - s) / math.max(1, math.abs(s)))
  end
end
tap.ok(off < 1e-6, string.format("autocast_gemm: C = C + rounded product in f32 (largest relative difference %g)", off))
tap.ok(bits_equal(ct, round_bf16(c):totable()) > 0, "the f32 sum is kept, not rounded to bf16")

tg.debug("round_grads", true)
c:copy_(c0)
tg.ops.gemm(c, a, false, b, false, 1.0, 1.0)
tap.is(bits_equal(c:totable(), round_bf16(c):totable()), 0, "round_grads: an accumulating GEMM leaves bf16 values")
tg.debug("round_grads", false)
tg.debug("autocast_gemm", false)
tap.is(bits_equal(a:matmul(b):totable(), plain), 0, "with the switch off the GEMM is the f32 one again")

-- round_params: a LayerNorm reads gamma and beta as bf16 values
local x, gamma, beta = tg.randn({ 5, 24 }, CPU), tg.randn({ 24 }, CPU), tg.randn({ 24 }, CPU)
local y_plain = tg.ops.layernorm_forward(x, gamma, beta)
local y_rounded = tg.ops.layernorm_forward(x, round_bf16(gamma), round_bf16(beta))
tg.debug("autocast_gemm", true)
tg.debug("round_params", true)
local y_switch = tg.ops.layernorm_forward(x, gamma, beta)
tg.debug("round_params", false)
tg.debug("autocast_gemm", false)
tap.is(bits_equal(y_switch:totable(), y_rounded:totable()), 0,
  "round_params: a LayerNorm reads its parameters rounded to bf16")
tap.ok(bits_equal(y_switch:totable(), y_plain:totable()) > 0, "which changes its output")

------------------------------------------------------------------------ the pairing files
local dir = ex.tmpdir()
local textfile = dir .. "/text.txt"
local lines = {}
for i = 1, 400 do lines[i] = string.format("line %d: the quick brown fox jumps over the lazy dog %d times.", i, i * 7 % 13) end
ex.write(textfile, table.concat(lines, "\n"))
local T, B, M = 16, 3, 2
local args = string.format("--text %s --dtype f32 --layers 1 --width 16 --heads 2 --context %d --batch %d " ..
  "--microbatches %d --steps 3 --warmup 1 --quiet --save-init %s --windows %s --csv %s", ex.q(textfile), T, B, M,
  ex.q(dir .. "/init.safetensors"), ex.q(dir .. "/windows.txt"), ex.q(dir .. "/loss.csv"))
local code, out, err = ex.run_cpu("bench/bf16_study.lua", args)
tap.is(code, 0, "bf16_study.lua runs a small f32 study" .. (code ~= 0 and (": " .. err) or ""))
tap.like(out, "last%-3%-step mean loss %d+%.%d+", "and prints the mean loss of the last steps")

local init = tg.load(dir .. "/init.safetensors")
local model = nn.GPT { vocab_size = 256, max_position_embeddings = T, hidden_size = 16, num_attention_heads = 2,
  num_layers = 1, device = "cpu" }
local named, missing = 0, {}
for _, p in ipairs(model:parameters()) do
  local w = init[p.name]
  if w then
    named = named + 1
    p.data:copy_(w)
  else
    missing[#missing + 1] = p.name
  end
end
tap.is(#missing, 0, "the initial weights name every parameter of nn.GPT (missing: " .. table.concat(missing, ", ") .. ")")
tap.is(init["embed.wte"].dtype, "f32", "as f32 tensors")

local f = assert(io.open(dir .. "/windows.txt"))
local steps = {}
for line in f:lines() do
  if not line:match("^#") then
    local v = {}
    for n in line:gmatch("%d+") do v[#v + 1] = tonumber(n) end
    steps[#steps + 1] = v
  end
end
f:close()
tap.is(#steps, 3 * M, "the windows file has one line per microbatch of every step")
local bad = 0
for _, v in ipairs(steps) do
  if #v ~= 2 + B then bad = bad + 1 end
  for k = 3, #v do
    if v[k] < 0 or v[k] > #table.concat(lines, "\n") - T - 1 then bad = bad + 1 end
  end
end
tap.is(bad, 0, "each line: step, microbatch and B offsets within the text")

-- step 1 from the files: windows of the raw bytes, the loaded weights, the mean of the microbatch losses
local raw = table.concat(lines, "\n")
local loss = 0
for m = 1, M do
  local v = steps[m]
  local xs, ys = {}, {}
  for k = 1, B do
    local o = v[2 + k]
    local x, y = {}, {}
    for t = 1, T do
      x[t] = raw:byte(o + t)
      y[t] = raw:byte(o + t + 1)
    end
    xs[k], ys[k] = x, y
  end
  loss = loss + nn.loss_value(model:eval_loss(tg.tensor(xs, { dtype = "i32", device = "cpu" }), tg.tensor(ys, { dtype = "i32", device = "cpu" })))
end
loss = loss / M
local cf = assert(io.open(dir .. "/loss.csv"))
local header, first = cf:read("l"), cf:read("l")
cf:close()
tap.is(header, "step,loss,lr,grad_norm,ms", "the CSV has a header")
local logged = tonumber(first:match("^1,([^,]+),"))
tap.ok(logged and math.abs(logged - loss) < 1e-5, string.format(
  "step 1's loss recomputed from the init file, the windows and the raw bytes is the logged one (%.6f vs %s)", loss,
  tostring(logged)))

------------------------------------------------------------------------ bf16 gradients: f32 main_grad by default
local function fused_of(cfg)
  local g = nn.GPT(cfg)
  local fused, total = 0, 0
  for _, p in ipairs(g:parameters()) do
    total = total + 1
    if p.fused then fused = fused + 1 end
  end
  return fused, total
end
local base = { vocab_size = 256, max_position_embeddings = 8, hidden_size = 16, num_attention_heads = 2,
  num_layers = 1, device = "cpu" }
local function with(t)
  local c = {}
  for k, v in pairs(base) do c[k] = v end
  for k, v in pairs(t) do c[k] = v end
  return c
end
local fused, total = fused_of(with { dtype = "bf16" })
tap.is(fused, total, "a bf16 nn.GPT accumulates every weight gradient in f32 main_grad by default")
tap.is((fused_of(with { dtype = "bf16", fuse_wgrad_accumulation = false })), 0,
  "fuse_wgrad_accumulation = false keeps bf16 gradients")
tap.is((fused_of(with { dtype = "f32" })), 0, "an f32 nn.GPT has no main_grad by default")
for _, case in ipairs { { "", "%(f32 main_grad%)" }, { " --bf16-grads", "%(bf16 grads%)" } } do
  code, out, err = ex.run_cpu("bench/bf16_study.lua", string.format("--text %s --dtype bf16 --layers 1 --width 16 " ..
    "--heads 2 --context 8 --batch 2 --microbatches 2 --steps 2 --warmup 1 --quiet%s", ex.q(textfile), case[1]))
  tap.ok(code == 0 and out:match(case[2]) and out:match("last%-2%-step mean loss 5%.%d+"),
    "a bf16 study run" .. case[1] .. " trains and says " .. case[2]:gsub("%%", "") .. (code ~= 0 and (": " .. err) or ""))
end

------------------------------------------------------------------------ the gradient-error microscope
code, out, err = ex.run_cpu("bench/bf16_grad_error.lua", string.format("--text %s --layers 2 --width 32 --heads 2 " ..
  "--context 16 --batch 2 --train-steps 3", ex.q(textfile)))
tap.is(code, 0, "bf16_grad_error.lua runs" .. (code ~= 0 and (": " .. err) or ""))
local errs = {}
for name, e in out:gmatch("\n([^\n]-)%s+(%d%.%d+e[-+]%d+)") do errs[#errs + 1] = { name, tonumber(e) } end
tap.is(#errs, 8, "it prints the relative gradient error of eight variants")
local by = {}
for _, e in ipairs(errs) do by[e[1]:gsub("^%s+", "")] = e[2] end
local ac, all = by["f32 + autocast_gemm (PyTorch autocast)"], by["+ round_residual + round_params + round_grads"]
tap.ok(ac and all and ac > 0 and all > ac, string.format("autocast's gradient is nearer f32's than the one with a " ..
  "bf16 residual stream, parameters and gradients (%s < %s)", tostring(ac), tostring(all)))

------------------------------------------------------------------------ bad options
code, _, err = ex.run_cpu("bench/bf16_study.lua", "--dtype bf16")
tap.is(code, 2, "without --text the study exits 2")
tap.like(err, "%-%-text FILE is required", "saying what is missing")
code, _, err = ex.run_cpu("bench/bf16_study.lua", "--text " .. ex.q(textfile) .. " --dtype f32 --bf16-grads")
tap.like(err, "%-%-bf16%-grads goes with %-%-dtype bf16", "--bf16-grads on an f32 run is refused")
code, _, err = ex.run_cpu("bench/bf16_study.lua", "--text " .. ex.q(textfile) .. " --debug no_such_switch")
tap.like(err, "%-%-debug: .*no debug flag 'no_such_switch'", "an unknown --debug switch is refused by name")
code, _, err = ex.run_cpu("bench/bf16_study.lua", "--text " .. ex.q(dir .. "/missing.txt"))
tap.ok(code ~= 0 and err:match("missing%.txt"), "a text file that does not exist is named")
ex.cleanup()
os.execute("rm -rf " .. ex.q(dir))
tap.done_testing()
