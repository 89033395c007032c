-- optim.lua — time of one AdamW step (global-norm clip 1.0) over GPT-2-124M-sized parameters: per-tensor vs multi-tensor.
--   tegraph run examples/bench/optim.lua [--iters 20] [--layers 12] [--vocab 50257] [--dtype bf16]
-- 148 parameters (bf16 with f32 master weights and fused f32 main_grad by default). Each row: 3 warm-up steps,
-- then --iters steps back to back and one synchronisation: ms per step, host syncs and launches included.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local ops = tg.ops

local opt = require("tegraph.cli").parse("examples/bench/optim.lua", {
  { "iters", 20, "timed steps per row after 3 warm-up steps" },
  { "layers", 12, "transformer layers of the parameter list" },
  { "vocab", 50257, "vocabulary size of the token table" },
  { "dtype", "bf16", "parameter dtype: bf16 or f32" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
}, arg)
local device = opt.device or tg.default_device()
local stream = tg.stream.current(device)
local C, T = 768, 1024

local function params()
  local ps, numel = {}, 0
  local function add(name, shape)
    local p = nn.Parameter(name, tg.randn(shape, { dtype = opt.dtype, device = device }), { fuse_wgrad_accumulation = true })
    p.wgrad = tg.randn(shape, { dtype = "f32", device = device })
    ps[#ps + 1] = p
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    numel = numel + n
  end
  add("wte", { opt.vocab, C })
  add("wpe", { T, C })
  for l = 1, opt.layers do
    local h = "h" .. l .. "."
    add(h .. "ln1.w", { C }); add(h .. "ln1.b", { C })
    add(h .. "qkv.w", { C, 3 * C }); add(h .. "qkv.b", { 3 * C })
    add(h .. "proj.w", { C, C }); add(h .. "proj.b", { C })
    add(h .. "ln2.w", { C }); add(h .. "ln2.b", { C })
    add(h .. "fc.w", { C, 4 * C }); add(h .. "fc.b", { 4 * C })
    add(h .. "fcproj.w", { 4 * C, C }); add(h .. "fcproj.b", { C })
  end
  add("lnf.w", { C }); add("lnf.b", { C })
  return ps, numel
end

local function timed(fn)
  for _ = 1, 3 do fn() end
  stream:sync()
  collectgarbage()
  local t0 = tg.time()
  for _ = 1, opt.iters do fn() end
  stream:sync()
  return (tg.time() - t0) * 1e3 / opt.iters
end

local ps, numel = params()
print(string.format("AdamW step, %d parameters (%.1f M elements, %s), device %s, %d steps each", #ps, numel / 1e6,
  opt.dtype, tostring(device), opt.iters))
local function row(name, ms) print(string.format("%-66s %9.3f ms/step", name, ms)) end

-- before: a host-read sum of squares per gradient, then one adamw_step per parameter
local old = optim.AdamW(ps, { lr = 1e-4, foreach = false })
row(string.format("per-tensor: sumsq per tensor (%d syncs) + adamw_step each", #ps), timed(function()
  local sq = 0.0
  for _, p in ipairs(ps) do sq = sq + ops.sumsq(p.wgrad) end
  local s = optim.clip_factor(math.sqrt(sq), 1.0)
  old:step() -- one adamw_step per parameter (the scale does not change the time)
  return s
end))
local each = optim.AdamW(ps, { lr = 1e-4, max_norm = 1.0, foreach = false })
row("per-tensor (foreach=false): one sumsq_multi sync + adamw_step each", timed(function() each:step() end))
local multi = optim.AdamW(ps, { lr = 1e-4, max_norm = 1.0 })
row("multi-tensor: clip on device, norm read back (1 sync)", timed(function() multi:step() end))
local lazy = optim.AdamW(ps, { lr = 1e-4, max_norm = 1.0, sync_norm = false })
row("multi-tensor: clip on device, sync_norm=false (no sync)", timed(function() lazy:step() end))
local ok, g = pcall(tg.stream.capture, function() lazy:step() end, { device = device })
if ok then
  row(string.format("multi-tensor: captured step replayed (%d nodes)", g:size()), timed(function() g:replay() end))
else
  print("capture of the step failed: " .. tostring(g))
end
