-- tegraph.nn: the C modules (tg.nn.Linear, ...) plus Lua helpers: loss values, a GPT builder, a Lua Linear layer.
local raise = require "tegraph.raise"
local core = require "tegraph.core"
local fp8 = require "tegraph.fp8"

local nn = core.nn -- the C constructors live here already; this file adds to them
local ops = core.ops

-- The mean loss (a number) of a loss tensor from lm:loss (its [mean, count]).
function nn.loss_value(loss)
  if not core.is_tensor(loss) then raise("loss_value: loss must be a loss tensor [mean, count], got " .. type(loss)) end
  return loss:totable()[1]
end

-- Index of the largest of the numbers in t (1-based; the first on ties).
function nn.argmax(t)
  if type(t) ~= "table" then raise("argmax: expects a list of numbers, got " .. type(t)) end
  local best, at = -math.huge, 1
  for i = 1, #t do
    if type(t[i]) ~= "number" then raise(string.format("argmax: entry %d is a %s, not a number", i, type(t[i]))) end
    if t[i] > best then best, at = t[i], i end
  end
  return at
end

------------------------------------------------------------------------ GPT
-- A GPT: token + position embedding, `num_layers` pre-norm transformer layers,
-- a final norm and an LM head tied to the embedding, trained with a fused
-- softmax cross-entropy. The keys are Megatron's and TransformerEngine's:
--   cfg = {vocab_size=, max_position_embeddings=, hidden_size=,
--          num_attention_heads=, num_layers=, ffn_hidden_size=4*hidden_size,
--          normalization="LayerNorm", activation="gelu", dtype="f32",
--          delay_wgrad=false, fuse_wgrad_accumulation=(dtype == "bf16"), init_std=0.02,
--          device=, make_vocab_size_divisible_by=1, residual_init_std=init_std, fp8=}
-- fuse_wgrad_accumulation: the weight gradients go to f32 main_grad; on by default in bf16, where the
-- gradients of the microbatches are then summed in f32, as PyTorch's bf16 autocast keeps f32 gradients
-- (false: bf16 gradients, summed in bf16).
-- fp8 = a recipe (tg.fp8.DelayedScaling{...}): the transformer layers' GEMMs run in FP8; the embedding and
-- the LM head stay in dtype.
-- residual_init_std: the std of the layers' residual projections (attn.proj and mlp.fc2 weights);
-- GPT-2's recipe (nanoGPT, llm.c) is init_std / sqrt(2 * num_layers).
-- delay_wgrad = "layers" delays the transformer layers' wgrad only (the embedding and
-- the LM head compute theirs in backward, so the tied table's two contributions keep
-- their order). gpt.layers lists the transformer layers.
-- make_vocab_size_divisible_by = P rounds the token table and the logits up to
-- a multiple of P (as nanoGPT's 50304 for GPT-2's 50257): with an odd
-- vocabulary the logits' rows are not 16-byte aligned and cuBLASLt falls back
-- to slow GEMMs (on an H200 the LM head of GPT-2-124M took half of a training
-- step). The extra ids never occur in the data; the softmax includes them and
-- training drives their logits down; generate() picks among the real vocab only.
local GPT = {}
GPT.__index = GPT

local GPT_KEYS = {
  vocab_size = true, max_position_embeddings = true, hidden_size = true, num_attention_heads = true,
  num_layers = true, ffn_hidden_size = true, normalization = true, activation = true, dtype = true,
  delay_wgrad = true, fuse_wgrad_accumulation = true, init_std = true, device = true,
  make_vocab_size_divisible_by = true, residual_init_std = true, fused_lm_head = true, lm_head_chunk_rows = true,
  fp8 = true,
}
local GPT_RENAMED = {
  vocab = "vocab_size", context = "max_position_embeddings", width = "hidden_size", heads = "num_attention_heads",
  layers = "num_layers", hidden = "ffn_hidden_size", norm = "normalization", vocab_pad = "make_vocab_size_divisible_by",
}

-- Refuses a key of options table o that is not in known (set of names), naming
-- the new name of a renamed one (renamed: old -> new).
local check_keys = require("tegraph.options").check

