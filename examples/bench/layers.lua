-- layers.lua — transformer layer stacks (bf16, fwd+bwd per microbatch), eager and graphed: ms, TFLOP/s, ratio to PyTorch
-- (the same stacks in PyTorch: examples/bench/peers/layers.py).
--
--   tegraph run examples/bench/layers.lua [--torch FILE] [--iters 30] [--only NAME] [--modes eager,graphed]
--                                         [--fused 0|1] [--gemm 8192] [--fp8 delayed|current]
--
-- --torch FILE: the output of peers/layers.py (its JSON lines), to print our time / PyTorch's time per mode
-- (below 1: tegraph is faster) and the throughput ratio. --gemm N: also time an N x N x N bf16 GEMM through
-- tegraph (cuBLASLt) for the GEMM peak. Times: median over --iters steps, each synchronised (device wall
-- time, launch gaps included), after 5 warm-up steps, as peers/layers.py does with CUDA events.
-- --fp8 delayed|current: every configuration and mode also runs with the layers' GEMMs in FP8 (HYBRID recipe:
-- tg.fp8.DelayedScaling{} or tg.fp8.CurrentScaling{}), printed after the bf16 run with its speedup over it.
local tg = require "tegraph"

local opt = require("tegraph.cli").parse("examples/bench/layers.lua", {
  { "torch", nil, "the output of examples/bench/peers/layers.py (JSON lines): print our time / PyTorch's per mode" },
  { "iters", 30, "timed steps per configuration and mode (median)" },
  { "only", nil, "only the configuration with this name" },
  { "modes", "eager,graphed", "comma-separated modes: eager, graphed" },
  { "fused", 0, "1: weight gradients fused into f32 main_grad" },
  { "gemm", 8192, "also time an N x N x N bf16 GEMM (0: skip)" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
  { "fp8", nil, "delayed or current: also run the stacks with FP8 GEMMs (HYBRID) and print the speedup over bf16" },
}, arg)
local recipe = nil
if opt.fp8 == "delayed" then recipe = tg.fp8.DelayedScaling{}
elseif opt.fp8 == "current" then recipe = tg.fp8.CurrentScaling{}
elseif opt.fp8 ~= nil then error("--fp8 must be delayed or current (got " .. tostring(opt.fp8) .. ")", 0) end
local device = opt.device or tg.default_device()
local stream = tg.stream.current(device)

local cfgs = {
  { name = "tiny-launchbound", L = 8, b = 1, t = 128, h = 512, nh = 8 },
  { name = "small", L = 4, b = 2, t = 1024, h = 1024, nh = 16 },
  { name = "gpt2-124M-like", L = 12, b = 8, t = 1024, h = 768, nh = 12 },
  { name = "large", L = 2, b = 2, t = 2048, h = 4096, nh = 32 },
}

-- The FLOP count of peers/layers.py: linear fwd FLOPs + causal attention (half of QK^T and AV), times 3 for fwd + bwd.
local function flops(L, b, t, h, ffn)
  local lin = 2 * b * t * (h * 3 * h + h * h + 2 * h * ffn)
  local att = 2 * 2 * b * t * t * h / 2
  return 3 * L * (lin + att)
end

-- PyTorch's figures: torch[cfg][mode] = {ms=, tflops=}; also its GEMM peak.
local torch, torch_gemm = {}, nil
if opt.torch then
  local f = assert(io.open(opt.torch, "r"))
  for line in f:lines() do
    local cfg, mode, ms = line:match('"cfg": "([^"]+)", "mode": "([^"]+)", "ms": ([%d%.]+)')
    if cfg then
      torch[cfg] = torch[cfg] or {}
      torch[cfg][mode] = { ms = tonumber(ms), tflops = tonumber(line:match('"tflops": ([%d%.]+)')) }
    end
    local g = line:match("^bf16 gemm TFLOP/s ([%d%.]+)")
    if g then torch_gemm = tonumber(g) end
  end
  f:close()
end

local function build(c, fp8)
  tg.manual_seed(0)
  local layers = { name = "stack" }
  for l = 1, c.L do
    layers[l] = tg.nn.TransformerLayer(c.h, 4 * c.h, c.nh, {
      dtype = "bf16", device = device, fp8 = fp8,
      fuse_wgrad_accumulation = opt.fused == 1, name = "h." .. (l - 1),
    })
  end
  return tg.nn.Sequential(layers)
end

local function median(ts)
  table.sort(ts)
  return ts[(#ts + 1) // 2]
end

-- ms (median synchronised step), host ms to issue one step, wall ms per step when issued back to back.
local function bench(c, mode, fp8)
  local model = build(c, fp8)
  local x = tg.randn({ c.b, c.t, c.h }, { dtype = "bf16", device = device })
  local dy = tg.randn({ c.b, c.t, c.h }, { dtype = "bf16", device = device })
  local g = mode == "graphed" and tg.graph.make_graphed(model, { sample = x, microbatches = 1 }) or nil
  local function step()
    tg.step_begin { microbatches = 1 }
    if g then
      local y <close> = g:forward(x, 1)
      local dx <close> = g:backward(dy, 1)
    else
      local y <close> = model:forward(x, 1)
      local dx <close> = model:backward(dy, 1)
    end
    tg.step_end()
  end
  for _ = 1, 5 do step() end
  stream:sync()
  local ts = {}
  for k = 1, opt.iters do
    local t0 = tg.time()
    step()
    stream:sync()
    ts[k] = (tg.time() - t0) * 1e3
  end
  local t0 = tg.time()
  for _ = 1, opt.iters do step() end
  local host = (tg.time() - t0) * 1e3 / opt.iters
  stream:sync()
  local wall = (tg.time() - t0) * 1e3 / opt.iters
  model, g = nil, nil
  collectgarbage()
  return median(ts), host, wall
end

-- --only NAME: a configuration's name or its first word (tiny, small, gpt2, large)
local function is_only(c) return not opt.only or opt.only == c.name or c.name:sub(1, #opt.only + 1) == opt.only .. "-" end
local names = {}
for _, c in ipairs(cfgs) do names[#names + 1] = c.name end
local any = false
for _, c in ipairs(cfgs) do any = any or is_only(c) end
if not any then
  io.stderr:write(string.format("layers.lua: --only %s: no such configuration (one of %s, or tiny, gpt2)\n", opt.only,
    table.concat(names, ", ")))
  os.exit(2)
end
local modes = {}
for m in tostring(opt.modes):gmatch("[^,]+") do
  if m ~= "eager" and m ~= "graphed" then
    io.stderr:write(string.format("layers.lua: --modes: unknown mode '%s' (eager, graphed)\n", m))
    os.exit(2)
  end
  modes[#modes + 1] = m
end

print(string.format("tegraph layer stacks, bf16, fwd+bwd per microbatch, device %s, %d iterations (median)%s",
  tostring(device), opt.iters, opt.fused == 1 and ", wgrad fused into f32 main_grad" or ""))
print(string.format("%-17s %-8s %10s %9s %10s %10s %12s %12s", "config", "mode", "ms", "TFLOP/s", "host ms", "wall ms",
  "vs torch", "torch graphed"))
local results = {}
for _, c in ipairs(cfgs) do
  if is_only(c) then
    local f = flops(c.L, c.b, c.t, c.h, 4 * c.h)
    for _, mode in ipairs(modes) do
      local ok, ms, host, wall = pcall(bench, c, mode)
      if not ok then
        print(string.format("%-17s %-8s FAILED: %s", c.name, mode, tostring(ms)))
      else
        local tf = f / ms / 1e9
        local tr = torch[c.name] and torch[c.name][mode]
        local tgr = torch[c.name] and torch[c.name].graphed
        print(string.format("%-17s %-8s %10.3f %9.1f %10.3f %10.3f %12s %12s", c.name, mode, ms, tf, host, wall,
          tr and string.format("%.2fx time", ms / tr.ms) or "-",
          tgr and string.format("%.2fx time", ms / tgr.ms) or "-"))
        results[#results + 1] = { cfg = c.name, mode = mode, ms = ms, tflops = tf }
      end
      if recipe then -- the same stack with FP8 GEMMs: its time, bf16-equivalent TFLOP/s and speedup over bf16
        local ok8, ms8, host8, wall8 = pcall(bench, c, mode, recipe)
        local name = c.name .. " fp8"
        if not ok8 then
          print(string.format("%-17s %-8s FAILED: %s", name, mode, tostring(ms8)))
        else
          print(string.format("%-17s %-8s %10.3f %9.1f %10.3f %10.3f %12s", name, mode, ms8, f / ms8 / 1e9, host8, wall8,
            ok and string.format("%.2fx bf16", ms / ms8) or "-"))
          results[#results + 1] = { cfg = name, mode = mode, ms = ms8, tflops = f / ms8 / 1e9 }
        end
      end
    end
  end
end

if opt.gemm and opt.gemm > 0 then
  local n = opt.gemm
  local a = tg.randn({ n, n }, { dtype = "bf16", device = device })
  local b = tg.randn({ n, n }, { dtype = "bf16", device = device })
  local c = tg.zeros({ n, n }, { dtype = "bf16", device = device })
  for _ = 1, 3 do a:matmul(b, { out = c }) end
  stream:sync()
  local t0 = tg.time()
  for _ = 1, 10 do a:matmul(b, { out = c }) end
  stream:sync()
  local tf = 10 * 2 * n ^ 3 / (tg.time() - t0) / 1e12
  print(string.format("bf16 gemm %dx%dx%d through tegraph: %.1f TFLOP/s%s", n, n, n, tf,
    torch_gemm and string.format(" (torch: %.1f)", torch_gemm) or ""))
end
