-- generate.lua — text generation with a KV cache: the prompt runs once, then one position per new token,
-- streamed to the terminal as it comes; past the context the window slides.
--
--   tegraph run examples/generate.lua --ckpt run/ --prompt "Once upon a time" --max-tokens 200 --temperature 0.8 --top-k 40
--   tegraph run examples/generate.lua --layers 12 --width 768 --heads 12 --context 1024 --vocab 50257 --bench --batch 16
--       (random weights of GPT-2-124M's shape: tokens/s of the decode path)
local tg = require "tegraph"
local nn = require "tegraph.nn"
local cli = require "tegraph.cli"
local text = require "tegraph.text"

local defaults = {
  { "ckpt", nil, "checkpoint directory to load the model from (tegraph.checkpoint)", "string" },
  { "tokenizer", nil, "GPT-2 tokenizer directory (default: the checkpoint's, else bytes)", "string" },
  { "prompt", "\n", "the prompt text" },
  { "max-tokens", 100, "tokens to generate", min = 1 },
  { "temperature", 0.8, "sampling temperature (0: greedy)", min = 0 },
  { "top-k", 0, "sample among the k most likely tokens (0: all)", min = 0 },
  { "top-p", 1.0, "sample among the most likely tokens holding this probability, in (0, 1] (1: all)",
    min = 0, max = 1 },
  { "seed", 1234, "sampling seed (and the random weights without --ckpt)" },
  { "batch", 1, "sequences generated at once (the first one streams)", min = 1 },
  { "keep", nil, "tokens kept when the window slides past the context (default half of it)", "number", min = 1 },
  { "no-cache", false, "recompute the whole window for every token (the reference for the cached path)" },
  { "bench", false, "print tokens/s instead of streaming the text" },
  -- a model of random weights when there is no checkpoint (for benchmarks)
  { "vocab", 256, "without --ckpt: vocabulary size", min = 1 },
  { "layers", 2, "without --ckpt: layers", min = 1 },
  { "width", 64, "without --ckpt: width", min = 1 },
  { "heads", 4, "without --ckpt: attention heads", min = 1 },
  { "context", 64, "without --ckpt: context length", min = 1 },
  { "dtype", "f32", "without --ckpt: f32 or bf16" },
}
local opt = cli.parse("examples/generate.lua", defaults, arg)
-- what the bounds above cannot say: a usage error (the message and the usage, exit 2)
local function usage_error(msg)
  io.stderr:write("generate.lua: ", msg, "\n")
  cli.usage("examples/generate.lua", defaults, io.stderr)
  os.exit(2)
end
if opt["top-p"] <= 0 then usage_error(string.format("--top-p must be in (0, 1] (got %s)", tostring(opt["top-p"]))) end
if opt.dtype ~= "f32" and opt.dtype ~= "bf16" then
  usage_error(string.format("--dtype must be f32 or bf16 (got '%s')", tostring(opt.dtype)))
end
if opt.keep and math.type(opt.keep) ~= "integer" then
  usage_error(string.format("--keep needs an integer (got %s)", tostring(opt.keep)))
end
if opt.ckpt then -- the random model's shape options mean nothing with a checkpoint: refused, not ignored
  local SHAPE = { vocab = true, layers = true, width = true, heads = true, context = true, dtype = true }
  for _, a in ipairs(arg) do
    local k = type(a) == "string" and a:match("^%-%-([%w-]+)") or nil
    if k and SHAPE[k] then usage_error(string.format("--%s shapes the random model; with --ckpt the checkpoint's is used", k)) end
  end
end

-- The model: from a checkpoint directory, or random weights of the given shape.
local function load_model()
  if not opt.ckpt then
    tg.manual_seed(opt.seed)
    return nn.GPT { vocab_size = opt.vocab, max_position_embeddings = opt.context, hidden_size = opt.width,
      num_attention_heads = opt.heads, num_layers = opt.layers, dtype = opt.dtype,
      make_vocab_size_divisible_by = opt.vocab >= 1024 and 64 or 1 }, nil
  end
  local ckpt = require "tegraph.checkpoint"
  local ok, model, meta = pcall(ckpt.load_model, opt.ckpt)
  -- the message names the checkpoint's file; the position (this line) adds nothing
  if not ok then error("generate.lua: --ckpt " .. opt.ckpt .. ": " .. tostring(model):gsub("^[^\n]-:%d+: ", ""), 0) end
  return model, meta
end

-- Generates from model (an nn.GPT) with tokenizer tok; streams the first sequence when not benchmarking.
local function run(model, tok)
  local prompt = tok:encode(opt.prompt)
  if #prompt == 0 then usage_error("--prompt is empty after tokenizing") end
  local prompts = {}
  for b = 1, opt.batch do prompts[b] = prompt end
  local stream = not opt.bench
  if stream then io.write(opt.prompt) io.flush() end
  local t0 = tg.time()
  local outs = model:generate(prompts, opt["max-tokens"], {
    temperature = opt.temperature, top_k = opt["top-k"], top_p = opt["top-p"], seed = opt.seed, keep = opt.keep,
    cache = not opt["no-cache"],
    on_token = stream and function(_, toks)
      io.write(tok:decode({ toks[1] }))
      io.flush()
    end or nil,
  })
  local dt = tg.time() - t0
  if stream then io.write("\n") end
  local n = opt.batch * #outs[1]
  io.stderr:write(string.format("generated %d tokens (%d x %d) in %.2fs: %.1f tokens/s%s\n", n, opt.batch, #outs[1], dt,
    n / dt, opt["no-cache"] and " (no cache)" or ""))
  return outs
end

local model, meta = load_model()
if opt.keep and opt.keep >= model.cfg.max_position_embeddings then
  usage_error(string.format("--keep %d must be below the context %d (the tokens kept when the window slides)", opt.keep,
    model.cfg.max_position_embeddings))
end
local tok_dir = opt.tokenizer or (meta and meta.tokenizer)
if not tok_dir and opt.ckpt then
  local f = io.open(opt.ckpt .. "/vocab.json") or io.open(opt.ckpt .. "/encoder.json")
  if f then f:close(); tok_dir = opt.ckpt end
end
-- a checkpoint of a --data run records no tokenizer: bytes only fit a vocabulary of 256 (else the first id
-- past 255 would fail mid-stream)
if not tok_dir and opt.ckpt and model.cfg.vocab_size ~= 256 then
  usage_error(string.format("--ckpt %s records no tokenizer and its vocabulary is %d: give --tokenizer DIR", opt.ckpt,
    model.cfg.vocab_size))
end
local tok = text.tokenizer(tok_dir)
if tok.vocab_size > model.cfg.vocab_size then
  error(string.format("generate.lua: the tokenizer has %d ids, the model %d", tok.vocab_size, model.cfg.vocab_size), 0)
end
run(model, tok)
