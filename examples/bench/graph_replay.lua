-- graph_replay.lua — host time per microbatch of F + B + W (delayed wgrad, hooks on) for a 12-layer chunk, eager vs graphed.
-- usage: tegraph run examples/bench/graph_replay.lua [--layers 12] [--dim 64] [--tokens 16] [--iters 50] [--device cpu|cuda]
local tg = require "tegraph"

local opt = require("tegraph.cli").parse("examples/bench/graph_replay.lua", {
  { "layers", 12, "transformer layers of the chunk" },
  { "dim", 64, "model width" },
  { "tokens", 16, "sequence length" },
  { "heads", 4, "attention heads" },
  { "iters", 50, "timed steps" },
  { "microbatches", 4, "microbatches per step" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
}, arg)
local device = opt.device or tg.default_device()

local function build()
  tg.manual_seed(1)
  local layers = {}
  for l = 1, opt.layers do
    layers[l] = tg.nn.TransformerLayer(opt.dim, 4 * opt.dim, opt.heads, { dtype = "bf16",
      device = device, delay_wgrad = true, fuse_wgrad_accumulation = true, name = "h." .. (l - 1) })
  end
  layers.name = "chunk"
  return tg.nn.Sequential(layers)
end

local M = opt.microbatches
local x = tg.randn({ 1, opt.tokens, opt.dim }, { dtype = "bf16", device = device })
local dy = tg.randn({ 1, opt.tokens, opt.dim }, { dtype = "bf16", device = device })
local stream = tg.stream.current(device)

local function run(model, g, hooks)
  local fired = 0
  model:register_wgrad_hook(function() fired = fired + 1 end)
  local function step()
    tg.step_begin{ microbatches = M }
    for mb = 1, M do
      if g then g:forward(x, mb) else model:forward(x, mb) end
    end
    for mb = M, 1, -1 do
      if g then g:backward(dy, mb); g:backward_dw(mb) else model:backward(dy, mb); model:backward_dw(mb) end
    end
    tg.step_end()
  end
  step() -- warm
  stream:sync()
  local t0 = tg.time()
  for _ = 1, opt.iters do step() end
  local host = tg.time() - t0 -- host time to issue the work
  stream:sync()
  local total = tg.time() - t0
  return host / (opt.iters * M) * 1e6, total / (opt.iters * M) * 1e6, fired
end

local nparams = #build():parameters()
print(string.format("graph replay overhead: %d layers, dim %d, %d tokens, bf16, delayed wgrad, %d params with hooks, device %s",
  opt.layers, opt.dim, opt.tokens, nparams, tostring(device)))
local m1 = build()
local eh, et, ef = run(m1, nil)
local m2 = build()
local g = tg.graph.make_graphed(m2, { sample = x, microbatches = M })
local gh, gt, gf = run(m2, g)
print(string.format("%-8s host %9.1f us/microbatch   wall %9.1f us/microbatch   hooks fired %d", "eager", eh, et, ef))
print(string.format("%-8s host %9.1f us/microbatch   wall %9.1f us/microbatch   hooks fired %d", "graphed", gh, gt, gf))
local peak, naive = g:memory()
print(string.format("graph memory: peak %.2f MiB, without reuse %.2f MiB", peak / 2 ^ 20, naive / 2 ^ 20))
