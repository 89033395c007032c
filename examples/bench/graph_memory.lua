-- graph_memory.lua — graph memory of a graphed GPT layer stack for several replay orders: one chunk per layer
-- run mb by mb or GPipe-like (microbatches sharing microbatch 1's graphs where the order allows it, share = true,
-- the default, and without, share = false), and the orders of one process running every stage of 1F1B and ZB-H1
-- (--stages chunks of layers / stages layers each; static buffers reused across microbatches whose lifetimes do
-- not overlap, reuse = true, the default, and without, reuse = false; share = true: graphs shared there too):
-- pool peak, what the allocations would take without any reuse, and the number of graphs.
-- usage: tegraph run examples/bench/graph_memory.lua [--layers 12 --hidden 768 --heads 12 --seq 1024 --batch 4
--        --microbatches 4 --stages 4 --dtype bf16 --delay]
local tg = require "tegraph"

local opt = require("tegraph.cli").parse("examples/bench/graph_memory.lua", {
  { "layers", 12, "transformer layers, one chunk each (GPT-2 124M: 12)" },
  { "hidden", 768, "hidden size" },
  { "heads", 12, "attention heads" },
  { "seq", 1024, "tokens per sequence" },
  { "batch", 4, "sequences per microbatch" },
  { "microbatches", 4, "microbatches per step" },
  { "stages", 4, "pipeline stages of the 1F1B and ZB-H1 orders (layers / stages layers per chunk)" },
  { "dtype", "bf16", "compute dtype" },
  { "delay", false, "delay wgrad (W graphs)" },
}, arg)

local dev = tg.default_device()
local L, M, P = opt.layers, opt.microbatches, opt.stages
if P < 1 or L % P ~= 0 then error(string.format("--stages %d must divide --layers %d", P, L), 0) end
local schedule = require "tegraph.schedule"

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
  if kind == "1f1b" or kind == "zb_h1" then -- the compute order of one process running every stage
    local gen = kind == "1f1b" and schedule.one_f_one_b or schedule.zb_h1
    for _, a in ipairs(schedule.exec_order(gen { stages = P, microbatches = M })) do
      o[#o + 1] = { op = a.op, chunk = a.chunk, mb = a.mb }
    end
  elseif kind == "sequential" then
    for mb = 1, M do F(mb); B(mb) end
  else -- all F, then all B (GPipe on one stage)
    for mb = 1, M do F(mb) end
    for mb = M, 1, -1 do B(mb) end
  end
  return o
end

local function measure(kind, share, reuse)
  tg.manual_seed(1)
  local layers = {}
  for i = 1, L do
    layers[i] = tg.nn.TransformerLayer(opt.hidden, 4 * opt.hidden, opt.heads, { dtype = opt.dtype, device = dev,
      delay_wgrad = opt.delay, fuse_wgrad_accumulation = true, name = "h." .. (i - 1) })
  end
  local chunks = layers
  if kind == "1f1b" or kind == "zb_h1" then -- stage s: layers (s - 1) * L / P + 1 .. s * L / P
    chunks = {}
    for s = 1, P do
      local part = {}
      for i = (s - 1) * L // P + 1, s * L // P do part[#part + 1] = layers[i] end
      part.name = "stage" .. s
      chunks[s] = tg.nn.Sequential(part)
    end
  end
  local x = tg.zeros({ opt.batch, opt.seq, opt.hidden }, { dtype = opt.dtype, device = dev })
  local samples = {}
  for i = 1, #chunks do samples[i] = x end
  local g = tg.graph.make_graphed(chunks, { sample = samples, microbatches = M, order = order_of(kind), share = share,
    reuse = reuse })
  local peak, naive = g[1]:memory()
  print(string.format("%-10s share=%-5s reuse=%-5s graphs %4d  pool peak %9.1f MiB  without reuse %9.1f MiB  shared %-5s"
    .. "  reused %s", kind, tostring(share), tostring(reuse), g[1]:graphs(), peak / 2 ^ 20, naive / 2 ^ 20,
    tostring(g[1]:shared()), tostring(g[1]:reused())))
  g:free()
end

print(string.format("%d layers x %d, %d x %d tokens, %d microbatches, %d stages, %s%s", L, opt.hidden, opt.batch,
  opt.seq, M, P, opt.dtype, opt.delay and ", delayed wgrad" or ""))
-- before: share = false, reuse = false (graphs and static buffers per microbatch); after: the defaults (share
-- where the order is sequential, static buffers reused where microbatches overlap); and share = true (graphs
-- shared across overlapping microbatches where lifetimes allow too)
for _, kind in ipairs { "sequential", "gpipe", "1f1b", "zb_h1" } do
  measure(kind, false, false)
  measure(kind, nil, true)
  if kind == "1f1b" or kind == "zb_h1" then measure(kind, true, true) end
end
