-- lua-library-errors-name-the-argument.lua — bad arguments to GPT:generate / decode, train:step, tegraph.gpt2,
-- tg.graph.capture_step, data.open, the reduce policies and progress.new are refused at the caller's line with a message naming the argument or the
-- option (they used to end in raw errors inside nn.lua, gpt2.lua, or be ignored when misspelt); a validation token
-- file with a bad header, opened as the training file's format, is reported as a bad header, not as a token id.
local tap = require "tap"
local caller = require "caller"
local at, refused = caller.at, caller.refused
local tg = require "tegraph"
local ex = require "run_example"

local gpt = tg.nn.GPT { vocab_size = 12, max_position_embeddings = 8, hidden_size = 16, num_attention_heads = 2,
  num_layers = 1 }

-- GPT:generate
refused(function() gpt:generate({ { 1, 2, 3 } }, "x") end,
  "generate: n %(the tokens to generate%) must be an integer >= 0, got the string 'x'", "generate(p, \"x\")")
refused(function() gpt:generate({ { 1, 2, 3 } }, -3) end, "generate: n .* must be an integer >= 0, got %-3", "n = -3")
refused(function() gpt:generate({ "hello" }, 3) end,
  "generate: prompt 1 is a string, not a list of token ids", "a prompt that is a string")
refused(function() gpt:generate("hello", 3) end, "generate: prompts must be a list of token lists", "prompts = \"hello\"")
refused(function() gpt:generate({ { 1, 99 } }, 3) end, "generate: prompt 1 token 2 is 99, not a token id in 0%.%.11",
  "a token id past the vocabulary")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { temprature = 0.5 }) end,
  "generate: unknown option 'temprature' %(use temperature%)", "a misspelt temperature")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { top_q = 0.5 }) end,
  "generate: unknown option 'top_q' %(known: cache, device, keep, on_token, seed, temperature, top_k, top_p%)",
  "an unknown option")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { temperature = -1 }) end,
  "generate: temperature must be >= 0 %(0: greedy%), got %-1", "temperature = -1")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { top_p = 2 }) end, "generate: top_p must be in %(0, 1%] %(1: all%), got 2",
  "top_p = 2")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { top_k = 1.5 }) end, "generate: top_k must be an integer, got 1%.5",
  "top_k = 1.5")
refused(function() gpt:generate({ { 1, 2, 3 } }, 3, { on_token = 1 }) end, "generate: on_token must be a function",
  "on_token = 1")
