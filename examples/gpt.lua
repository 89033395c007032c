-- gpt.lua — the main job: trains a GPT with tegraph's modules, on a built-in task or an llm.c .bin token file.
--
--   tegraph run examples/gpt.lua                      # learn to reverse digit strings, then show samples
--   tegraph run examples/gpt.lua --data train.bin --vocab 50257 --context 256 --width 256 --layers 4
--   tegraph run examples/gpt.lua --text input.txt --val-split 0.1  # train on a text file (bytes), then sample
--   tegraph run examples/gpt.lua --text input.txt --tokenizer gpt2/ # GPT-2 BPE (vocab.json + merges.txt)
--   tegraph run examples/gpt.lua --make-data task.bin # write the built-in task as a .bin file
--   tegraph run examples/gpt.lua --graph              # layers as graphed callables, delayed wgrad, hook-driven ddp
--   tegraph run examples/gpt.lua --graph full         # the whole step captured once, replayed every step
--   tegraph run -n 4 examples/gpt.lua --pipeline 2 --schedule zb_h1 --graph   # 2 stages x 2 replicas
--   tegraph run examples/gpt.lua --text input.txt --out ckpt --save-every 100  # then --resume ckpt
--   tegraph run examples/gpt.lua --help
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local data = require "tegraph.data"
local progress = require "tegraph.progress"
local cli = require "tegraph.cli"
local checkpoint = require "tegraph.checkpoint"
local text = require "tegraph.text"
local train = require "tegraph.train"

