-- graph_full_iteration.lua — one GPT training step (every microbatch's forward and backward, delayed layer
-- wgrads, wgrad hooks, capturable AdamW) four ways: eager, per-layer graphs (tegraph.train with graph = true),
-- full-iteration capture in tegraph.train (graph = "full", gpt.lua --graph full) and by hand
-- (tg.graph.capture_step, replayed per step with static input buffers the loop fills). Prints host time per
-- step (issuing the work), wall time per step and tokens/s.
-- usage: tegraph run examples/bench/graph_full_iteration.lua [--preset tiny|small|gpt2] [--batch 8]
--        [--microbatches 2] [--iters 20] [--dtype bf16] [--device cpu|cuda]
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local train = require "tegraph.train"

local opt = require("tegraph.cli").parse("examples/bench/graph_full_iteration.lua", {
  { "preset", "tiny", "model size: tiny (2 layers, width 64), small (6 layers, width 256), gpt2 (GPT-2 124M)" },
  { "batch", 8, "sequences per microbatch" },
  { "tokens", 0, "sequence length (0: the preset's)" },
  { "microbatches", 2, "microbatches per step" },
  { "iters", 20, "timed steps" },
  { "dtype", "bf16", "f32 or bf16" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
}, arg)

local presets = {
  tiny = { layers = 2, width = 64, heads = 4, T = 64, vocab = 512 },
  small = { layers = 6, width = 256, heads = 8, T = 128, vocab = 4096 },
  gpt2 = { layers = 12, width = 768, heads = 12, T = 1024, vocab = 50257 },
}
local P = presets[opt.preset]
if not P then error("graph_full_iteration.lua: --preset must be tiny, small or gpt2 (got " .. tostring(opt.preset) .. ")", 0) end
local T, B, M = opt.tokens > 0 and opt.tokens or P.T, opt.batch, opt.microbatches
local device = opt.device or tg.default_device()
local stream = tg.stream.current(device)

local function model()
  tg.manual_seed(1)
  return nn.GPT { vocab_size = P.vocab, make_vocab_size_divisible_by = 64, max_position_embeddings = T,
    hidden_size = P.width, num_attention_heads = P.heads, num_layers = P.layers, dtype = opt.dtype,
    delay_wgrad = "layers", fuse_wgrad_accumulation = true, device = device }
end

math.randomseed(3)
local function ids()
  local v = {}
  for i = 1, B * T do v[i] = math.random(0, P.vocab - 1) end
  return tg.tensor(v, { dtype = "i32", device = device }):view({ B, T })
end
local xs, ys = {}, {}
for m = 1, M do xs[m], ys[m] = ids(), ids() end

-- Times `step` (host: issuing; wall: until the device is done); `warm` (default 1) untimed steps first.
local function timed(step, warm)
  for _ = 1, warm or 1 do step() end
  stream:sync()
  local t0 = tg.time()
  for _ = 1, opt.iters do step() end
  local host = tg.time() - t0
  stream:sync()
  local wall = tg.time() - t0
  return host / opt.iters, wall / opt.iters
end

local results = {}
-- "train-full": tegraph.train's graph = "full" (gpt.lua --graph full): step 1 eager, step 2 captures (both untimed)
for _, mode in ipairs { "eager", "layers", "train-full" } do
  local tr = train.new { model = model(), microbatches = M, hooks = "noop",
    graph = mode == "layers" or (mode == "train-full" and "full") or false,
    sample = mode == "layers" and tg.zeros({ B, T }, { dtype = "i32", device = device }) or nil,
    adamw = { lr = 1e-4, capturable = true } }
  results[#results + 1] = { mode, timed(function() tr:step(xs, ys, 1e-4) end, mode == "train-full" and 2 or 1) }
end

do -- full iteration: static input buffers, one capture
  local gpt = model()
  for _, p in ipairs(gpt:parameters()) do p:register_hook(function() end) end
  local adamw = optim.AdamW(gpt:parameters(), { lr = 1e-4, capturable = true })
  local sx, sy = {}, {}
  for m = 1, M do sx[m], sy[m] = tg.zeros({ B, T }, { dtype = "i32", device = device }), tg.zeros({ B, T }, { dtype = "i32", device = device }) end
  local function body()
    for m = 1, M do
      gpt:forward_loss(sx[m], sy[m], m)
      gpt:backward(1.0 / M, m)
    end
    for m = 1, M do gpt:backward_dw(m) end
    adamw:step()
  end
  -- an eager step first (allocator and library workspaces warm), then the capture
  tg.step_begin { microbatches = M }
  body()
  tg.step_end()
  stream:sync()
  local captured = tg.graph.capture_step(body, { microbatches = M })
  results[#results + 1] = { "full", timed(function()
    for m = 1, M do sx[m]:copy_(xs[m]); sy[m]:copy_(ys[m]) end -- the loader fills the static buffers
    captured:replay()
  end) }
end

print(string.format("GPT step: preset %s (%d layers, width %d, vocab %d), %d x %d tokens x %d microbatches, %s, device %s",
  opt.preset, P.layers, P.width, P.vocab, B, T, M, opt.dtype, tostring(device)))
for _, r in ipairs(results) do
  print(string.format("%-10s host %10.1f us/step   wall %10.1f us/step   %12.0f tokens/s", r[1], r[2] * 1e6, r[3] * 1e6,
    B * T * M / r[3]))
end