tap.is(#gpt:generate({ { 1, 2, 3 } }, 3, { temperature = 0 })[1], 3, "good options still generate")

-- GPT:decode
local ids = tg.zeros({ 1, 1 }, { dtype = "i32" })
refused(function() gpt:decode({}, ids) end, "decode: cache must be a key/value cache from gpt:kv_cache%(B%)",
  "decode with a table that is not a cache")
refused(function() gpt:decode(gpt:kv_cache(1), { 1 }) end, "decode: idx must be a %(B, T%) i32 tensor of token ids, got table",
  "decode of a table of ids")
refused(function() gpt:decode(gpt:kv_cache(1), tg.zeros { 1, 1 }) end, "decode: idx must be .*got a f32 tensor",
  "decode of f32 ids")

-- train:step with fewer inputs than microbatches
local tr = require("tegraph.train").new { model = gpt, microbatches = 2 }
local x = tg.zeros({ 1, 4 }, { dtype = "i32" })
refused(function() tr:step({ x }, { x, x }, 1e-3) end,
  "train:step: 1 inputs %(xs%) for 2 microbatches %(give one per microbatch%)", "train:step with 1 input for 2 microbatches")
refused(function() tr:step({ x, x }, { x }, 1e-3) end, "train:step: 1 targets %(ys%) for 2 microbatches",
  "train:step with 1 target for 2 microbatches")
refused(function() tr:step({ x, 5 }, { x, x }, 1e-3) end, "train:step: inputs %(xs%)%[2%] is a number, not a tensor",
  "train:step with a number for a tensor")
refused(function() tr:step({ x, x }, { x, x }, "fast") end, "train:step: lr must be a finite number >= 0, got fast",
  "train:step with lr = \"fast\"")
refused(function() tr:step({ x, x }, { x, x }, 1e-3, { skip_nan = true }) end,
  "train:step: unknown option 'skip_nan' %(known: skip_nonfinite%)", "train:step with a misspelt option")

-- tegraph.gpt2
local gpt2 = require "tegraph.gpt2"
refused(function() gpt2.load_llmc(nil, "x.bin") end, "gpt2%.load_llmc: argument #1 %(model%) must be an nn%.GPT, got nil",
  "load_llmc(nil, f)")
refused(function() gpt2.export_hf(42, "x.safetensors") end,
  "gpt2%.export_hf: argument #1 %(model%) must be an nn%.GPT, got number", "export_hf(42, f)")
refused(function() gpt2.export_hf(gpt, nil) end, "gpt2%.export_hf: argument #2 %(path%) must be a file name, got nil",
  "export_hf(model, nil)")
refused(function() gpt2.export_hf(gpt, "x.safetensors", { dtyp = "f32" }) end,
  "gpt2%.export_hf: unknown option 'dtyp' %(known: dtype%)", "export_hf with a misspelt option")
refused(function() gpt2.load_hf(gpt, 3) end, "gpt2%.load_hf: argument #2 %(path%) must be a file name, got number",
  "load_hf(model, 3)")

-- tg.graph.capture_step
refused(function() tg.graph.capture_step(function() end, { microbatchez = 3 }) end,
  "capture_step: unknown option 'microbatchez' %(known: microbatches, pool, stream%)", "capture_step with a misspelt option")
refused(function() tg.graph.capture_step(function() end, 3) end, "capture_step: opts must be a table", "capture_step opts = 3")

-- tegraph.data: options, and a file whose header is required
local dir = ex.tmpdir()
local good, bad = dir .. "/good.bin", dir .. "/badmagic.bin"
tg.data.write(good, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 })
local f = assert(io.open(good, "rb"))
local bytes = f:read("a")
f:close()
ex.write(bad, string.pack("<i4", 12345) .. bytes:sub(5))
refused(function() tg.data.open(good, { vocb = 12 }) end,
  "data%.open: unknown option 'vocb' %(known: device, headerless, vocab%)", "data.open with a misspelt option")
refused(function() tg.data.open(bad, { vocab = 256, headerless = false }) end,
  "badmagic%.bin: bad magic 12345 in the header %(expected 20240520", "headerless = false: a bad header is named as such")
tap.is(tg.data.open(good, { vocab = 256, headerless = false }):size(), 10, "headerless = false reads a good file")
os.execute("rm -rf " .. ex.q(dir))

-- the reduce policies, their bucket tracker and the progress bar refuse misspelt options too
local params = gpt:parameters()
refused(function() tg.reduce.ddp { params = params, bucket_mb = 4 } end,
  "ddp: unknown option 'bucket_mb' %(known: allow_missing, bucket_bytes, bucket_numel, comm, op, params%)",
  "reduce.ddp with a misspelt option")
refused(function() tg.reduce.tracker { params = params, on_ready = function() end, pad = 2 } end,
  "reduce%.tracker: unknown option 'pad' %(known: align, bucket_bytes, bucket_numel, name, on_ready, pad_to, params%)",
  "reduce.tracker with a misspelt option")
refused(function() tg.reduce.broadcast_params(params, { rank = 0 }) end,
  "reduce%.broadcast_params: unknown option 'rank' %(known: comm, root%)", "reduce.broadcast_params with a misspelt option")
refused(function() require("tegraph.progress").new { totl = 3 } end,
  "progress%.new: unknown option 'totl' %(known: every, log, max_skips, out, resume_step, tokens_per_step, total, tty%)",
  "progress.new with a misspelt option")
