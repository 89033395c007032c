-- tegraph.gpt2: GPT-2 weights in and out of nn.GPT — Hugging Face GPT2LMHeadModel safetensors (load and
-- export) and llm.c's gpt2_124M.bin / gpt2_124M_bf16.bin model files (load).
--
-- Names: HF wte, wpe, h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc, h.N.mlp.c_proj,
-- ln_f (with or without "transformer."), the head tied to wte. HF's Conv1D stores weights [in, out];
-- tegraph's linear weights are [out, in], so those are transposed both ways. The q, k, v column order
-- of c_attn is tegraph's (q | k | v, heads contiguous in each).
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"

local M = {}

-- (tegraph name, HF name, transposed) for layer i (0-based) and the rest.
local function layer_map(i)
  local h, t = "h." .. i .. ".", "h." .. i .. "."
  return {
    { t .. "attn_norm.weight", h .. "ln_1.weight" }, { t .. "attn_norm.bias", h .. "ln_1.bias" },
    { t .. "attn.qkv.weight", h .. "attn.c_attn.weight", true }, { t .. "attn.qkv.bias", h .. "attn.c_attn.bias" },
    { t .. "attn.proj.weight", h .. "attn.c_proj.weight", true }, { t .. "attn.proj.bias", h .. "attn.c_proj.bias" },
    { t .. "mlp.norm.weight", h .. "ln_2.weight" }, { t .. "mlp.norm.bias", h .. "ln_2.bias" },
    { t .. "mlp.fc1.weight", h .. "mlp.c_fc.weight", true }, { t .. "mlp.fc1.bias", h .. "mlp.c_fc.bias" },
    { t .. "mlp.fc2.weight", h .. "mlp.c_proj.weight", true }, { t .. "mlp.fc2.bias", h .. "mlp.c_proj.bias" },
  }
end

