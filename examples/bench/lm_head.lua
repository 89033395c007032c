-- lm_head.lua — the LM head's forward_loss + backward at GPT-2 size, unfused (all logits) and fused (chunks of
-- rows): ms per call, TFLOP/s of its 3 GEMMs, kernel and GEMM calls per call, and the peak of the memory the call
-- adds (the allocator's high-water mark during the call minus what was held before it).
--   tegraph run examples/bench/lm_head.lua [--tokens 8192] [--chunks off,auto,1024,2048,4096] [--dtype bf16]
-- Each variant: 2 warm-up calls, then --iters calls back to back and one synchronisation.
local tg = require "tegraph"
local nn = require "tegraph.nn"

local opt = require("tegraph.cli").parse("examples/bench/lm_head.lua", {
  { "tokens", 8192, "rows N (GPT-2's 8 x 1024 a microbatch)", min = 1 },
  { "width", 768, "hidden size C", min = 1 },
  { "vocab", 50304, "vocabulary V (GPT-2's padded table)", min = 1 },
  { "dtype", "bf16", "f32 or bf16" },
  { "iters", 10, "timed calls per variant", min = 1 },
  { "chunks", "off,auto,1024,2048,4096", "variants: off (unfused), auto (the default chunk) or rows a chunk" },
  { "device", nil, "cpu or cuda (default: tegraph's default device)" },
}, arg)
local device = opt.device or tg.default_device()
local stream = tg.stream.current(device)
local N, C, V = opt.tokens, opt.width, opt.vocab

tg.manual_seed(1)
local x = tg.randn({ N, C }, { dtype = opt.dtype, device = device })
local tl = {}
for r = 1, N do tl[r] = (r * 7919) % V end
local targets = tg.tensor(tl, { dtype = "i32", device = device })

print(string.format("LM head forward_loss + backward: N %d, C %d, V %d, %s, %s", N, C, V, opt.dtype, device))
for variant in opt.chunks:gmatch("[^,]+") do
  local fused = variant ~= "off"
  local rows = tonumber(variant)
  if fused and variant ~= "auto" and not rows then error("lm_head.lua: --chunks: '" .. variant .. "' is not off, auto or a number", 0) end
  tg.manual_seed(2)
  local head = nn.LMHead { hidden_size = C, vocab_size = V, dtype = opt.dtype, device = device,
    fuse_wgrad_accumulation = true, fused_loss = fused, loss_chunk_rows = rows }
  local function call()
    tg.step_begin { microbatches = 1 }
    head:loss(x, targets, 1, -1, fused and 1.0 or nil)
    head:backward(1.0, 1)
    tg.step_end()
  end
  for _ = 1, 2 do call() end
  stream:sync()
  collectgarbage()
  tg.reset_peak_memory(device)
  local s0 = tg.device_stats(device)
  local t0 = tg.time()
  for _ = 1, opt.iters do call() end
  stream:sync()
  local ms = (tg.time() - t0) * 1e3 / opt.iters
  local s1 = tg.device_stats(device)
  print(string.format("%-6s %9.3f ms %7.1f TFLOP/s  %4.0f kernel + %3.0f GEMM calls  peak +%8.1f MiB", variant, ms,
    3 * 2 * N * C * V / ms / 1e9, (s1.kernels - s0.kernels) / opt.iters, (s1.gemms - s0.gemms) / opt.iters,
    (s1.peak_memory - s0.memory) / 2 ^ 20))
  head = nil
  collectgarbage()
end