local z = tg.reduce.zero1 { params = params }
refused(function() z:step { lrr = 1e-3 } end, "zero1:step: unknown option 'lrr' %(known: lr, max_norm, norm%)",
  "zero1:step with a misspelt option")
refused(function() z:step { norm = -1 } end, "zero1:step: norm must be a number >= 0 %(got %-1%)", "zero1:step{norm = -1}")
refused(function() z:step { lr = -1 } end, "zero1:step: lr must be >= 0 %(got %-1%)", "zero1:step{lr = -1}: refused as AdamW refuses it")
refused(function() z:step { lr = 0 / 0 } end, "zero1:step: lr must be a finite number", "zero1:step{lr = nan}: refused")
-- the policies' options are checked at construction, naming the option (they were accepted, then failed in the
-- first backward's hooks, at the first collective as "attempt to call a nil value", or silently chose one bucket)
for _, pol in ipairs { "ddp", "zero1" } do
  local P = tg.reduce[pol]
  refused(function() P { params = params, comm = "world" } end,
    pol .. ": comm must be a communicator %(tg%.comm%.world%(%), comm:split{%.%.%.}%), got string world",
    pol .. "{comm = \"world\"}: refused at construction")
  refused(function() P { params = params, bucket_bytes = 0 } end, pol .. ": bucket_bytes must be an integer >= 1 %(got number 0%)",
    pol .. "{bucket_bytes = 0}: refused (it made one bucket)")
  refused(function() P { params = params, bucket_numel = 0 } end, pol .. ": bucket_numel must be an integer >= 1 %(got number 0%)",
    pol .. "{bucket_numel = 0}: refused (it made one bucket)")
  refused(function() P { params = params, bucket_bytes = 1.5 } end, pol .. ": bucket_bytes must be an integer >= 1 %(got number 1%.5%)",
    pol .. "{bucket_bytes = 1.5}: refused naming the policy")
  refused(function() P { params = params, bucket_numel = 1, bucket_bytes = 4096 } end,
    pol .. ": bucket_bytes %(4096%) and bucket_numel %(1%) both given: give one of them",
    pol .. "{bucket_numel =, bucket_bytes =}: refused (one was silently preferred)")
  local two = tg.nn.Sequential { tg.nn.Linear(4, 4, { name = "b1" }), tg.nn.Linear(4, 4, { name = "b2" }), name = "bb" }
  tap.is(#P { params = two:parameters(), bucket_bytes = 3 }.buckets, 4,
    pol .. "{bucket_bytes = 3}: rounded up to one element, so one bucket per parameter (it made one bucket)")
end
refused(function() tg.reduce.tracker { params = params, on_ready = function() end, bucket_bytes = -4 } end,
  "reduce%.tracker: bucket_bytes must be an integer >= 1 %(got number %-4%)", "reduce.tracker{bucket_bytes = -4}")
refused(function() tg.reduce.ddp { params = params, op = "prod" } end,
  "ddp: op must be \"avg\", \"sum\", \"max\" or \"min\" %(got string prod%)", "ddp{op = \"prod\"}: refused at construction")
refused(function() tg.reduce.ddp { params = params, op = 2 } end,
  "ddp: op must be \"avg\", \"sum\", \"max\" or \"min\" %(got number 2%)", "ddp{op = 2}: refused at construction")
refused(function() tg.reduce.ddp { params = params, allow_missing = "yes" } end,
  "ddp: allow_missing must be a boolean %(got string yes%)", "ddp{allow_missing = \"yes\"}: refused")
refused(function() tg.comm.grad_buffer(params, { bucket_numel = 8, bucket_bytes = 32 }) end,
  "grad_buffer: bucket_bytes %(32%) and bucket_numel %(8%) both given", "grad_buffer with both bucket sizes: refused")
-- tg.comm calls name themselves (timeout said "bad argument #1 to '?'" through pcall; async = "yes" named no call)
refused(function() tg.comm.timeout(0) end, "comm%.timeout: seconds must be a number > 0 %(got number 0%)",
  "comm.timeout(0) names comm.timeout")