function nn.GPT(cfg)
  if type(cfg) ~= "table" then raise("nn.GPT: expected a table of options, got " .. type(cfg)) end
  check_keys("nn.GPT", cfg, GPT_KEYS, GPT_RENAMED)
  for _, k in ipairs { "vocab_size", "max_position_embeddings", "hidden_size", "num_attention_heads", "num_layers" } do
    if math.type(cfg[k]) ~= "integer" or cfg[k] < 1 then
      raise("nn.GPT: cfg." .. k .. " (a positive integer) is required, got " .. tostring(cfg[k]))
    end
  end
  if cfg.hidden_size % cfg.num_attention_heads ~= 0 then
    raise(string.format("nn.GPT: hidden_size %d is not a multiple of num_attention_heads %d", cfg.hidden_size,
      cfg.num_attention_heads))
  end
  local pad = cfg.make_vocab_size_divisible_by or 1
  if math.type(pad) ~= "integer" or pad < 1 then
    raise("nn.GPT: cfg.make_vocab_size_divisible_by must be a positive integer, got " ..
      tostring(cfg.make_vocab_size_divisible_by))
  end
  local table_vocab = (cfg.vocab_size + pad - 1) // pad * pad
  if cfg.delay_wgrad ~= nil and type(cfg.delay_wgrad) ~= "boolean" and cfg.delay_wgrad ~= "layers" then
    raise("nn.GPT: cfg.delay_wgrad must be a boolean or \"layers\", got " .. tostring(cfg.delay_wgrad))
  end
  local fuse = cfg.fuse_wgrad_accumulation
  if fuse == nil then fuse = cfg.dtype == "bf16" end
  local common = {
    dtype = cfg.dtype,
    device = cfg.device,
    delay_wgrad = cfg.delay_wgrad == true,
    fuse_wgrad_accumulation = fuse,
    init_std = cfg.init_std,
  }
  local function opts(t)
    for k, v in pairs(common) do
      if t[k] == nil then t[k] = v end
    end
    return t
  end
  local embed = nn.Embedding(table_vocab, cfg.hidden_size,
    opts { max_position_embeddings = cfg.max_position_embeddings, name = "embed" })
  local blocks = { embed, name = "gpt" }
  local layers = {}
  for i = 1, cfg.num_layers do
    blocks[#blocks + 1] = nn.TransformerLayer(cfg.hidden_size, cfg.ffn_hidden_size or 4 * cfg.hidden_size,
      cfg.num_attention_heads, opts {
        normalization = cfg.normalization,
        activation = cfg.activation,
        name = "h." .. (i - 1),
        delay_wgrad = cfg.delay_wgrad ~= nil and cfg.delay_wgrad ~= false,
        fp8 = cfg.fp8, -- the layers' GEMMs in FP8; the embedding and the LM head stay in dtype (as in TE)
      })
    layers[i] = blocks[#blocks]
  end
  if cfg.device then blocks.device = cfg.device end
  local body = nn.Sequential(blocks)
  local head = nn.LMHead(opts {
    hidden_size = cfg.hidden_size, vocab_size = table_vocab, tied = embed, normalization = cfg.normalization,
    name = "lm_head", fused_loss = cfg.fused_lm_head, loss_chunk_rows = cfg.lm_head_chunk_rows,
  })
  local self = setmetatable({ cfg = cfg, embed = embed, layers = layers, body = body, head = head }, GPT)
  local rstd = cfg.residual_init_std
  if rstd ~= nil then
    if type(rstd) ~= "number" or not (rstd >= 0) then
      raise("nn.GPT: cfg.residual_init_std must be a number >= 0, got " .. tostring(rstd))
    end
    for _, p in ipairs(self:parameters()) do -- drawn in f32 and rounded, as the modules' own init
      if p.name:match("^h%.%d+%.attn%.proj%.weight$") or p.name:match("^h%.%d+%.mlp%.fc2%.weight$") then
        local w = core.randn(p.shape, { std = rstd, device = p.data.device })
        if p.master then p.master:copy_(w) end
        p.data:copy_(w)
      end
    end
  end
  return self
end

-- All parameters, each once (the tied token table belongs to the embedding).
function GPT:parameters()
  local seen, out = {}, {}
  for _, m in ipairs { self.body, self.head } do
    for _, p in ipairs(m:parameters()) do
      if not seen[p] then
        seen[p] = true
        out[#out + 1] = p
      end
    end
  end
  return out
end

-- The FP8 scaling states of the FP8 Linears under the model (m:fp8_state()'s entries, the layers' in order):
-- empty when the model runs without FP8.
function GPT:fp8_state()
  local out = {}
  for _, m in ipairs { self.body, self.head } do
    if m.fp8_state then
      for _, s in ipairs(m:fp8_state()) do out[#out + 1] = s end
    end
  end
  return out
end

function GPT:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- The modules' microbatch protocol, mb last and optional (omitted: the engine's
-- next, as for modules): forward_loss(idx, targets, mb), backward(dloss, mb),
-- backward_dw(mb).

-- Forward of microbatch mb: idx, targets (B, T) i32 -> loss tensor [mean, count].
-- dloss: the number backward(dloss, mb) will be given (e.g. 1/M); with the fused LM head
-- (cfg.fused_lm_head, on by default) the head's backward then runs with its forward, chunk by
-- chunk, and the logits of all tokens never exist.
local function check_ids(who, name, t)
  if not core.is_tensor(t) or t:ndim() ~= 2 or t.dtype ~= "i32" then
    raise(string.format("%s: %s must be a (B, T) i32 tensor of token ids, got %s", who, name, core.is_tensor(t) and
      string.format("a %s tensor of %d dimensions", t.dtype, t:ndim()) or type(t)))
  end
end

function GPT:forward_loss(idx, targets, mb, ignore_index, dloss)
  check_ids("forward_loss", "idx", idx)
  check_ids("forward_loss", "targets", targets)
  local h = self.body:forward(idx, mb)
  return self.head:loss(h, targets, mb, ignore_index or -1, dloss)
end

-- The loss tensor [mean, count] of idx, targets (B, T) with nothing kept for a backward (evaluation).
-- fn(self, ...) with the FP8 scaling state kept (fp8.keep_state): evaluations and generation leave the scales
-- the next training step uses as they were. Nested calls (generate -> decode) keep it once.
local function keeping_fp8(self, fn, ...)
  if self._fp8_kept then return fn(self, ...) end
  self._fp8_kept = true
  local res = table.pack(pcall(fp8.keep_state, self, fn, self, ...))
  self._fp8_kept = nil
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

local function eval_loss(self, idx, targets, ignore_index)
  local loss = self:forward_loss(idx, targets, 1, ignore_index)
  self.body:drop_saved()
  self.head:drop_saved()
  return loss
end

function GPT:eval_loss(idx, targets, ignore_index) return keeping_fp8(self, eval_loss, idx, targets, ignore_index) end

-- Backward of microbatch mb with d(total)/d(mean loss) = dloss (1/M averages
-- over M microbatches).
function GPT:backward(dloss, mb)
  local dh = self.head:backward(dloss or 1.0, mb)
  self.body:backward(dh, mb)
end

function GPT:need_backward_dw()
  return self.body:need_backward_dw() or self.head:need_backward_dw()
end

-- Runs the queued wgrad of microbatch mb of every module that has one
-- (delay_wgrad); W follows B order, so mb is the oldest delayed backward's
-- (omitted: whatever that is).
function GPT:backward_dw(mb)
  if self.head:need_backward_dw() then self.head:backward_dw(mb) end
  if self.body:need_backward_dw() then self.body:backward_dw(mb) end
end

-- fn on every parameter, all or none; returns self and the hooks' ids (ids[i] on self:parameters()[i]).
function GPT:register_wgrad_hook(fn)
  if type(fn) ~= "function" then raise("register_wgrad_hook: fn must be a function, got " .. type(fn)) end
  local ps, ids = self:parameters(), {}
  for i, p in ipairs(ps) do
    local ok, r1, r2 = pcall(p.register_hook, p, fn)
    if not ok then
      for j = 1, i - 1 do ps[j]:remove_hook(ids[j]) end
      error(r1, 0)
    end
    ids[i] = r2
  end
  return self, ids
end

-- Logits (B, T, V) for idx (B, T) without a backward to follow: it runs as
-- microbatch `mb` (default 1) and drops what the forward saved.
local function logits(self, idx, mb)
  check_ids("logits", "idx", idx)
  mb = mb or 1
  local h = self.body:forward(idx, mb)
  local logits = self.head:forward(h, mb)
  self.body:drop_saved(mb)
  self.head:drop_saved(mb)
  return logits
end

function GPT:logits(idx, mb) return keeping_fp8(self, logits, idx, mb) end

------------------------------------------------------------------------ decoding with a KV cache
-- The modules of each layer, for the decode path (found once).
local function decode_plan(self)
  if self._plan then return self._plan end
  local kids = self.body:children()
  local wte, wpe = table.unpack(self.embed:parameters())
  local plan = { wte = wte.data, wpe = wpe.data, layers = {} }
  for i = 2, #kids do
    local norm, attn, mlp = table.unpack(kids[i]:children())
    local qkv, _, proj = table.unpack(attn:children())
    plan.layers[#plan.layers + 1] = { norm = norm, qkv = qkv, proj = proj, mlp = mlp }
  end
  self._plan = plan
  return plan
end

-- A key/value cache for batch B: per layer a (B, max_position_embeddings, hidden_size) key and value tensor in
-- the model's dtype on its device; cache.pos counts the positions it holds.
function GPT:kv_cache(B)
  if math.type(B) ~= "integer" or B < 1 then raise("kv_cache: batch must be a positive integer, got " .. tostring(B)) end
  local plan = decode_plan(self)
  local T, C = self.cfg.max_position_embeddings, self.cfg.hidden_size
  local o = { dtype = plan.wte.dtype, device = plan.wte.device }
  local cache = { batch = B, pos = 0, size = T, k = {}, v = {} }
  for i = 1, #plan.layers do
    cache.k[i] = core.empty({ B, T, C }, o)
    cache.v[i] = core.empty({ B, T, C }, o)
  end
  return cache
end

-- Incremental forward: idx (B, Tn) i32 are the tokens at positions cache.pos .. cache.pos+Tn-1; their keys and
-- values join the cache, each attends over the cache up to its position (no recomputation of the prefix).
-- Returns the logits (B, Tn, V) and advances cache.pos. Nothing is saved for a backward.
local function decode(self, cache, idx)
  if type(cache) ~= "table" or math.type(cache.batch) ~= "integer" or math.type(cache.pos) ~= "integer" or
      math.type(cache.size) ~= "integer" or type(cache.k) ~= "table" or type(cache.v) ~= "table" then
    raise("decode: cache must be a key/value cache from gpt:kv_cache(B), got " ..
      (type(cache) == "table" and "a table without its fields" or type(cache)))
  end
  if not core.is_tensor(idx) or idx:ndim() ~= 2 or idx.dtype ~= "i32" then
    raise("decode: idx must be a (B, T) i32 tensor of token ids, got " ..
      (core.is_tensor(idx) and string.format("a %s tensor of %d dimensions", idx.dtype, idx:ndim()) or type(idx)))
  end
  local plan = decode_plan(self)
  local B, Tn = idx:dim(1), idx:dim(2)
  if B ~= cache.batch then raise(string.format("decode: idx has %d rows, the cache %d", B, cache.batch)) end
  if cache.pos + Tn > cache.size then
    raise(string.format("decode: positions %d..%d exceed the context %d (slide the window: reset cache.pos)", cache.pos,
      cache.pos + Tn - 1, cache.size))
  end
  local x = ops.embedding_forward(idx, plan.wte, plan.wpe:narrow(cache.pos + 1, Tn))
  local H = self.cfg.num_attention_heads
  for i, l in ipairs(plan.layers) do
    local a = l.norm:forward(x)
    local qkv = l.qkv:forward(a)
    local o = ops.attention_kv(cache.k[i], cache.v[i], qkv, cache.pos, H)
    local h = l.proj:forward_res(o, x)
    x = l.mlp:forward_res(h, h)
  end
  local logits = self.head:forward(x)
  self.body:drop_saved()
  self.head:drop_saved()
  cache.pos = cache.pos + Tn
  return logits
end

function GPT:decode(cache, idx) return keeping_fp8(self, decode, cache, idx) end

-- Text generation. prompts: a list of token lists, all the same length (>= 1); appends n tokens to each and
-- returns the list of generated token lists. opts:
--   temperature (0: greedy, the default), top_k (0: all), top_p (1: all), seed (0): sampling (tg.sampler);
--   on_token(step, tokens): called with each step's new token per sequence as soon as it is chosen;
--   keep: tokens kept when the window slides (default half the context), cache: false recomputes every step.
-- With the cache (the default) the prompt is run once and each new token costs one position. When the
-- sequence outgrows the context, the window slides: the last `keep` tokens are run again from position 0 and
-- decoding continues, so each token sees between keep and max_position_embeddings tokens.
local GENERATE_KEYS = { temperature = true, top_k = true, top_p = true, seed = true, on_token = true, keep = true,
  cache = true, device = true }

local function generate(self, prompts, n, opts)
  if opts ~= nil and type(opts) ~= "table" then raise("generate: options must be a table, got " .. type(opts)) end
  opts = opts or {}
  check_keys("generate", opts, GENERATE_KEYS, { temprature = "temperature", topk = "top_k", topp = "top_p",
    ["top-k"] = "top_k", ["top-p"] = "top_p", max_tokens = "the second argument (n)" })
  local T = self.cfg.max_position_embeddings
  if type(prompts) ~= "table" then
    raise("generate: prompts must be a list of token lists ({{id, id, ...}, ...}), got " .. type(prompts))
  end
  if math.type(n) ~= "integer" or n < 0 then
    raise("generate: n (the tokens to generate) must be an integer >= 0, got " ..
      (type(n) == "number" and tostring(n) or type(n) == "string" and "the string '" .. n .. "'" or type(n)))
  end
  local B = #prompts
  if B < 1 then raise("generate: no prompts") end
  local V = self.cfg.vocab_size
  for b = 1, B do
    if type(prompts[b]) ~= "table" then
      raise(string.format("generate: prompt %d is a %s, not a list of token ids (encode text with a tokenizer first)",
        b, type(prompts[b])))
    end
    for i, t in ipairs(prompts[b]) do
      if math.type(t) ~= "integer" or t < 0 or t >= V then
        raise(string.format("generate: prompt %d token %d is %s, not a token id in 0..%d", b, i,
          type(t) == "string" and "'" .. t .. "'" or tostring(t), V - 1))
      end
    end
  end
  local L0 = #prompts[1]
  for b = 1, B do
    if #prompts[b] ~= L0 then raise(string.format("generate: prompt %d has %d tokens, prompt 1 has %d", b, #prompts[b], L0)) end
  end
  if L0 < 1 then raise("generate: empty prompt") end
  local keep = opts.keep or math.max(1, T // 2)
  if math.type(keep) ~= "integer" or keep < 1 or keep >= T and T > 1 then
    raise(string.format("generate: keep %s must be an integer in 1..%d", tostring(keep), math.max(1, T - 1)))
  end
  for _, k in ipairs { "temperature", "top_p" } do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge) then
      raise(string.format("generate: %s must be a finite number, got %s", k, tostring(v)))
    end
  end
  for _, k in ipairs { "top_k", "seed" } do
    if opts[k] ~= nil and math.type(opts[k]) ~= "integer" then
      raise(string.format("generate: %s must be an integer, got %s", k, tostring(opts[k])))
    end
  end
  if opts.temperature ~= nil and opts.temperature < 0 then
    raise(string.format("generate: temperature must be >= 0 (0: greedy), got %s", tostring(opts.temperature)))
  end
  if opts.top_p ~= nil and not (opts.top_p > 0 and opts.top_p <= 1) then
    raise(string.format("generate: top_p must be in (0, 1] (1: all), got %s", tostring(opts.top_p)))
  end
  if opts.top_k ~= nil and opts.top_k < 0 then
    raise(string.format("generate: top_k must be >= 0 (0: all), got %s", tostring(opts.top_k)))
  end
  if opts.on_token ~= nil and type(opts.on_token) ~= "function" then
    raise("generate: on_token must be a function(step, tokens), got " .. type(opts.on_token))
  end
  if opts.cache ~= nil and type(opts.cache) ~= "boolean" then
    raise("generate: cache must be a boolean, got " .. type(opts.cache))
  end
  local sampler = core.sampler { temperature = opts.temperature or 0, top_k = opts.top_k or 0, top_p = opts.top_p or 1,
    seed = opts.seed or 0 }
  local seqs, outs = {}, {}
  for b = 1, B do
    seqs[b] = { table.unpack(prompts[b]) }
    outs[b] = {}
  end
  local device = opts.device or decode_plan(self).wte.device
  -- the last w tokens of every sequence as a (B, w) i32 tensor
  local function window(w)
    local rows = {}
    for b = 1, B do
      local s, r = seqs[b], {}
      for t = 1, w do r[t] = s[#s - w + t] end
      rows[b] = r
    end
    return core.tensor(rows, { dtype = "i32", device = device })
  end
  -- the next token of each sequence from logits (B, Tn, V') at position Tn
  local function pick(logits)
    local Tn, Vt = logits:dim(2), logits:dim(3)
    if Tn == 1 then return sampler:sample(logits:view(B, Vt), V) end
    local flat, out = logits:view(B * Tn, Vt), {}
    for b = 1, B do out[b] = sampler:sample(flat:narrow((b - 1) * Tn + Tn, 1), V)[1] end
    return out
  end
  local cache = opts.cache ~= false and self:kv_cache(B) or nil
  -- w: the tokens the next position attends over (the cache's positions); without the cache the same window
  -- is recomputed in full, so both paths slide alike and give the same tokens
  local w = math.min(L0, T)
  local logits
  if cache then
    logits = self:decode(cache, window(w))
  else
    logits = self:logits(window(w))
  end
  for step = 1, n do
    local toks = pick(logits)
    for b = 1, B do
      seqs[b][#seqs[b] + 1] = toks[b]
      outs[b][step] = toks[b]
    end
    if opts.on_token then opts.on_token(step, toks) end
    if step == n then break end
    if not cache then
      if w >= T then w = math.min(keep, #seqs[1]) else w = w + 1 end
      logits = self:logits(window(w))
    elseif cache.pos >= T then -- slide: the last `keep` tokens from position 0
      cache.pos = 0
      logits = self:decode(cache, window(math.min(keep, #seqs[1])))
    else
      local col = {}
      for b = 1, B do col[b] = { toks[b] } end
      logits = self:decode(cache, core.tensor(col, { dtype = "i32", device = device }))
    end
  end
  return outs
end

function GPT:generate(prompts, n, opts) return keeping_fp8(self, generate, prompts, n, opts) end

------------------------------------------------------------------------ a layer written in Lua
-- nn.LuaLinear(in_features, out_features [, opts]) or nn.LuaLinear{in_features=,
-- out_features=, ...}, opts {bias=true, name=, dtype=, device=, init_std=,
-- delay_wgrad=, fuse_wgrad_accumulation=}: y = x W^T + b with tegraph.ops. An example of a
-- custom layer: a Lua table with forward(self, x, mb), backward(self, dy, mb)
-- and backward_dw(self, mb, accumulate) and a params list, made a module with
-- nn.Module. backward computes dgrad and keeps (x, dy); the engine then calls
-- backward_dw now or, with delay_wgrad, when m:backward_dw(mb) pops it, and
-- fires the hooks after it. accumulate is the engine's: false on the first
-- wgrad of the step (overwrite the gradients), true after it (add to them);
-- a layer must not decide that itself (one that always adds would carry the
-- previous step's gradient). A table without backward_dw computes its wgrad
-- in backward, which then gets the flag: backward(self, dy, mb, accumulate).
local LUA_LINEAR_KEYS = {
  in_features = true, out_features = true, bias = true, name = true, dtype = true, device = true, init_std = true,
  delay_wgrad = true, fuse_wgrad_accumulation = true,
}

-- The positional form (in_features, out_features [, opts]) as one options table.
local function lua_linear_args(nin, nout, opts)
  local args = { nin, nout }
  for i = 1, 2 do
    local v = args[i]
    if math.type(v) ~= "integer" or v < 1 then
      raise(string.format("nn.LuaLinear: argument #%d (%s) must be a positive integer, got %s", i,
        i == 1 and "in_features" or "out_features",
        v == nil and "no value" or type(v) == "number" and tostring(v) or "a " .. type(v)))
    end
  end
  if opts ~= nil and type(opts) ~= "table" then
    raise("nn.LuaLinear: argument #3 (options) must be a table, got a " .. type(opts))
  end
  local o = { in_features = nin, out_features = nout }
  for k, v in pairs(opts or {}) do
    if k == "in_features" or k == "out_features" then
      raise("nn.LuaLinear: " .. k .. " is given as an argument and again in the options")
    end
    o[k] = v
  end
  return o
end

function nn.LuaLinear(o, out_features, opts)
  if type(o) ~= "table" then
    o = lua_linear_args(o, out_features, opts)
  elseif out_features ~= nil or opts ~= nil then
    raise("nn.LuaLinear: takes (in_features, out_features [, options]) or one options table, not a table then more arguments")
  end
  check_keys("nn.LuaLinear", o, LUA_LINEAR_KEYS, { ["in"] = "in_features", out = "out_features" })
  local nin, nout = o.in_features, o.out_features
  for _, k in ipairs { "in_features", "out_features" } do
    if math.type(o[k]) ~= "integer" or o[k] < 1 then
      raise(string.format("nn.LuaLinear: option '%s' must be a positive integer, got %s", k, tostring(o[k])))
    end
  end
  local name = o.name or "lua_linear"
  local topts = { dtype = o.dtype or "f32", device = o.device }
  local w = core.empty({ nout, nin }, topts)
  w:copy_(core.randn({ nout, nin }, { std = o.init_std or 0.02, device = o.device }))
  local fused = { fuse_wgrad_accumulation = o.fuse_wgrad_accumulation }
  local W = nn.Parameter(name .. ".weight", w, fused)
  local b = nil
  if o.bias ~= false then b = nn.Parameter(name .. ".bias", core.zeros({ nout }, topts), fused) end
  local self = { name = name, params = { W, b }, delay_wgrad = o.delay_wgrad, saved = {}, pending = {} }

  local function shape_with_last(t, last)
    local s = t:shape()
    s[#s] = last
    return s
  end

  function self:forward(x, mb)
    if x:dim(-1) ~= nin then
      raise(string.format("%s: input's last dimension is %d, expected %d", name, x:dim(-1), nin))
    end
    local x2 = x:view(-1, nin)
    local y = ops.matmul(x2, W.data, false, true) -- (N, out) = x @ W^T
    if b then ops.bias_add(y, b.data) end
    self.saved[mb] = x2
    return y:view(shape_with_last(x, nout))
  end

  function self:backward(dy, mb)
    local x2 = self.saved[mb]
    if not x2 then raise(string.format("%s: backward of microbatch %d before its forward", name, mb)) end
    self.saved[mb] = nil
    local dy2 = dy:view(-1, nout)
    local dx = ops.matmul(dy2, W.data) -- dgrad (=): (N, in) = dy @ W
    self.pending[mb] = { x2, dy2 }
    return dx:view(shape_with_last(dy, nin))
  end

  function self:backward_dw(mb, accumulate)
    local p = self.pending[mb]
    self.pending[mb] = nil
    local x2, dy2 = p[1], p[2]
    local beta = accumulate and 1.0 or 0.0
    -- wgrad (+=, or = on the step's first microbatch): dW (out, in) = dy^T @ x
    ops.gemm(W.wgrad, dy2, true, x2, false, 1.0, beta)
    if b then ops.bias_backward_dw(b.wgrad, dy2, beta) end
  end

  return nn.Module(self)
end

return nn
