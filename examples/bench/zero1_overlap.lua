-- zero1_overlap.lua — ZeRO-1 with the parameter all-gather in step() (synchronous) against the all-gather
-- finished in forward pre-hooks (zero1 with model =): step time, and from a trace of each how much communication
-- time compute overlapped. Writes the traces (Chrome JSON) as PREFIX.sync and PREFIX.overlap (.rank<r> per rank).
-- usage: tegraph run -n 2 examples/bench/zero1_overlap.lua [--layers 12 --hidden 768 --heads 12 --seq 1024
--        --batch 4 --microbatches 2 --steps 6 --trace /tmp/zero1]
local tg = require "tegraph"
local reduce = require "tegraph.reduce"

local opt = require("tegraph.cli").parse("examples/bench/zero1_overlap.lua", {
  { "layers", 12, "transformer layers (GPT-2 124M: 12)" },
  { "hidden", 768, "hidden size" },
  { "heads", 12, "attention heads" },
  { "vocab", 50304, "vocabulary (padded)" },
  { "seq", 1024, "tokens per sequence" },
  { "batch", 4, "sequences per microbatch" },
  { "microbatches", 2, "microbatches per step" },
  { "steps", 6, "steps per variant (the first two untraced)" },
  { "dtype", "bf16", "compute dtype" },
  { "bucket-mb", 25, "bucket size in MiB" },
  { "trace", "zero1-trace", "trace file prefix" },
}, arg)

local world = tg.comm.world()
local rank, dev = world:rank(), tg.default_device()
local stream = tg.stream.current(dev)

local function run(variant)
  tg.manual_seed(1)
  local gpt = tg.nn.GPT { vocab_size = opt.vocab, max_position_embeddings = opt.seq, hidden_size = opt.hidden,
    num_attention_heads = opt.heads, num_layers = opt.layers, dtype = opt.dtype, fuse_wgrad_accumulation = true,
    device = dev }
  local z = reduce.zero1 { params = gpt:parameters(), comm = world, lr = 1e-4, bucket_bytes = opt["bucket-mb"] << 20,
    model = variant == "overlap" and { gpt.body, gpt.head } or nil }
  local ids = {}
  for b = 1, opt.batch do
    ids[b] = {}
    for s = 1, opt.seq + 1 do ids[b][s] = (b * 7919 + s * 104729 + rank * 31) % opt.vocab end
  end
  local xs, ys = {}, {}
  for b = 1, opt.batch do xs[b], ys[b] = table.move(ids[b], 1, opt.seq, 1, {}), table.move(ids[b], 2, opt.seq + 1, 1, {}) end
  local idx = tg.tensor(xs, { dtype = "i32" }):to(dev)
  local tgt = tg.tensor(ys, { dtype = "i32" }):to(dev)
  local M = opt.microbatches
  local function step()
    tg.step_begin { microbatches = M }
    for mb = 1, M do gpt:forward_loss(idx, tgt, mb) end
    for mb = M, 1, -1 do gpt:backward(1.0 / M, mb) end
    tg.step_end()
    z:finish()
    z:step()
  end
  step(); step()
  stream:sync(); world:barrier()
  local path = string.format("%s.%s%s", opt.trace, variant, world:size() > 1 and ".rank" .. rank or "")
  tg.trace.start()
  local t0 = tg.time()
  for _ = 3, opt.steps do step() end
  z:gather()
  stream:sync()
  local dt = (tg.time() - t0) / math.max(1, opt.steps - 2)
  local sum = tg.trace.stop(path, { quiet = true })
  world:barrier()
  if rank == 0 then
    print(string.format("%-8s %7.2f ms/step  comm busy %8.2f ms, overlapped by compute %8.2f ms, exposed %8.2f ms "
      .. "(%.1f%%)  trace %s", variant, dt * 1e3, sum.comm_busy_ms, sum.overlapped_ms, sum.exposed_ms,
      sum.exposed_pct, path))
  end
end

if rank == 0 then
  print(string.format("zero1 over %d ranks (%s): GPT %d layers x %d, %d x %d tokens x %d microbatches, %s",
    world:size(), world:backend(), opt.layers, opt.hidden, opt.batch, opt.seq, opt.microbatches, opt.dtype))
end
run("sync")
run("overlap")