tap.error_like(function() assert(pcall(tg.comm.timeout, 0)) end, "comm%.timeout: seconds must",
  "comm.timeout(0) through pcall names comm.timeout, not '?'")
refused(function() tg.comm.all_reduce(tg.ones({ 2 }), { async = "yes" }) end,
  "all_reduce: option 'async' must be a boolean %(true or false%), got a string", "all_reduce(t, {async = \"yes\"}) names all_reduce")
-- zero1:step before finish(): the reduce-scatters of the step are pending, the shards not reduced
do
  local lin = tg.nn.Linear(4, 4, { name = "zlin" })
  local zz = tg.reduce.zero1 { params = lin:parameters() }
  tg.step_begin { microbatches = 1 }
  lin:forward(tg.randn({ 2, 4 }), 1)
  lin:backward(tg.randn({ 2, 4 }), 1)
  tg.step_end()
  refused(function() zz:step() end, "zero1:step: this step's gradients are not reduced yet %(reduce%-scatters pending%): " ..
    "call finish%(%) first", "zero1:step() before finish() is refused")
  zz:finish()
  zz:step()
  tap.ok(true, "finish() then step() goes on")
end
refused(function() tg.optim.AdamW(params, { [1] = 0.1 }) end, "AdamW: unknown option 1 %(known: ",
  "a list entry among the options is named by its key")

-- helpers that ended in raw errors inside the library
refused(function() tg.zeros_like(42) end, "zeros_like: t must be a tensor, got number", "zeros_like(42)")
refused(function() tg.zeros_like(tg.zeros({ 2 }), "bf16") end, "zeros_like: options must be a table", "zeros_like(t, \"bf16\")")
refused(function() tg.nn.argmax(42) end, "argmax: expects a list of numbers, got number", "nn.argmax(42)")
refused(function() tg.nn.argmax({ 1, "x" }) end, "argmax: entry 2 is a string", "nn.argmax with a string entry")
refused(function() tg.nn.loss_value(42) end, "loss_value: loss must be a loss tensor", "nn.loss_value(42)")
refused(function() tg.data.write("never-written.bin", 42) end, "data.write: tokens must be a list of token ids, got number",
  "data.write(path, 42)")
refused(function() tg.data.write_u16("never-written.bin", 42) end, "data.write_u16: u16 must be a string of token bytes",
  "data.write_u16(path, 42)")
refused(function() gpt:logits(nil) end, "logits: idx must be a %(B, T%) i32 tensor of token ids, got nil", "gpt:logits(nil)")
refused(function() gpt:eval_loss(tg.zeros({ 1, 4 }), nil) end,
  "forward_loss: idx must be a %(B, T%) i32 tensor of token ids, got a f32 tensor", "gpt:eval_loss(f32 ids)")
refused(function() gpt:register_wgrad_hook(42) end, "register_wgrad_hook: fn must be a function, got number",
  "gpt:register_wgrad_hook(42)")

refused(function() tg.reduce.ddp { params = {} } end, "ddp: params is empty %(no parameter to reduce%)", "ddp{params = {}}")
refused(function() tg.reduce.zero1 { params = {} } end, "zero1: params is empty", "zero1{params = {}}")

local train = require "tegraph.train"
refused(function() train.single_stage_plan(1.5, 2) end, "single_stage_plan: chunks must be an integer >= 1, got 1.5",
  "single_stage_plan(1.5, ...)")
refused(function() train.single_stage_plan(1, -1) end, "single_stage_plan: microbatches must be an integer >= 1, got %-1",
  "single_stage_plan(C, -1)")
refused(function() train.single_stage_plan(1, 1 << 31) end, "single_stage_plan: 1 stages x 2 chunks x 2147483648 " ..
  "microbatches is too large", "single_stage_plan with 2^31 microbatches (it would run for minutes)")
tap.is(#train.single_stage_plan(2, 3, true)[1], 2 * 3 * 3, "single_stage_plan(2, 3, delayed): F, B and W of each")

tap.done_testing()