------------------------------------------------------------------------ options
local defaults = {
  { "task", "reverse", "built-in task: reverse (reverse a digit string) or sort (sort its digits)" },
  { "digits", 6, "digits per task example (at most 64: the context is 2*digits+1, at most 129)", min = 1, max = 64 },
  { "data", nil, "train on an llm.c .bin token file (or nanoGPT's headerless one, with --vocab) instead of the task" },
  { "text", nil, "train on a text file: tokenized (cached next to it as FILE.<hash>.bin), then trained on", "string" },
  { "tokenizer", nil, "--text: a GPT-2 tokenizer directory (vocab.json + merges.txt or encoder.json + vocab.bpe); default bytes", "string" },
  { "val", nil, "validation file (text with --text, else a .bin token file)", "string" },
  { "val-split", nil, "hold out this fraction of the --text/--data tokens (their end) for validation", "number", min = 0, max = 1 },
  { "eval-every", 50, "validation loss every N steps (and at the last)", min = 1 },
  { "eval-batches", 4, "validation batches (fixed windows) per evaluation", min = 1 },
  { "sample-tokens", 200, "--text/--data: tokens per sample printed after training", min = 0 },
  { "temperature", 0.8, "--text/--data samples: sampling temperature (0: greedy)", min = 0 },
  { "top-k", 40, "--text/--data samples: sample among the k most likely tokens (0: all)", min = 0 },
  { "make-data", nil, "write the task as a .bin token file and exit" },
  { "tokens", 20000, "tokens for --make-data", min = 1 },
  { "vocab", nil, "vocabulary size (task: 12; --text: the tokenizer's; --data: the file's largest id + 1, at least 256)", "number", min = 1 },
  { "vocab-pad", nil, "round the token table and logits up to a multiple of N, as nanoGPT's 50304 (default 64 when --vocab >= 1024, else 1)", "number", min = 1 },
  { "layers", 2, "transformer layers", min = 1 },
  { "heads", 4, "attention heads", min = 1 },
  { "width", 64, "model width", min = 1 },
  { "context", nil, "context length T (task: 2*digits+1; --data: 64)", "number", min = 1 },
  { "batch", 32, "microbatch size B (sequences)", min = 1 },
  { "microbatches", 2, "microbatches per step M", min = 1 },
  { "steps", 150, "optimizer steps", min = 1 },
  { "lr", 3e-3, "peak learning rate", min = 0 },
  { "min-lr", 3e-4, "final learning rate (cosine decay; where --lr is below the default, --lr / 10)", min = 0 },
  { "warmup", 10, "warmup steps", min = 0 },
  { "weight-decay", nil, "AdamW weight decay, matrices only (--data: 0.1 as GPT-2's recipe; task: 0.01)", "number", min = 0 },
  { "beta1", 0.9, "AdamW beta1" },
  { "beta2", nil, "AdamW beta2 (--data: 0.95 as GPT-2's recipe; task: 0.99)", "number" },
  { "eps", 1e-8, "AdamW epsilon" },
  { "scaled-init", nil, "residual projections drawn with std 0.02/sqrt(2*layers) (GPT-2's recipe; default on with --data)", "number" },
  { "on-nan", "stop", "a non-finite loss or gradient norm: stop (error naming the step, nothing saved) or skip (no update)" },
  { "out", nil, "save checkpoints into this directory (at the end, every --save-every steps, and on SIGINT/SIGTERM)" },
  { "save-every", 0, "save a checkpoint every N steps (0: only at the end)", min = 0 },
  { "keep", 0, "keep the newest K checkpoints in --out, the one just written among them; a resume from an earlier step removes the later ones (0: keep all)", min = 0 },
  { "resume", nil, "resume from a checkpoint (a --out directory: its latest; or one step_N directory)" },
  { "init-from", nil, "start from GPT-2 weights: a Hugging Face model.safetensors or an llm.c gpt2_*.bin" },
  { "export-hf", nil, "after training, write the weights as a Hugging Face GPT-2 model.safetensors" },
  { "clip", 1.0, "global gradient-norm clip (0: off)", min = 0 },
  { "max-skips", 10, "--on-nan skip: stop after N steps in a row skipped for a non-finite loss or gradient norm (0: never)", min = 0 },
  { "dtype", "f32", "compute dtype: f32 or bf16" },
  { "fp8", nil, "the transformer layers' GEMMs in FP8 (HYBRID): delayed or current scaling (TE's recipes); the LM head stays in --dtype", "string" },
  { "delay-wgrad", false, "delay weight gradients to backward_dw (TE delay_wgrad_compute)" },
  { "fuse-wgrad", nil, "accumulate weight gradients into f32 main_grad (default: on with --dtype bf16, off in f32; --fuse-wgrad=0: bf16 gradients)", "boolean" },
  { "fused-lm-head", 1, "LM head loss in chunks of rows with its backward at once, no (N, V) logits (1) or the whole logits (0)", min = 0, max = 1 },
  { "lm-head-chunk", nil, "rows per chunk of the fused LM head loss (default: chunks of at most 256 MiB of logits)", "number", min = 1 },
  { "seed", 1234, "seed of initialisation and batches" },
  { "samples", 6, "samples to print after training (task: greedy; --text/--data: at most 3, sampled)", min = 0 },
  { "eval", 256, "held-out examples for the exact-match accuracy (task only)", min = 0 },
  { "log", nil, "write metrics as JSON lines to this file" },
  { "every", 25, "print every N steps when not on a terminal", min = 1 },
  { "quiet", false, "no progress lines" },
  { "trace", nil, "write a device-timeline trace (Chrome JSON, for Perfetto) of --trace-steps to this file; with several ranks each writes FILE.rank<r>" },
  { "trace-steps", nil, "steps to trace, a:b (default 3:5, within --steps)" },
  { "graph", false, "run each chunk of layers as a graphed callable (F/B/W graphs per microbatch, delayed wgrad, captured in the schedule's order), the reduce driven by the wgrad hooks, capturable AdamW; --graph full: capture the whole step (forward, backward, reduce, clip, AdamW) once after an eager first step and replay it (one rank or data parallel)", values = { "full" } },
  { "layers-per-chunk", nil, "layers per graphed callable with --graph (default 1; with --pipeline: the layers of a schedule chunk)", "number", min = 1 },
  { "pipeline", 1, "pipeline stages P, one per rank (tegraph run -n N, N = P x D: D data-parallel replicas)", min = 1 },
  { "schedule", "1f1b", "pipeline schedule: " .. train.schedule_names },
  { "zero1", false, "ZeRO-1 reduce (reduce-scatter, AdamW on the shard, all-gather) instead of ddp" },
  { "bucket-mb", 25.0, "gradient bucket size of the reduce (ddp or zero1) in MiB: a bucket is reduced as soon as its last wgrad is in", min = 0.001, max = 1048576 },
  { "graph-modules", nil, "partial capture: graph these modules of every layer and run the rest eagerly (attn,mlp or one of them; Megatron's --cuda-graph-modules)" },
  { "hooks", "reduce", "wgrad hooks: reduce (ddp or zero1) or noop (hooks that do nothing: the step without the reduce, to measure what hooks and schedule cost)" },
}

local opt = cli.parse("examples/gpt.lua", defaults, arg)

-- a usage error found after the parse (a value out of its range, options that exclude each other): the
-- message and the usage on stderr, exit 2 — found before any work, not after training
local function usage_error(msg)
  io.stderr:write("gpt.lua: ", msg, "\n")
  cli.usage("examples/gpt.lua", defaults, io.stderr)
  os.exit(2)
end
-- options that are each good but do not go together with what they meet (a checkpoint to resume): the message
-- alone (the usage would not help), exit 2
local function refuse(msg)
  io.stderr:write("gpt.lua: ", msg, "\n")
  os.exit(2)
end
if opt.hooks ~= "reduce" and opt.hooks ~= "noop" then
  usage_error(string.format("--hooks must be reduce or noop (got '%s')", tostring(opt.hooks)))
end
if not (opt.eps > 0) then usage_error(string.format("--eps must be > 0 (got %s)", tostring(opt.eps))) end
for _, k in ipairs { "beta1", "beta2" } do
  if opt[k] ~= nil and not (opt[k] >= 0 and opt[k] < 1) then
    usage_error(string.format("--%s must be in [0, 1) (got %s)", k, tostring(opt[k])))
  end
