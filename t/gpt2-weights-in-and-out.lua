-- gpt2-weights-in-and-out.lua — GPT-2 weights: nn.GPT -> Hugging Face model.safetensors -> nn.GPT is exact (f32,
-- and bf16 through the f32 masters); a hand-made GPT2LMHeadModel file loads with Conv1D weights transposed,
-- "transformer." prefixes, a padded token table and a longer wpe; an llm.c gpt2 .bin (f32 version 3, bf16
-- version 5) loads in llm.c's order; bad files are refused naming the tensor, with nothing loaded.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local gpt2 = require "tegraph.gpt2"
local tap = require "tap"

local dir = os.tmpname()
os.remove(dir)
tg.fs.mkdir(dir)
local function path(n) return dir .. "/" .. n end

local function model(seed, o)
  o = o or {}
  tg.manual_seed(seed)
  return nn.GPT { vocab_size = o.vocab or 11, max_position_embeddings = o.T or 6, hidden_size = 8, num_attention_heads = 2,
    num_layers = 2, dtype = o.dtype, make_vocab_size_divisible_by = o.pad }
end
local function max_diff(a, b)
  local pb, d = {}, 0
  for _, p in ipairs(b:parameters()) do pb[p.name] = p end
  for _, p in ipairs(a:parameters()) do
    local x, y = p.master or p.data, pb[p.name].master or pb[p.name].data
    if p.name == "embed.wte" then x, y = x:narrow(1, a.cfg.vocab_size), y:narrow(1, a.cfg.vocab_size) end -- the real rows
    d = math.max(d, x:max_abs_diff(y))
  end
  return d
end

local a = model(1, { pad = 8 })
gpt2.export_hf(a, path("a.safetensors"))
local f = tg.safetensors.open(path("a.safetensors"))
tap.is(table.concat(f:info("wte.weight").shape, ","), "11,8", "export writes the real vocabulary rows of wte")
tap.is(table.concat(f:info("h.1.mlp.c_fc.weight").shape, ","), "8,32", "c_fc is written [in, out] (Conv1D)")
tap.ok(f:info("lm_head.weight") == nil and f:info("h.0.ln_1.bias") ~= nil, "HF names, the head tied (not written)")
f:close()
local b = model(2, { pad = 8 })
tap.ok(max_diff(a, b) > 0, "a model of another seed differs")
gpt2.load_hf(b, path("a.safetensors"))
tap.is(max_diff(a, b), 0, "tegraph -> HF file -> tegraph is exact (f32)")
local ab, bb = model(3, { dtype = "bf16" }), model(4, { dtype = "bf16" })
gpt2.export_hf(ab, path("b.safetensors"))
gpt2.load_hf(bb, path("b.safetensors"))
tap.is(max_diff(ab, bb), 0, "... and for bf16 models (masters and bf16 weights)")

-- a hand-made HF file: values that say where they came from
local C, V, L = 8, 11, 2
local function grid(r, c, base) -- value(i, j) = base + 100 i + j (0-based)
  local rows = {}
  for i = 1, r do
    rows[i] = {}
    for j = 1, c do rows[i][j] = base + 100 * (i - 1) + (j - 1) end
  end
  return tg.tensor(rows)
end
local function vec(n, base)
  local v = {}
  for i = 1, n do v[i] = base + i end
  return tg.tensor(v)
end
local hf = { ["transformer.wte.weight"] = grid(V, C, 0), ["transformer.wpe.weight"] = grid(9, C, 0.5),
  ["transformer.ln_f.weight"] = vec(C, 1000), ["transformer.ln_f.bias"] = vec(C, 2000),
  ["lm_head.weight"] = grid(V, C, 0) }
for l = 0, L - 1 do
  local h = "transformer.h." .. l .. "."
  hf[h .. "ln_1.weight"], hf[h .. "ln_1.bias"] = vec(C, 10 * l + 1), vec(C, 10 * l + 2)
  hf[h .. "ln_2.weight"], hf[h .. "ln_2.bias"] = vec(C, 10 * l + 3), vec(C, 10 * l + 4)
  hf[h .. "attn.c_attn.weight"], hf[h .. "attn.c_attn.bias"] = grid(C, 3 * C, 0.25 + l), vec(3 * C, 5 + l)
  hf[h .. "attn.c_proj.weight"], hf[h .. "attn.c_proj.bias"] = grid(C, C, 0.125 + l), vec(C, 6 + l)
  hf[h .. "mlp.c_fc.weight"], hf[h .. "mlp.c_fc.bias"] = grid(C, 4 * C, 0.0625 + l), vec(4 * C, 7 + l)
  hf[h .. "mlp.c_proj.weight"], hf[h .. "mlp.c_proj.bias"] = grid(4 * C, C, 0.03125 + l), vec(C, 8 + l)
  hf[h .. "attn.bias"] = tg.ones { 1, 1, 4, 4 } -- the causal-mask buffer old checkpoints carry