local function name_map(layers)
  local map = { { "embed.wte", "wte.weight" }, { "embed.wpe", "wpe.weight" } }
  for i = 0, layers - 1 do
    for _, e in ipairs(layer_map(i)) do map[#map + 1] = e end
  end
  map[#map + 1] = { "lm_head.norm.weight", "ln_f.weight" }
  map[#map + 1] = { "lm_head.norm.bias", "ln_f.bias" }
  return map
end

local function params_by_name(model)
  local by = {}
  for _, p in ipairs(model:parameters()) do by[p.name] = p end
  return by
end

-- Refuses a model that is not an nn.GPT with GPT-2's parameters, or a path that is not a string, naming
-- the argument (who: the function).
local function check_args(who, model, path)
  if type(model) ~= "table" or type(model.cfg) ~= "table" or type(model.parameters) ~= "function" or
      math.type(model.cfg.num_layers) ~= "integer" then
    raise(string.format("%s: argument #1 (model) must be an nn.GPT, got %s", who,
      type(model) == "table" and "a table that is not one" or type(model)))
  end
  if type(path) ~= "string" or path == "" then
    raise(string.format("%s: argument #2 (path) must be a file name, got %s", who,
      type(path) == "string" and "an empty string" or type(path)))
  end
  options.path(who, "the path", path)
  local by = params_by_name(model)
  for _, e in ipairs(name_map(model.cfg.num_layers)) do
    if not by[e[1]] then
      raise(string.format("%s: the model has no parameter '%s' (GPT-2's layout: LayerNorm, biases)", who, e[1]))
    end
  end
end

-- A tegraph checkpoint (a run directory with `latest`, or a step directory with model.safetensors) is
-- not a GPT-2 file: said so, rather than reading it as one and failing on a name or the llm.c header.
local function is_checkpoint_dir(path)
  for _, n in ipairs { "latest", "model.safetensors", "model.stage1.safetensors" } do
    local f = io.open(path .. "/" .. n, "rb")
    if f then
      f:close()
      return true
    end
  end
  return false
end

local function refuse_dir(who, path)
  if not core.fs.isdir(path) then return end
  if is_checkpoint_dir(path) then
    raise(string.format("%s: %s is a directory holding a tegraph checkpoint, not a GPT-2 model file (a checkpoint " ..
      "is resumed: tegraph.checkpoint.load, gpt.lua --resume %s)", who, path, path))
  end
  raise(string.format("%s: %s is a directory, not a GPT-2 model file", who, path))
end

-- Writes src (f32 or the parameter's dtype, shape of p, rows may be fewer: the rest zero) into p's
-- master (when it has one) and data.
local function assign(p, src)
  local rows = src:dim(1)
  local full = rows == p.shape[1] and src or nil
  if not full then
    full = core.zeros(p.shape, { dtype = src.dtype, device = p.data.device })
    full:narrow(1, rows):copy_(src)
  end
  if p.master then p.master:copy_(full) end
  p.data:copy_(full)
end

local function shape_str(s) return "[" .. table.concat(s, ",") .. "]" end

-- gpt2.load_hf(model, path): loads a GPT2LMHeadModel model.safetensors into an nn.GPT. Every tensor is
-- checked (present, shape) before any is copied; wte may have fewer rows than a padded token table
-- (the extra rows are zeroed) and wpe more rows than the context (the first ones are used).
function M.load_hf(model, path)
  check_args("gpt2.load_hf", model, path)
  refuse_dir("gpt2.load_hf", path)
  local cfg = model.cfg
  local ok, f = pcall(core.safetensors.open, path)
  if not ok then error(f, 0) end -- the file's error (it names the path and the caller's line)
  local fmt = f:metadata().format
  if fmt == "tegraph model 1" then
    f:close()
    raise(string.format("%s: a tegraph checkpoint's model file (tegraph's parameter names), not a Hugging Face " ..
      "GPT-2 model.safetensors: resume its checkpoint directory instead (tegraph.checkpoint.load, gpt.lua --resume)",
      path))
  end
  local prefix = f:info("transformer.wte.weight") and "transformer." or ""
  local by = params_by_name(model)
  local C = cfg.hidden_size
  local plan = {}
  local good, err = pcall(function()
    for _, e in ipairs(name_map(cfg.num_layers)) do
      local tname, hname, tr = e[1], prefix .. e[2], e[3]
      local p = by[tname]
      local info = f:info(hname)
      if not info then error(string.format("%s: tensor '%s' (for %s) is missing", path, hname, tname), 0) end
      if not info.shape then error(string.format("%s: tensor '%s' has %d dimensions", path, hname, info.ndim), 0) end
      if info.dtype ~= "f32" and info.dtype ~= "bf16" then
        error(string.format("%s: tensor '%s' is %s, expected a float type", path, hname, info.file_dtype), 0)
      end
      local want = { table.unpack(p.shape) }
      if tr then want[1], want[2] = want[2], want[1] end
      local s = info.shape
      local fits = #s == #want
      for d = 1, #want do fits = fits and (s[d] == want[d] or (d == 1 and not tr and tname:match("^embed%.") and
        (tname == "embed.wte" and s[1] <= want[1] and s[1] >= cfg.vocab_size or tname == "embed.wpe" and s[1] >= want[1]))) end
      if not fits then
        error(string.format("%s: tensor '%s' has shape %s, the model's %s needs %s", path, hname, shape_str(s), tname,
          shape_str(want)), 0)
      end
      plan[#plan + 1] = { p = p, hname = hname, tr = tr, wpe = tname == "embed.wpe" }
    end
    local h = cfg.num_layers
    if f:info(prefix .. "h." .. h .. ".ln_1.weight") then
      error(string.format("%s: the file has more than the model's %d layers (tensor '%sh.%d.ln_1.weight')", path, h,
        prefix, h), 0)
    end
  end)
  if not good then
    f:close()
    raise(err)
  end
  for _, e in ipairs(plan) do
    local t = f:read(e.hname, { device = e.p.data.device })
    if e.tr then t = core.host_transpose(t) end
    if e.wpe and t:dim(1) > e.p.shape[1] then t = t:narrow(1, e.p.shape[1]) end
    assign(e.p, t)
  end
  f:close()
end

-- gpt2.export_hf(model, path [, {dtype = "f32"}]): writes the model as a GPT2LMHeadModel
-- model.safetensors (the real vocabulary rows of wte, Conv1D layouts), loadable by transformers.
function M.export_hf(model, path, o)
  check_args("gpt2.export_hf", model, path)
  if o ~= nil and type(o) ~= "table" then raise("gpt2.export_hf: argument #3 (options) must be a table {dtype =}") end
  o = o or {}
  options.check("gpt2.export_hf", o, { "dtype" })
  -- f16: the copy to f16 is not implemented; refused here rather than after the option check passed
  if o.dtype ~= nil and o.dtype ~= "f32" and o.dtype ~= "bf16" then
    raise(string.format("gpt2.export_hf: dtype must be f32 or bf16%s, got %s",
      o.dtype == "f16" and " (f16 export is not supported)" or "", tostring(o.dtype)))
  end
  local cfg = model.cfg
  local by = params_by_name(model)
  local out = {}
  for _, e in ipairs(name_map(cfg.num_layers)) do
    local p = by[e[1]]
    local src = p.master or p.data
    local t = core.empty(p.shape, { dtype = o.dtype or src.dtype, device = src.device })
    t:copy_(src)
    if e[1] == "embed.wte" and p.shape[1] ~= cfg.vocab_size then t = t:narrow(1, cfg.vocab_size):clone() end
    if e[3] then t = core.host_transpose(t) end
    out[e[2]] = t
  end
  core.save(path, out, { format = "pt" })
end

-- llm.c model files: 256 int32 of header (magic 20240326, version 3 = f32 or 5 = bf16, maxT, V, L,
-- heads, C, padded V), then the parameters in this order, each for all layers at once.
M.LLMC_MAGIC = 20240326

-- gpt2.read_llmc_header(path) -> {version=, dtype=, max_seq_len=, vocab_size=, num_layers=, num_heads=,
-- channels=, padded_vocab_size=}
function M.read_llmc_header(path)
  if type(path) ~= "string" then raise("gpt2.read_llmc_header: path must be a string, got " .. type(path)) end
  refuse_dir("gpt2.read_llmc_header", path)
  local f, err = core.fs.open_read(path)
  if not f then raise(string.format("%s: cannot open: %s", path, err)) end
  local hdr = f:read(1024)
  f:close()
  if not hdr or #hdr < 1024 then raise(string.format("%s: truncated: shorter than the 1024-byte llm.c header", path)) end
  local magic, version, maxT, V, L, NH, C, Vp = string.unpack("<i4i4i4i4i4i4i4i4", hdr)
  if magic ~= M.LLMC_MAGIC then
    raise(string.format("%s: bad magic %d (expected %d: an llm.c GPT-2 model file)", path, magic, M.LLMC_MAGIC))
  end
  if version ~= 3 and version ~= 5 then
    raise(string.format("%s: unsupported version %d (3: f32, 5: bf16)", path, version))
  end
  -- the sizes size the reads: a negative or zero one (a corrupt header) would be an allocation or a
  -- narrow failing far from the file
  for _, e in ipairs { { "max_seq_len", maxT }, { "vocab_size", V }, { "num_layers", L }, { "num_heads", NH },
    { "channels", C } } do
    if e[2] < 1 then raise(string.format("%s: bad llm.c header: %s is %d (must be >= 1)", path, e[1], e[2])) end
  end
  if Vp ~= 0 and Vp < V then
    raise(string.format("%s: bad llm.c header: padded_vocab_size is %d, below vocab_size %d (0: unpadded)", path, Vp,
      V))
  end
  return { version = version, dtype = version == 3 and "f32" or "bf16", max_seq_len = maxT, vocab_size = V,
    num_layers = L, num_heads = NH, channels = C, padded_vocab_size = Vp ~= 0 and Vp or V }
end

-- gpt2.load_llmc(model, path): loads an llm.c gpt2_*.bin into an nn.GPT of the same size (context may
-- be shorter, the token table may be padded differently: the real rows are loaded, the rest zeroed).
function M.load_llmc(model, path)
  check_args("gpt2.load_llmc", model, path)
  refuse_dir("gpt2.load_llmc", path)
  local h = M.read_llmc_header(path)
  local cfg = model.cfg
  local C, L, V, Vp, T = h.channels, h.num_layers, h.vocab_size, h.padded_vocab_size, h.max_seq_len
  local function need(what, have, want)
    if have ~= want then raise(string.format("%s: the file has %s %d, the model %d", path, what, have, want)) end
  end
  need("channels", C, cfg.hidden_size)
  need("layers", L, cfg.num_layers)
  need("heads", h.num_heads, cfg.num_attention_heads)
  need("vocab size", V, cfg.vocab_size)
  if cfg.max_position_embeddings > T then
    raise(string.format("%s: the file's context is %d, shorter than the model's %d", path, T, cfg.max_position_embeddings))
  end
  local F = (cfg.ffn_hidden_size or 4 * C)
  need("ffn width", 4 * C, F)
  local order = { -- name, per-layer shape (nil: not per layer), tegraph suffix
    { "wte", { Vp, C } }, { "wpe", { T, C } },
    { "ln1w", { C }, "attn_norm.weight" }, { "ln1b", { C }, "attn_norm.bias" },
    { "qkvw", { 3 * C, C }, "attn.qkv.weight" }, { "qkvb", { 3 * C }, "attn.qkv.bias" },
    { "attprojw", { C, C }, "attn.proj.weight" }, { "attprojb", { C }, "attn.proj.bias" },
    { "ln2w", { C }, "mlp.norm.weight" }, { "ln2b", { C }, "mlp.norm.bias" },
    { "fcw", { 4 * C, C }, "mlp.fc1.weight" }, { "fcb", { 4 * C }, "mlp.fc1.bias" },
    { "fcprojw", { C, 4 * C }, "mlp.fc2.weight" }, { "fcprojb", { C }, "mlp.fc2.bias" },
    { "lnfw", { C } }, { "lnfb", { C } },
  }
  local esize = h.dtype == "f32" and 4 or 2
  local total = 0
  for _, e in ipairs(order) do
    local n = 1
    for _, d in ipairs(e[2]) do n = n * d end
    e.numel = n
    total = total + (e[3] and L or 1) * n
  end
  local f, err = core.fs.open_read(path)
  if not f then raise(string.format("%s: cannot open: %s", path, err)) end
  local size = f:seek("end")
  if size < 1024 + total * esize then
    f:close()
    raise(string.format("%s: truncated: %d bytes, the header's sizes need %d", path, size, 1024 + total * esize))
  end
  f:seek("set", 1024)
  local by = params_by_name(model)
  local loaded = {}
  local function read(shape, numel)
    return core.from_bytes(f:read(numel * esize), h.dtype, shape, { device = by["embed.wte"].data.device })
  end
  for _, e in ipairs(order) do
    if e[3] then
      for l = 0, L - 1 do loaded[#loaded + 1] = { by["h." .. l .. "." .. e[3]], read(e[2], e.numel) } end
    else
      local t = read(e[2], e.numel)
      if e[1] == "wte" then
        loaded[#loaded + 1] = { by["embed.wte"], t:narrow(1, math.min(V, by["embed.wte"].shape[1])) }
      elseif e[1] == "wpe" then
        loaded[#loaded + 1] = { by["embed.wpe"], t:narrow(1, cfg.max_position_embeddings) }
      else
        loaded[#loaded + 1] = { by[e[1] == "lnfw" and "lm_head.norm.weight" or "lm_head.norm.bias"], t }
      end
    end
  end
  f:close()
  for _, e in ipairs(loaded) do assign(e[1], e[2]) end
end

return M