end
if opt["val-split"] and not (opt["val-split"] > 0 and opt["val-split"] < 1) then
  usage_error(string.format("--val-split must be in (0, 1) (got %s)", tostring(opt["val-split"])))
end
if opt.text and opt.data then usage_error("--text and --data exclude each other") end
if opt.tokenizer and not opt.text then usage_error("--tokenizer goes with --text") end
if opt.val and opt["val-split"] then usage_error("--val and --val-split exclude each other") end
if (opt.val or opt["val-split"]) and not (opt.text or opt.data) then usage_error("--val/--val-split need --text or --data") end
if opt["export-hf"] and opt.pipeline > 1 then usage_error("--export-hf needs the whole model on each rank (not --pipeline)") end
if (opt.val or opt["val-split"]) and opt.pipeline > 1 then
  usage_error("--val/--val-split are not supported with --pipeline (each rank holds only its stage)")
end
-- --trace-steps a:b (or a), 1 <= a <= b <= --steps when given; the default 3:5 is clipped to short runs
local trace_a, trace_b
if opt.trace or opt["trace-steps"] then
  local spec = opt["trace-steps"] or "3:5"
  local a, b = tostring(spec):match("^(%d+):(%d+)$")
  if not a then a = tostring(spec):match("^(%d+)$"); b = a end
  if not a or tonumber(a) < 1 or tonumber(b) < tonumber(a) then
    usage_error(string.format("--trace-steps must be a:b with 1 <= a <= b (got '%s')", tostring(spec)))
  end
  a, b = tonumber(a), tonumber(b)
  if opt["trace-steps"] and b > opt.steps then
    usage_error(string.format("--trace-steps %s ends after the last step (--steps %d)", tostring(spec), opt.steps))
  end
  if opt["trace-steps"] and not opt.trace then usage_error("--trace-steps goes with --trace FILE") end
  trace_a, trace_b = math.min(a, opt.steps), math.min(b, opt.steps) -- the default 3:5 fits short runs
end

------------------------------------------------------------------------ the built-in task
-- Tokens 0-9 are digits, 10 is '>' (question ends), 11 is '.' (answer ends).
-- An example is "d1 .. dn > a1 .. an ." with a = reverse(d) (or sort(d)).
-- Only the answer is scored (the digits before '>' are random, so no model
-- can predict them), which makes the loss fall towards 0 as it learns.
local GT, DOT = 10, 11
local TASK_VOCAB = 12
local CHARS = "0123456789>."

local function task_answer(q)
  local a = {}
  if opt.task == "sort" then
    for i = 1, #q do a[i] = q[i] end
    table.sort(a)
  else
    for i = 1, #q do a[i] = q[#q + 1 - i] end
  end
  return a
end

