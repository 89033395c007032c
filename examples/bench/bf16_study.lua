-- bf16_study.lua — the bf16 quality study: trains nn.GPT on a byte-level text file with GPT-2's recipe
-- (the study's: 6 layers, width 384, context 256, 16 x 2 sequences, 400 steps, lr 1e-3 -> 1e-4 cosine, warmup 20,
-- AdamW beta2 0.95, weight decay 0.1 on matrices, clip 1) and writes what a twin in another framework needs to
-- train on identical inputs: the initial weights (f32 safetensors, tegraph's parameter names) and the window
-- offsets of every microbatch, plus the loss curve as CSV.
--
--   tegraph run examples/bench/bf16_study.lua --text corpus.txt --dtype bf16 --csv bf16.csv \
--       --save-init init.safetensors --windows windows.txt
--   python3 examples/bench/peers/gpt_twin.py --text corpus.txt --init init.safetensors \
--       --windows windows.txt --dtype bf16 --csv twin_bf16.csv
--
-- Inputs: the text file's bytes are the tokens (vocabulary 256). Microbatch m of step s trains on the B windows
-- x = bytes[o, o + T), y = bytes[o + 1, o + T + 1) whose 0-based offsets o are the line "s m o_1 ... o_B" of
-- --windows (drawn uniformly in [0, size - T - 1] from math.random seeded by (seed, s)).
-- The step's loss is the mean over its microbatches of the mean cross-entropy.
--
-- --debug a,b turns on tg.debug switches for the run (core/debug.h), e.g. the CPU-only study switches
-- autocast_gemm, round_residual, round_grads with --dtype f32. --bf16-grads keeps bf16 weight gradients
-- (no f32 main_grad) in a bf16 run: the numerics before main_grad became the bf16 default.
-- Prints the last-50-step mean loss (--tail) and the steady tokens/s (steps 3..).
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local data = require "tegraph.data"
local cli = require "tegraph.cli"
local train = require "tegraph.train"
local text = require "tegraph.text"

local opt = cli.parse("examples/bench/bf16_study.lua", {
  { "text", nil, "the training text (its bytes are the tokens)", "string" },
  { "dtype", "bf16", "compute dtype: f32 or bf16" },
  { "layers", 6, "transformer layers", min = 1 },
  { "heads", 6, "attention heads", min = 1 },
  { "width", 384, "model width", min = 1 },
  { "context", 256, "context length T", min = 1 },
  { "batch", 16, "microbatch size B (sequences)", min = 1 },
  { "microbatches", 2, "microbatches per step M", min = 1 },
  { "steps", 400, "optimizer steps", min = 1 },
  { "lr", 1e-3, "peak learning rate", min = 0 },
  { "min-lr", 1e-4, "final learning rate (cosine decay)", min = 0 },
  { "warmup", 20, "warmup steps", min = 0 },
  { "weight-decay", 0.1, "AdamW weight decay on matrices", min = 0 },
  { "beta2", 0.95, "AdamW beta2" },
  { "clip", 1.0, "global gradient-norm clip (0: off)", min = 0 },
  { "seed", 1234, "seed of initialisation and windows" },
  { "tail", 50, "report the mean loss of the last N steps", min = 1 },
  { "bf16-grads", false, "bf16 run: accumulate weight gradients in bf16 (no f32 main_grad)" },
  { "debug", nil, "tg.debug switches to turn on, comma-separated", "string" },
  { "csv", nil, "write step,loss,lr,grad_norm,ms per step to this file", "string" },
  { "save-init", nil, "write the initial weights (f32, tegraph's names) as safetensors to this file", "string" },
  { "windows", nil, "write the window offsets of every microbatch to this file", "string" },
  { "quiet", false, "no line per 50 steps" },
}, arg)

local function fail(msg)
  io.stderr:write("bf16_study.lua: " .. msg .. "\n")
  os.exit(2)
end
if not opt.text then fail("--text FILE is required") end
if opt.dtype ~= "f32" and opt.dtype ~= "bf16" then fail("--dtype must be f32 or bf16 (got " .. opt.dtype .. ")") end
if opt["bf16-grads"] and opt.dtype ~= "bf16" then fail("--bf16-grads goes with --dtype bf16") end
if opt.debug then
  for _, name in ipairs(train.split_names(opt.debug)) do
    local ok, err = pcall(tg.debug, name, true)
    if not ok then fail("--debug: " .. tostring(err)) end
  end
end

local tok, tok_id = text.tokenizer(nil)
local bin = data.tokenize(opt.text, tok, { tokenizer_id = tok_id })
local loader = data.open(bin, { vocab = 256 })
local B, M, T = opt.batch, opt.microbatches, opt.context
if T + 1 > loader:size() then fail(string.format("%s: %d bytes, too few for windows of %d (+1)", opt.text, loader:size(), T)) end

tg.manual_seed(opt.seed)
local fuse -- nil: nn.GPT's default (f32 main_grad in bf16); false: bf16 gradients
if opt["bf16-grads"] then fuse = false end
local model = nn.GPT {
  vocab_size = 256, max_position_embeddings = T, hidden_size = opt.width, num_attention_heads = opt.heads,
  num_layers = opt.layers, dtype = opt.dtype,
  fuse_wgrad_accumulation = fuse,
  residual_init_std = 0.02 / math.sqrt(2 * opt.layers),
}
if opt["save-init"] then
  local w = {}
  for _, p in ipairs(model:parameters()) do w[p.name] = p.master or p.data end
  tg.save(opt["save-init"], w, { source = "examples/bench/bf16_study.lua", seed = tostring(opt.seed) })
end

local trainer = train.new {
  model = model, microbatches = M,
  adamw = { lr = opt.lr, beta1 = 0.9, beta2 = opt.beta2, eps = 1e-8, weight_decay = opt["weight-decay"],
    max_norm = opt.clip > 0 and opt.clip or nil },
}
local schedule = optim.cosine_schedule { lr = opt.lr, min_lr = opt["min-lr"], warmup = opt.warmup, total = opt.steps }

local function open(path)
  local f, err = io.open(path, "w")
  if not f then fail("cannot write " .. tostring(err)) end
  return f
end
local csv = opt.csv and open(opt.csv)
local win = opt.windows and open(opt.windows)
if csv then csv:write("step,loss,lr,grad_norm,ms\n") end
if win then win:write(string.format("# bf16_study windows: text %s, B %d, T %d, microbatches %d; line: step microbatch offsets\n",
  opt.text, B, T, M)) end

print(string.format("bf16 study: %s (%d bytes) | %s%s%s, %d layers, width %d, heads %d, context %d, %d x %d sequences, %d steps",
  opt.text, loader:size(), opt.dtype, opt.dtype == "bf16" and (opt["bf16-grads"] and " (bf16 grads)" or " (f32 main_grad)") or "",
  opt.debug and (", debug " .. opt.debug) or "", opt.layers, opt.width, opt.heads, T, B, M, opt.steps))
local last = loader:size() - T - 1
local losses = {}
local t_steady, tokens = nil, 0
for step = 1, opt.steps do
  math.randomseed(opt.seed, step)
  local xs, ys = {}, {}
  for m = 1, M do
    local starts = {}
    for b = 1, B do starts[b] = math.random(0, last) end
    xs[m], ys[m] = tg.ops.token_windows(loader.bytes, loader.first, starts, T, loader.device)
    if win then win:write(step, " ", m, " ", table.concat(starts, " "), "\n") end
  end
  local lr = schedule(step)
  local t0 = tg.time()
  local r = trainer:step(xs, ys, lr)
  local vals = trainer:losses(r)
  local ms = (tg.time() - t0) * 1e3
  local loss = 0
  for _, v in ipairs(vals) do loss = loss + v end
  loss = loss / #vals
  if loss ~= loss or loss == math.huge then fail(string.format("step %d: non-finite loss %s", step, tostring(loss))) end
  losses[step] = loss
  local norm = trainer:grad_norm() or 0 / 0
  if csv then csv:write(string.format("%d,%.6f,%.6g,%.6g,%.3f\n", step, loss, lr, norm, ms)) end
  if step == 2 then t_steady = tg.time() end
  if step > 2 then tokens = tokens + M * B * T end
  if not opt.quiet and (step % 50 == 0 or step == 1) then
    print(string.format("step %4d  loss %.4f  lr %.2e  norm %.3f  %.1f ms", step, loss, lr, norm, ms))
  end
end
tg.stream.current(tg.default_device()):sync()
local elapsed = t_steady and (tg.time() - t_steady) or 0
if csv then csv:close() end
if win then win:close() end
local n = math.min(opt.tail, #losses)
local s = 0
for i = #losses - n + 1, #losses do s = s + losses[i] end
print(string.format("last-%d-step mean loss %.5f | %.0f tokens/s (steps 3..%d)", n, s / n,
  elapsed > 0 and tokens / elapsed or 0, opt.steps))
