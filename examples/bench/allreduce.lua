-- allreduce.lua — bus bandwidth of an all-reduce of a grad-buffer-sized f32 tensor across ranks.
-- usage: tegraph run -n 2 examples/bench/allreduce.lua [--numel 124439808] [--iters 20]
local tg = require "tegraph"

local opt = require("tegraph.cli").parse("examples/bench/allreduce.lua", {
  { "numel", 124439808, "f32 elements to all-reduce (GPT-2 124M's parameter count)" },
  { "iters", 20, "timed all-reduces after one warm-up" },
}, arg)
local world = tg.comm.world()
local n, r = world:size(), world:rank()
local x = tg.ones({ opt.numel }, { device = tg.default_device() })
local stream = tg.stream.current(tg.default_device())
world:all_reduce(x) -- warm-up (and connection set-up)
world:barrier()
stream:sync()
local t0 = tg.time()
for _ = 1, opt.iters do world:all_reduce(x) end
stream:sync()
world:barrier()
local dt = (tg.time() - t0) / opt.iters
local bytes = opt.numel * 4
-- NCCL's convention: bus bandwidth = algorithm bandwidth * 2 (n - 1) / n
if r == 0 then
  print(string.format("all_reduce f32 x %d (%.1f MB) over %d ranks (%s): %.3f ms, algbw %.1f GB/s, busbw %.1f GB/s",
    opt.numel, bytes / 1e6, n, world:backend(), dt * 1e3, bytes / dt / 1e9, bytes / dt / 1e9 * 2 * (n - 1) / n))
end