local function task_example()
  local q = {}
  for i = 1, opt.digits do q[i] = math.random(0, 9) end
  local s = {}
  for i = 1, #q do s[#s + 1] = q[i] end
  s[#s + 1] = GT
  for _, d in ipairs(task_answer(q)) do s[#s + 1] = d end
  s[#s + 1] = DOT
  return s, q
end

local function show(tokens)
  local out = {}
  for i, t in ipairs(tokens) do out[i] = CHARS:sub(t + 1, t + 1) end
  return table.concat(out)
end

-- x, y (B, T) i32 where T = 2n+1: x = example[1..T], y = example[2..T+1] with
-- the question's targets ignored (-1).
local function task_batch(B)
  local n = opt.digits
  local xs, ys = {}, {}
  for b = 1, B do
    local s = task_example()
    local x, y = {}, {}
    for t = 1, 2 * n + 1 do
      x[t] = s[t]
      y[t] = t >= n and s[t + 1] or -1
    end
    xs[b], ys[b] = x, y
  end
  return tg.tensor(xs, { dtype = "i32" }), tg.tensor(ys, { dtype = "i32" })
end

if opt["on-nan"] ~= "stop" and opt["on-nan"] ~= "skip" then
  io.stderr:write("gpt.lua: --on-nan must be stop or skip\n")
  os.exit(2)
end
for _, k in ipairs { "save-every", "keep" } do
  if math.type(opt[k]) ~= "integer" or opt[k] < 0 then
    io.stderr:write(string.format("gpt.lua: --%s needs an integer >= 0\n", k))
    os.exit(2)
  end
end
if opt.task ~= "reverse" and opt.task ~= "sort" then
  io.stderr:write("gpt.lua: --task must be reverse or sort\n")
  os.exit(2)
end
if opt.dtype ~= "f32" and opt.dtype ~= "bf16" then
  usage_error(string.format("--dtype must be f32 or bf16 (got '%s')", tostring(opt.dtype)))
end
if not train.schedules[opt.schedule] then -- checked with or without --pipeline
  usage_error(string.format("--schedule must be one of %s (got '%s')", train.schedule_names, tostring(opt.schedule)))
end
if opt.pipeline == 1 then -- a schedule given without a pipeline would be silently ignored
  for _, a in ipairs(arg) do
    if a == "--schedule" or a:match("^%-%-schedule=") then usage_error("--schedule needs --pipeline N (N > 1)") end
  end
end
if opt["min-lr"] > opt.lr then
  local given = false
  for _, a in ipairs(arg) do given = given or a == "--min-lr" or a:match("^%-%-min%-lr=") ~= nil end
  if given then
    usage_error(string.format("--min-lr %s is above --lr %s (the cosine decay goes from --lr down to --min-lr)",
      tostring(opt["min-lr"]), tostring(opt.lr)))
  end
  opt["min-lr"] = opt.lr / 10 -- the default is above this --lr: decay to a tenth of it
end
-- Several ranks (`tegraph run -n N`, mpirun): P pipeline stages x D data-parallel replicas.
-- Every rank starts from the same weights (same seed) and draws the same stream of batches;
-- a step is M x D microbatches, replica d trains on numbers d*M+1 .. (d+1)*M of them, so the
-- run's losses are those of one process with --microbatches M x D.
local world = tg.comm.size() > 1 and tg.comm.world() or nil
local rank = world and world:rank() or 0
if (world and world:size() or 1) % opt.pipeline ~= 0 then
  usage_error(string.format("--pipeline %d does not divide the %d ranks (tegraph run -n N, N = P x D)", opt.pipeline,
    world and world:size() or 1))
end
math.randomseed(opt.seed)
if rank ~= 0 then -- rank 0 reports for all
  print = function() end
  opt.quiet = true
end
tg.manual_seed(opt.seed)

if opt["make-data"] then
  local toks = {}
  while #toks < opt.tokens do
    for _, t in ipairs((task_example())) do toks[#toks + 1] = t end
  end
  local n = data.write(opt["make-data"], toks)
  print(string.format("wrote %d tokens of the %s task to %s (vocab %d)", n, opt.task, opt["make-data"], TASK_VOCAB))
  return
end

------------------------------------------------------------------------ the data
local loader, val_loader, vocab, T, tok, tok_id
if opt.text then
  tok, tok_id = text.tokenizer(opt.tokenizer)
  local function tokenize(path)
    local bin, n, cached = data.tokenize(path, tok, { tokenizer_id = tok_id,
      progress = rank == 0 and text.progress("tokenizing " .. path) or nil })
    print(string.format("%s: %d %s tokens %s %s", path, n, tok.kind, cached and "cached in" or "written to", bin))
    return bin
  end
  if opt.vocab and opt.vocab ~= tok.vocab_size then -- smaller: ids would not fit; larger: samples it cannot decode
    usage_error(string.format("--vocab %d is not the %s tokenizer's %d ids (leave --vocab out with --text; " ..
      "--vocab-pad pads the table)", opt.vocab, tok.kind, tok.vocab_size))
  end
  opt.data = tokenize(opt.text)
  if opt.val then opt.val = tokenize(opt.val) end
end
if opt.data then
  loader = data.open(opt.data, { vocab = opt.vocab or (tok and tok.vocab_size) })
  vocab = loader.vocab
  if opt["val-split"] then
    loader, val_loader = loader:split(opt["val-split"])
  elseif opt.val then
    -- the same format as the training file: a bad header is reported as such, not read as tokens
    local headerless = nil -- nil: either format, false: the header is required
    if not loader.headerless then headerless = false end
    val_loader = data.open(opt.val, { vocab = vocab, headerless = headerless })
  end
  T = opt.context or 64
else
  vocab = opt.vocab or TASK_VOCAB
  T = opt.context or 2 * opt.digits + 1
  if T ~= 2 * opt.digits + 1 then
    io.stderr:write(string.format("gpt.lua: the task needs --context %d for %d digits\n", 2 * opt.digits + 1, opt.digits))
    os.exit(2)
  end
end
local B, M = opt.batch, opt.microbatches

local function next_batch()
  if loader then return loader:batch(B, T) end
  return task_batch(B)
end

------------------------------------------------------------------------ the model
local vocab_pad = opt["vocab-pad"] or (vocab >= 1024 and 64 or 1)
if vocab_pad < 1 or math.type(vocab_pad) ~= "integer" then
  io.stderr:write("gpt.lua: --vocab-pad needs a positive integer\n")
  os.exit(2)
end
local pipelined = opt.pipeline > 1
-- per-layer graphs and pipelines split W from B; a fully captured step (--graph full) has no need to
local delay = opt["delay-wgrad"] or ((opt.graph == true or pipelined) and "layers") or false
local fp8 = nil
if opt.fp8 == "delayed" then fp8 = tg.fp8.DelayedScaling {}
elseif opt.fp8 == "current" then fp8 = tg.fp8.CurrentScaling {}
elseif opt.fp8 ~= nil then
  io.stderr:write("gpt.lua: --fp8 must be delayed or current (got " .. opt.fp8 .. ")\n")
  os.exit(2)
end
local model = nn.GPT {
  fp8 = fp8,
  vocab_size = vocab,
  make_vocab_size_divisible_by = vocab_pad,
  max_position_embeddings = T,
  hidden_size = opt.width,
  num_attention_heads = opt.heads,
  num_layers = opt.layers,
  dtype = opt.dtype,
  delay_wgrad = delay,
  fuse_wgrad_accumulation = opt["fuse-wgrad"],
  fused_lm_head = opt["fused-lm-head"] == 1,
  lm_head_chunk_rows = opt["lm-head-chunk"],
  -- GPT-2's recipe (nanoGPT, llm.c): the residual projections start smaller, by 1/sqrt(2 * layers)
  residual_init_std = (opt["scaled-init"] == nil and loader or (opt["scaled-init"] or 0) ~= 0)
      and 0.02 / math.sqrt(2 * opt.layers) or nil,
}
if opt["init-from"] then
  local gpt2 = require "tegraph.gpt2"
  if opt["init-from"]:match("%.safetensors$") then gpt2.load_hf(model, opt["init-from"])
  else gpt2.load_llmc(model, opt["init-from"]) end
end
-- the step in the mode the flags ask for (tegraph.train): eager, graphed, pipelined; ddp or zero1
-- driven by the wgrad hooks
-- train.new's refusals are of the options it is given (--graph with --pipeline, --layers-per-chunk that does
-- not divide --layers, ...): usage errors
local ok_trainer, trainer = pcall(train.new, {
  model = model, microbatches = M, comm = world, graph = opt.graph, pipeline = opt.pipeline,
  schedule = opt.schedule, layers_per_chunk = opt["layers-per-chunk"], reduce = opt.zero1 and "zero1" or nil,
  hooks = opt.hooks, bucket_bytes = math.max(4, math.floor(opt["bucket-mb"] * 1048576)),
  graph_modules = opt["graph-modules"] and train.split_names(opt["graph-modules"]) or nil,
  sample = (opt.graph == true or opt["graph-modules"]) and tg.zeros({ B, T }, { dtype = "i32" }) or nil,
  adamw = { lr = opt.lr, beta1 = opt.beta1, beta2 = opt.beta2 or (loader and 0.95 or 0.99), eps = opt.eps,
    weight_decay = opt["weight-decay"] or (loader and 0.1 or 0.01), max_norm = opt.clip > 0 and opt.clip or nil },
})
if not ok_trainer then
  local msg = tostring(trainer):gsub("^[^\n]-%.lua:%d+: ", "")
  if msg:match("^train: ") or msg:match("^AdamW: ") then usage_error(msg) end
  error(trainer, 0)
end
local D = trainer.D
local schedule = optim.cosine_schedule { lr = opt.lr, min_lr = opt["min-lr"], warmup = opt.warmup, total = opt.steps }

local table_vocab = (vocab + vocab_pad - 1) // vocab_pad * vocab_pad
print(string.format("gpt: %s | vocab %d%s, context %d, width %d, heads %d, layers %d, %d parameters",
  opt.data or ("task '" .. opt.task .. "' (" .. opt.digits .. " digits)"), vocab,
  table_vocab ~= vocab and string.format(" (table %d)", table_vocab) or "", T, opt.width, opt.heads, opt.layers,
  model:num_parameters()))
print(string.format("     device %s, dtype %s, %d steps x %d microbatches x %d sequences%s%s%s", tg.default_device(), opt.dtype,
  opt.steps, M * D, B, delay and ", delayed wgrad" .. (delay == "layers" and " (layers)" or "") or "",
  model.layers[1]:parameters()[1].fused and ", f32 main_grad" or "", world and string.format(", %d ranks", world:size()) or ""))
local mode = trainer:describe()
if mode ~= "" then print("     " .. mode) end

------------------------------------------------------------------------ training
local tokens_per_step = M * D * B * T
local first_loss, last_loss
local losses = {}
-- --trace: steps trace_a..trace_b run inside a trace; the overlap of the ddp
-- all-reduces with the backward is printed when it stops.
local trace_path = opt.trace
if trace_path and world and world:size() > 1 then trace_path = trace_path .. ".rank" .. world:rank() end
if trace_path then -- fail now, not after training, when the trace cannot be written
  local f, err = io.open(trace_path, "w")
  if not f then error("gpt.lua: --trace: cannot write " .. tostring(err), 0) end
  f:close()
end
local steady_t0 -- time at the end of step 2
-- the validation windows: the same fixed set at every evaluation
local val_batches = val_loader and val_loader:eval_batches(B, T, opt["eval-batches"]) or nil
-- --out and --export-hf: fail now, not after training, when they cannot be written (rank 0 writes them)
if opt.out and rank == 0 then
  local okd, err = pcall(tg.fs.mkdir, opt.out)
  if not okd then error("gpt.lua: --out: " .. tostring(err):gsub("^[^\n]-%.lua:%d+: ", ""), 0) end
  local probe = opt.out .. "/.tegraph-write-check"
  local f, ferr = io.open(probe, "w")
  if not f then error("gpt.lua: --out: " .. opt.out .. ": cannot write there: " .. tostring(ferr), 0) end
  f:close()
  os.remove(probe)
end
if opt["export-hf"] and rank == 0 then
  local existed = io.open(opt["export-hf"], "rb")
  if existed then existed:close() end
  local f, err = io.open(opt["export-hf"], "a") -- (not "w": an existing file stays as it is until the export)
  if not f then error("gpt.lua: --export-hf: cannot write " .. tostring(err), 0) end
  f:close()
  if not existed then os.remove(opt["export-hf"]) end
end

-- Checkpoints (tegraph.checkpoint): this rank's weights (its stage's with --pipeline), the trainer's
-- optimizer state (per rank: zero1 shards, capturable AdamW's device values), the RNG state, the
-- loader position, the options and the model's shape. Batches are drawn from math.random seeded by
-- (seed, step) at each step (every rank draws the same ones), so a resumed run draws what the
-- uninterrupted one would have.
local config = {}
for _, d in ipairs(defaults) do config[d[1]] = opt[d[1]] end
config.resume, config.out = nil, nil
for k, v in pairs(checkpoint.model_config(model.cfg)) do config[k] = v end
if opt.text then -- the tokenizer, for generate.lua --ckpt
  local dir = opt.tokenizer
  if dir and dir:sub(1, 1) ~= "/" and os.getenv("PWD") then dir = os.getenv("PWD") .. "/" .. dir end
  config["model.tokenizer"] = dir or "bytes"
end
local function save(step)
  return trainer:save(opt.out, { step = step, config = config, keep = opt.keep,
    state = { loader_pos = loader and loader.pos or 0 } })
end
local start = 1
if opt.resume then
  -- The options that decide the run's trajectory (the model, the data, the optimizer, the schedule, the
  -- batches, the seed, how the step runs) must be the checkpoint's: a resume continues that run bit for bit,
  -- or is refused. Those that only say where output goes or how often are free.
  local FREE = { out = true, resume = true, log = true, ["save-every"] = true, keep = true, ["eval-every"] = true,
    ["eval-batches"] = true, val = true, ["sample-tokens"] = true, temperature = true, ["top-k"] = true,
    samples = true, eval = true, every = true, quiet = true, trace = true, ["trace-steps"] = true,
    ["make-data"] = true, tokens = true, ["export-hf"] = true, ["on-nan"] = true, ["max-skips"] = true,
    fp8 = true } -- (--fp8: the scaling state is restored when both runs have it, fresh otherwise)
  local saved, ck_step = checkpoint.read_config(opt.resume)
  local function norm(v)
    if v == nil then return nil end
    local n = tonumber(v)
    if type(v) ~= "boolean" and n then return string.format("%.14g", n) end
    return tostring(v)
  end
  local diffs = {}
  for _, d in ipairs(defaults) do
    local k = d[1]
    -- (with --text, --data is its tokens' cache: named only when --text is the same file and its text changed)
    local derived = k == "data" and opt.text and norm(config.text) ~= norm(saved.text)
    if not FREE[k] and not derived and k ~= "steps" and norm(config[k]) ~= norm(saved[k]) then
      diffs[#diffs + 1] = string.format("--%s %s differs from the checkpoint's %s", k,
        config[k] == nil and "(not given)" or tostring(config[k]), saved[k] == nil and "(not given)" or saved[k])
    end
  end
  if #diffs > 0 then
    refuse(table.concat(diffs, "; ") .. "; resume with the same options")
  end
  -- --steps last: the cosine schedule runs to it, so it is the checkpoint's too, and beyond its step
  if opt.steps <= ck_step then
    refuse(string.format("--steps %d is not beyond the checkpoint's step %d: nothing to train", opt.steps, ck_step))
  end
  if norm(config.steps) ~= norm(saved.steps) then
    refuse(string.format("--steps %d differs from the checkpoint's %s (the learning-rate schedule runs to --steps); " ..
      "resume with the same options", opt.steps, tostring(saved.steps)))
  end
  local info = trainer:load(opt.resume)
  start = info.step + 1
  if loader then
    local pos = info.state.loader_pos
    loader.pos = type(pos) == "string" and pos:match("^%d+$") and math.tointeger(tonumber(pos)) or nil
    if not loader.pos then
      error(string.format("gpt.lua: %s: bad checkpoint state: loader_pos is %s (an integer >= 0 is expected)", info.path,
        pos == nil and "missing" or "'" .. tostring(pos) .. "'"), 0)
    end
  end
  -- every rank loaded its own file: only then is the run resumed (a rank that failed fails the barrier)
  if world then world:barrier { name = "resumed" } end
  print(string.format("resumed from %s (step %d)", info.path, info.step))
end
-- a resumed run continues its --log: the records up to the checkpoint's step stay
local bar = progress.new { total = opt.steps, tokens_per_step = tokens_per_step, log = rank == 0 and opt.log or nil, every = opt.every,
  max_skips = opt["max-skips"] > 0 and opt["max-skips"] or nil, resume_step = opt.resume and start - 1 or nil,
  tty = not opt.quiet and tg.isatty(io.stdout), out = opt.quiet and io.open("/dev/null", "w") or io.stdout }
if opt.out then tg.signals.catch() end
local stop_signal

local host_s, step_s, timed = 0, 0, 0
local dev = tg.default_device()
local issued = { kernels = 0, gemms = 0, graph_replays = 0, peak = 0 } -- of the timed steps (tg.device_stats)
for step = start, opt.steps do
  math.randomseed(opt.seed, step)
  local lr = schedule(step)
  -- this replica's microbatches of the step's M x D (every rank draws them all, in order)
  local xs, ys = {}, {}
  for g = 1, M * D do
    local x, y = next_batch()
    local m = g - trainer.dp_rank * M
    if m >= 1 and m <= M then xs[m], ys[m] = x, y end
  end
  if step == trace_a then tg.trace.start() end
  tg.reset_peak_memory(dev)
  local s0 = tg.device_stats(dev)
  local t0 = tg.time()
  local r = trainer:step(xs, ys, lr, { skip_nonfinite = opt["on-nan"] == "skip" })
  local vals = r.losses or trainer:losses(r) -- reads the losses: waits for the step
  local t1 = tg.time()
  if step > 2 or opt.steps <= 2 then
    host_s, step_s, timed = host_s + r.host_s, step_s + (t1 - t0), timed + 1
    local s1 = tg.device_stats(dev)
    for _, k in ipairs { "kernels", "gemms", "graph_replays" } do issued[k] = issued[k] + s1[k] - s0[k] end
    issued.peak = math.max(issued.peak, s1.peak_memory)
  end
  local loss_sum = 0.0
  for g = 1, #vals do loss_sum = loss_sum + vals[g] end
  local loss = loss_sum / #vals -- the step's loss: the mean over its microbatches
  local norm = trainer:grad_norm()
  if r.skipped then
    print(string.format("step %d: non-finite loss or gradient norm (loss %s, gradient norm %s); update skipped " ..
      "(--on-nan skip)", step, tostring(loss), tostring(r.norm)))
  end
  local function finite(x) return x == x and x ~= math.huge and x ~= -math.huge end
  if opt["on-nan"] == "stop" and not (finite(loss) and (norm == nil or finite(norm))) then
    local last = opt.out and checkpoint.latest(opt.out)
    error(string.format("gpt.lua: step %d: non-finite %s (loss %s, gradient norm %s); stopped (--on-nan stop)%s", step,
      finite(loss) and "gradient norm" or "loss", tostring(loss), norm and tostring(norm) or "not computed",
      last and ("; the last good checkpoint is " .. last) or ", nothing saved"), 0)
  end
  if step == trace_b then
    local ov = train.overlap(tg.trace.events())
    local sum = tg.trace.stop(trace_path, { quiet = true })
    local who = world and world:size() > 1 and ("rank " .. world:rank() .. ": ") or ""
    local n = trace_b - trace_a + 1
    print(string.format("%s%s (steps %d..%d) -> %s\n%s%s\n%sper step (mean of %d traced): reduce %.3f ms, %.3f ms " ..
      "exposed (not hidden by compute)", who, sum.line, trace_a, trace_b, trace_path, who, ov.line, who, n, ov.reduce_ms / n,
      (ov.reduce_ms - ov.reduce_hidden_ms) / n))
  end
  first_loss = first_loss or loss
  last_loss = loss
  losses[#losses + 1] = loss
  bar:update(step, { loss = loss, lr = lr, norm = norm, skipped = r.skipped or false })
  if val_batches and not pipelined and (step % opt["eval-every"] == 0 or step == opt.steps) then
    local vl = 0
    for _, xy in ipairs(val_batches) do vl = vl + nn.loss_value(model:eval_loss(xy[1], xy[2])) end
    vl = vl / #val_batches
    local line = string.format("step %d: val loss %.4f", step, vl)
    if opt.quiet then print(line) else bar:print(line) end
    bar:record { step = step, val_loss = vl }
  end
  if step == 2 then steady_t0 = tg.time() end -- after start-up (allocation, first GEMM plans, NCCL connections)
  if opt.out then
    local sig = tg.signals.pending()
    if world then -- every rank stops at the same step
      local f = tg.tensor({ sig and 1 or 0 }, { dtype = "f32" })
      world:all_reduce(f, { op = "max" })
      if f:totable()[1] > 0 then sig = sig or "a signal on another rank" end
    end
    if sig then
      stop_signal = { sig, step, save(step) }
      break
    end
    if opt["save-every"] > 0 and step % opt["save-every"] == 0 and step < opt.steps then save(step) end
  end
end
if stop_signal then
  bar:finish()
  print(string.format("gpt: %s: saved a checkpoint of step %d to %s; resume with --resume %s", stop_signal[1],
    stop_signal[2], stop_signal[3], opt.out))
  return
end
if opt.out and opt.steps >= start then print("saved a checkpoint to " .. save(opt.steps)) end
if opt["export-hf"] then
  require("tegraph.gpt2").export_hf(model, opt["export-hf"])
  print("wrote the weights as a Hugging Face GPT-2 model.safetensors to " .. opt["export-hf"])
end
local elapsed = bar:finish()
tg.stream.current(tg.default_device()):sync()
local steady = steady_t0 and (opt.steps - 2) * tokens_per_step / (tg.time() - steady_t0) or nil

-- the loss of the first and last 10 steps, which one noisy step does not sway
local function mean(a, i, j)
  local s, n = 0, 0
  for k = math.max(1, i), math.min(#a, j) do s, n = s + a[k], n + 1 end
  return n > 0 and s / n or 0 / 0
end
local head10, tail10 = mean(losses, 1, 10), mean(losses, #losses - 9, #losses)
local ran = #losses
if #losses > 0 then print(string.format("trained %d steps in %.1fs (%.0f tokens/s): loss %.4f -> %.4f (mean of first/last 10 steps %.4f -> %.4f, %.1fx lower)",
  ran, elapsed, ran * tokens_per_step / elapsed, first_loss, last_loss, head10, tail10, head10 / tail10)) end
if steady then print(string.format("steady throughput (steps 3..%d): %.0f tokens/s", opt.steps, steady)) end
if timed > 0 then
  print(string.format("host time per step %.3f ms of %.3f ms per step (%.1f%%; hooks: %s)", 1e3 * host_s / timed,
    1e3 * step_s / timed, 100 * host_s / step_s, trainer.hooks or "none"))
  print(string.format("issued per step on %s: %.0f kernel calls, %.0f GEMM calls, %.0f graph replays; peak memory %.1f MiB " ..
    "(allocator high-water mark in a step; LM head loss %s)", dev, issued.kernels / timed, issued.gemms / timed,
    issued.graph_replays / timed, issued.peak / 2 ^ 20, opt["fused-lm-head"] == 1 and "fused" or "unfused"))
end

------------------------------------------------------------------------ what it learned
if loader and opt.samples > 0 and not pipelined then
  -- prompts: a few tokens from the data; with a tokenizer the samples print as text
  local count, plen = math.min(opt.samples, 3), math.min(8, T)
  local prompts = {}
  local src = val_loader or loader
  for i = 1, count do prompts[i] = src:tokens((i - 1) * (src:size() - plen) // count, plen) end
  local outs = model:generate(prompts, opt["sample-tokens"], { temperature = opt.temperature, top_k = opt["top-k"],
    seed = opt.seed })
  print(string.format("samples (temperature %g, top-k %d; prompt | model):", opt.temperature, opt["top-k"]))
  for i = 1, count do
    if tok then
      print(string.format("--- %q | %s", tok:decode(prompts[i]), tok:decode(outs[i])))
    else
      print(string.format("--- %s | %s", table.concat(prompts[i], " "), table.concat(outs[i], " ")))
    end
  end
end
-- (the whole model is on every rank only without a pipeline: each stage trained its own part)
if not loader and not pipelined then
  local n = opt.digits
  local function decode(count)
    local prompts, wants = {}, {}
    for i = 1, count do
      local s = task_example()
      local p = {}
      for t = 1, n + 1 do p[t] = s[t] end -- the digits and '>'
      prompts[i], wants[i] = p, { table.unpack(s, n + 2) }
    end
    return prompts, wants, model:generate(prompts, n + 1)
  end
  local function same(a, b)
    for i = 1, #b do
      if a[i] ~= b[i] then return false end
    end
    return true
  end
  if opt.eval > 0 then
    local prompts, wants, outs = decode(opt.eval)
    local right = 0
    for i = 1, #prompts do
      if same(outs[i], wants[i]) then right = right + 1 end
    end
    print(string.format("exact-match accuracy on %d new examples (greedy): %d/%d = %.1f%%", #prompts, right, #prompts,
      100 * right / #prompts))
  end
  if opt.samples > 0 then
    print("samples (greedy decoding; question > model's answer):")
    local prompts, wants, outs = decode(opt.samples)
    for i = 1, #prompts do
      print(string.format("  %s%s   %s", show(prompts[i]), show(outs[i]),
        same(outs[i], wants[i]) and "ok" or ("expected " .. show(wants[i]))))
    end
  end
end
