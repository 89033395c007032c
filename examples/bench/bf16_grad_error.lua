-- bf16_grad_error.lua — where a bf16 step loses against f32: trains nn.GPT in f32 for --train-steps steps on a
-- byte-level text file (bf16_study.lua's recipe), then computes the gradient of one fixed step (--microbatches
-- microbatches) from those weights in f32 and under each bf16 variant, and prints each variant's relative
-- gradient error ||g - g_f32|| / ||g_f32|| (all parameters; matrices; vectors) and its loss difference.
--
--   tegraph run --device cpu examples/bench/bf16_grad_error.lua --text corpus.txt --layers 6 --width 192
--
-- Variants: tegraph's bf16 path with bf16 gradients (before) and with f32 main_grad (the default); an f32 model
-- under the CPU study switch autocast_gemm (PyTorch's bf16 autocast: bf16 GEMMs, f32 parameters, gradients,
-- residual stream and norms), alone and with the bf16 model's roundings added one at a time: round_grads
-- (bf16 gradient accumulation), round_residual (a bf16 residual stream), round_params (the norms' and the
-- embedding's parameters read in bf16), and together (the last two: tegraph's bf16 with f32 main_grad; all
-- three: with bf16 gradients). The switches are the CPU backend's: run it with --device cpu.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local data = require "tegraph.data"
local cli = require "tegraph.cli"
local train = require "tegraph.train"
local text = require "tegraph.text"

local opt = cli.parse("examples/bench/bf16_grad_error.lua", {
  { "text", nil, "the training text (its bytes are the tokens)", "string" },
  { "layers", 6, "transformer layers", min = 1 },
  { "heads", 6, "attention heads", min = 1 },
  { "width", 192, "model width", min = 1 },
  { "context", 128, "context length T", min = 1 },
  { "batch", 8, "microbatch size B (sequences)", min = 1 },
  { "microbatches", 2, "microbatches per step M", min = 1 },
  { "train-steps", 100, "f32 steps before the gradients are compared", min = 0 },
  { "lr", 1e-3, "peak learning rate of the f32 steps", min = 0 },
  { "seed", 1234, "seed of initialisation and windows" },
}, arg)
if not opt.text then
  io.stderr:write("bf16_grad_error.lua: --text FILE is required\n")
  os.exit(2)
end
if tg.default_device() ~= "cpu" then
  io.stderr:write("bf16_grad_error.lua: the study switches are the CPU backend's: run with --device cpu\n")
  os.exit(2)
end

local tok, tok_id = text.tokenizer(nil)
local loader = data.open(data.tokenize(opt.text, tok, { tokenizer_id = tok_id }), { vocab = 256 })
local B, M, T = opt.batch, opt.microbatches, opt.context
local last = loader:size() - T - 1
if last < 0 then
  io.stderr:write(string.format("bf16_grad_error.lua: %s is too short for windows of %d (+1)\n", opt.text, T))
  os.exit(2)
end
local function batches(key)
  math.randomseed(opt.seed, key)
  local xs, ys = {}, {}
  for m = 1, M do
    local starts = {}
    for b = 1, B do starts[b] = math.random(0, last) end
    xs[m], ys[m] = tg.ops.token_windows(loader.bytes, loader.first, starts, T, loader.device)
  end
  return xs, ys
end

local function gpt(dtype, fuse)
  return nn.GPT { vocab_size = 256, max_position_embeddings = T, hidden_size = opt.width,
    num_attention_heads = opt.heads, num_layers = opt.layers, dtype = dtype, fuse_wgrad_accumulation = fuse,
    residual_init_std = 0.02 / math.sqrt(2 * opt.layers) }
end

-- the weights: f32 training from the seed's initialisation
tg.manual_seed(opt.seed)
local model = gpt("f32")
local trainer = train.new { model = model, microbatches = M,
  adamw = { lr = opt.lr, beta2 = 0.95, weight_decay = 0.1, max_norm = 1.0 } }
local schedule = optim.cosine_schedule { lr = opt.lr, min_lr = opt.lr / 10, warmup = math.min(20, opt["train-steps"]),
  total = math.max(1, opt["train-steps"]) }
local loss = 0 / 0
for step = 1, opt["train-steps"] do
  local xs, ys = batches(step)
  local vals = trainer:losses(trainer:step(xs, ys, schedule(step)))
  loss = (vals[1] + vals[#vals]) / 2
end
local weights = {}
for _, p in ipairs(model:parameters()) do weights[p.name] = p.data:clone() end
model, trainer = nil, nil
collectgarbage()
print(string.format("bf16 gradient error: %d layers, width %d, heads %d, context %d, %d x %d sequences; weights after %d f32 steps (loss %.4f)",
  opt.layers, opt.width, opt.heads, T, B, M, opt["train-steps"], loss))

-- the gradient of one step (mean over the microbatches) from those weights, as f32 tensors by name
local xs, ys = batches(1000000)
local function gradient(dtype, fuse, switches)
  for _, s in ipairs(switches) do tg.debug(s, true) end
  local g = gpt(dtype, fuse)
  for _, p in ipairs(g:parameters()) do
    if p.master then p.master:copy_(weights[p.name]) end
    p.data:copy_(weights[p.name])
  end
  local l = 0
  for m = 1, M do
    l = l + nn.loss_value(g:forward_loss(xs[m], ys[m], m, -1, 1.0 / M)) / M
    g:backward(1.0 / M, m)
  end
  if g:need_backward_dw() then
    for m = 1, M do g:backward_dw(m) end
  end
  local out = {}
  for _, p in ipairs(g:parameters()) do out[p.name] = { grad = p.wgrad:to("f32"), vector = #p.shape == 1 } end
  for _, s in ipairs(switches) do tg.debug(s, false) end
  return out, l
end

local function sumsq(t)
  local s = t:mul(t):sum()
  return type(s) == "number" and s or s:item()
end

local ref, ref_loss = gradient("f32", nil, {})
local variants = {
  { "tegraph bf16, bf16 gradients (before)", "bf16", false, {} },
  { "tegraph bf16, f32 main_grad (default)", "bf16", nil, {} },
  { "f32 + autocast_gemm (PyTorch autocast)", "f32", nil, { "autocast_gemm" } },
  { "  + round_grads", "f32", nil, { "autocast_gemm", "round_grads" } },
  { "  + round_residual", "f32", nil, { "autocast_gemm", "round_residual" } },
  { "  + round_params", "f32", nil, { "autocast_gemm", "round_params" } },
  { "  + round_residual + round_params", "f32", nil, { "autocast_gemm", "round_residual", "round_params" } },
  { "  + round_residual + round_params + round_grads", "f32", nil,
    { "autocast_gemm", "round_residual", "round_params", "round_grads" } },
}
print(string.format("%-48s %12s %12s %12s %12s", "variant", "rel err all", "matrices", "vectors", "loss - f32"))
for _, v in ipairs(variants) do
  local g, l = gradient(v[2], v[3], v[4])
  local num, den = { 0, 0, 0 }, { 0, 0, 0 }
  for name, r in pairs(ref) do
    local d, n = sumsq(g[name].grad:sub(r.grad)), sumsq(r.grad)
    local k = r.vector and 3 or 2
    num[1], den[1], num[k], den[k] = num[1] + d, den[1] + n, num[k] + d, den[k] + n
  end
  local function rel(k) return den[k] > 0 and math.sqrt(num[k] / den[k]) or 0 end
  print(string.format("%-48s %12.3e %12.3e %12.3e %12.2e", v[1], rel(1), rel(2), rel(3), l - ref_loss))
  collectgarbage()
end