end
tg.save(path("hf.safetensors"), hf, { format = "pt" })
local m = model(5, { pad = 16, T = 6 })
gpt2.load_hf(m, path("hf.safetensors"))
local P = {}
for _, p in ipairs(m:parameters()) do P[p.name] = p.data:totable() end
tap.is(P["h.1.attn.qkv.weight"][18][4], 1.25 + 100 * 3 + 17, "c_attn [in, out] is transposed: qkv.weight[out][in]")
tap.is(P["h.0.mlp.fc2.weight"][2][31], 0.03125 + 100 * 30 + 1, "mlp.c_proj [in, out] is transposed into fc2 [out, in]")
tap.is(P["h.0.attn.proj.weight"][3][5], 0.125 + 100 * 4 + 2, "attn.c_proj is transposed")
tap.is(P["h.1.mlp.fc1.weight"][32][8], 1.0625 + 100 * 7 + 31, "mlp.c_fc is transposed")
tap.is(P["h.1.attn.qkv.bias"][24], 6 + 24, "c_attn.bias is the qkv bias")
tap.is(P["h.1.mlp.norm.bias"][8], 14 + 8, "ln_2 is the mlp's norm")
tap.is(P["lm_head.norm.weight"][1], 1001, "ln_f is the head's norm")
tap.is(P["embed.wte"][11][8], 1007, "wte rows are the token table's ...")
tap.is(table.concat(P["embed.wte"][12], ","), "0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0", "... and the padding rows are zero")
tap.is(#P["embed.wpe"], 6, "a longer wpe gives the context's first rows")
tap.is(P["embed.wpe"][6][2], 0.5 + 500 + 1, "... unchanged")

-- refused, nothing loaded
local before = m:parameters()[1].data:clone()
hf["transformer.h.1.mlp.c_fc.weight"] = grid(4 * C, C, 0)
tg.save(path("bad.safetensors"), hf)
tap.error_like(function() gpt2.load_hf(m, path("bad.safetensors")) end,
  "bad.safetensors: tensor 'transformer.h.1.mlp.c_fc.weight' has shape %[32,8%], the model's h.1.mlp.fc1.weight needs %[8,32%]",
  "a transposed-wrong c_fc is refused naming it")
hf["transformer.h.1.mlp.c_fc.weight"] = nil
tg.save(path("bad.safetensors"), hf)
tap.error_like(function() gpt2.load_hf(m, path("bad.safetensors")) end,
  "tensor 'transformer.h.1.mlp.c_fc.weight' %(for h.1.mlp.fc1.weight%) is missing", "a missing tensor is named")
tap.is(m:parameters()[1].data:max_abs_diff(before), 0, "... and nothing was loaded")

-- llm.c: header, then the parameters in llm.c's order, all layers of each at once
local function write_llmc(src, file, version, Vp)
  local dt = version == 3 and "f32" or "bf16"
  local by = {}
  for _, p in ipairs(src:parameters()) do by[p.name] = p.master or p.data end
  local parts = { string.pack("<i4i4i4i4i4i4i4i4", 20240326, version, 6, V, L, 2, C, Vp) .. string.rep("\0", 1024 - 32) }
  local function put(t)
    local x = tg.empty(t:shape(), { dtype = dt })
    x:copy_(t)
    local vals = x:totable()
    local flat = {}
    local function walk(v) if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else flat[#flat + 1] = v end end
    walk(vals)
    local fmt = dt == "f32" and "<f" or nil
    for _, v in ipairs(flat) do
      if fmt then parts[#parts + 1] = string.pack(fmt, v)
      else -- bf16: the top half of the f32 bits (exact: x holds bf16 values)
        parts[#parts + 1] = string.pack("<I2", string.unpack("<I4", string.pack("<f", v)) >> 16)
      end
    end
  end
  local wte = tg.zeros({ Vp, C })
  wte:narrow(1, V):copy_(by["embed.wte"]:narrow(1, V))
  put(wte)
  put(by["embed.wpe"])
  for _, s in ipairs { "attn_norm.weight", "attn_norm.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
    "attn.proj.bias", "mlp.norm.weight", "mlp.norm.bias", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias" } do
    for l = 0, L - 1 do put(by["h." .. l .. "." .. s]) end
  end
  put(by["lm_head.norm.weight"])
  put(by["lm_head.norm.bias"])
  local fh = io.open(file, "wb")
  fh:write(table.concat(parts))
  fh:close()
end
local src = model(6)
write_llmc(src, path("gpt2.bin"), 3, 16)
local dst = model(7, { pad = 8 })
gpt2.load_llmc(dst, path("gpt2.bin"))
tap.is(max_diff(src, dst), 0, "an llm.c f32 model file (version 3, padded vocab 16) loads exactly")
local srcb = model(8, { dtype = "bf16" })
write_llmc(srcb, path("gpt2_bf16.bin"), 5, 11)
local dstb = model(9, { dtype = "bf16" })
gpt2.load_llmc(dstb, path("gpt2_bf16.bin"))
local d = 0
local pb = {}
for _, p in ipairs(dstb:parameters()) do pb[p.name] = p end
for _, p in ipairs(srcb:parameters()) do d = math.max(d, p.data:max_abs_diff(pb[p.name].data)) end
tap.is(d, 0, "an llm.c bf16 model file (version 5) loads the bf16 weights exactly")
tap.error_like(function() gpt2.load_llmc(model(1, { vocab = 12 }), path("gpt2.bin")) end,
  "gpt2.bin: the file has vocab size 11, the model 12", "a size mismatch is named")
local fh = io.open(path("trunc.bin"), "wb")
fh:write(io.open(path("gpt2.bin"), "rb"):read(2000))
fh:close()
tap.error_like(function() gpt2.load_llmc(model(1), path("trunc.bin")) end, "trunc.bin: truncated: 2000 bytes",
  "a truncated llm.c file is refused")

-- a corrupt header's sizes are refused naming the file and the field (not an allocation or narrow failing later)
local function with_header(name, i, v) -- gpt2.bin with header int32 number i (1-based) set to v
  local all = io.open(path("gpt2.bin"), "rb"):read("a")
  local fh = io.open(path(name), "wb")
  fh:write(all:sub(1, 4 * (i - 1)) .. string.pack("<i4", v) .. all:sub(4 * i + 1))
  fh:close()
  return path(name)
end
tap.error_like(function() gpt2.load_llmc(model(1), with_header("vpneg.bin", 8, -50)) end,
  "vpneg.bin: bad llm.c header: padded_vocab_size is %-50, below vocab_size 11",
  "an llm.c header with a negative padded vocab size is refused naming the file and the field")
tap.error_like(function() gpt2.load_llmc(model(1), with_header("vpsmall.bin", 8, 5)) end,
  "vpsmall.bin: bad llm.c header: padded_vocab_size is 5, below vocab_size 11",
  "an llm.c header with a padded vocab size below the vocab size is refused naming the file")
tap.error_like(function() gpt2.load_llmc(model(1), with_header("chneg.bin", 7, -8)) end,
  "chneg.bin: bad llm.c header: channels is %-8 %(must be >= 1%)", "a negative channel count is refused naming the file")

-- f16 export: refused by the option check (the copy to f16 is not implemented), before anything is written
tap.error_like(function() gpt2.export_hf(model(1), path("f16.safetensors"), { dtype = "f16" }) end,
  "gpt2.export_hf: dtype must be f32 or bf16 %(f16 export is not supported%), got f16",
  "export_hf refuses dtype f16 in its option check")
tap.ok(io.open(path("f16.safetensors")) == nil, "... and writes no file")

-- a tegraph checkpoint given as a GPT-2 file: said so (not a missing-tensor or llm.c-header error)
local ck = require "tegraph.checkpoint"
local ckdir = ck.save(path("ck"), { model = model(1), step = 1 })
tap.error_like(function() gpt2.load_hf(model(1), ckdir .. "/model.safetensors") end,
  "model.safetensors: a tegraph checkpoint's model file .*resume its checkpoint directory",
  "load_hf of a tegraph checkpoint's model.safetensors says it is one")
tap.error_like(function() gpt2.load_llmc(model(1), path("ck")) end,
  "gpt2.load_llmc: .*/ck is a directory holding a tegraph checkpoint, not a GPT%-2 model file",
  "load_llmc of a checkpoint directory says it is a directory holding a checkpoint")
tap.error_like(function() gpt2.load_hf(model(1), dir) end, "gpt2.load_hf: .* is a directory, not a GPT%-2 model file",
  "load_hf of a plain directory says it is a directory")
tap.done_testing()
