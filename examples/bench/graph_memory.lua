-- graph_memory.lua — graph memory of a graphed GPT layer stack (one chunk per layer) for several replay orders,
-- with microbatches sharing microbatch 1's graphs where the order allows it (share = true, the default) and
-- without (share = false): pool peak, what the allocations would take without reuse, and the number of graphs.
-- usage: tegraph run examples/bench/graph_memory.lua [--layers 12 --hidden 768 --heads 12 --seq 1024 --batch 4
--        --microbatches 4 --dtype bf16 --delay]
local tg = require "tegraph"

local opt = require("tegraph.cli").parse("examples/bench/graph_memory.lua", {
  { "layers", 12, "transformer layers, one chunk each (GPT-2 124M: 12)" },
  { "hidden", 768, "hidden size" },
  { "heads", 12, "attention heads" },
  { "seq", 1024, "tokens per sequence" },
  { "batch", 4, "sequences per microbatch" },
  { "microbatches", 4, "microbatches per step" },
  { "dtype", "bf16", "compute dtype" },
  { "delay", false, "delay wgrad (W graphs)" },
}, arg)

local dev = tg.default_device()
local L, M = opt.layers, opt.microbatches

-- Orders over L chunks: one stage running every chunk.
local function order_of(kind)
  local o = {}
  local function F(mb) for c = 1, L do o[#o + 1] = { op = "F", chunk = c, mb = mb } end end
  local function B(mb)
    for c = L, 1, -1 do
      o[#o + 1] = { op = "B", chunk = c, mb = mb }
      o[#o + 1] = { op = "W", chunk = c, mb = mb }
    end
  end
  if kind == "sequential" then
    for mb = 1, M do F(mb); B(mb) end
  else -- all F, then all B (GPipe on one stage)
    for mb = 1, M do F(mb) end
    for mb = M, 1, -1 do B(mb) end
  end
  return o
end

local function measure(kind, share)
  tg.manual_seed(1)
  local layers = {}
  for i = 1, L do
    layers[i] = tg.nn.TransformerLayer(opt.hidden, 4 * opt.hidden, opt.heads, { dtype = opt.dtype, device = dev,
      delay_wgrad = opt.delay, fuse_wgrad_accumulation = true, name = "h." .. (i - 1) })
  end
  local x = tg.zeros({ opt.batch, opt.seq, opt.hidden }, { dtype = opt.dtype, device = dev })
  local samples = {}
  for i = 1, L do samples[i] = x end
  local g = tg.graph.make_graphed(layers, { sample = samples, microbatches = M, order = order_of(kind), share = share })
  local peak, naive = g[1]:memory()
  print(string.format("%-10s share=%-5s graphs %4d  pool peak %9.1f MiB  without reuse %9.1f MiB  shared %s", kind,
    tostring(share), g[1]:graphs(), peak / 2 ^ 20, naive / 2 ^ 20, tostring(g[1]:shared())))
  g:free()
end

print(string.format("%d layers x %d, %d x %d tokens, %d microbatches, %s%s", L, opt.hidden, opt.batch, opt.seq, M,
  opt.dtype, opt.delay and ", delayed wgrad" or ""))
for _, kind in ipairs { "sequential", "gpipe" } do
  measure(kind, false)
  measure(kind, true)
end
