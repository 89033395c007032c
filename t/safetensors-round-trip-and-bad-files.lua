-- safetensors-round-trip-and-bad-files.lua — tg.save / tg.load keep every dtype's bits and the metadata; files
-- that are truncated, have broken or lying header JSON, overlapping, holed or out-of-file data ranges, an unknown
-- dtype or a shape that does not match the range are refused naming the file and the tensor; a checkpoint whose
-- tensors do not match the model (missing, extra, shape, dtype) is refused and nothing is loaded; a file that
-- shrinks while it is open (rewritten in place) fails the read naming the file and the tensor.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local checkpoint = require "tegraph.checkpoint"
local tap = require "tap"

local dir = os.tmpname()
os.remove(dir)
tg.fs.mkdir(dir)
local function path(n) return dir .. "/" .. n end

tg.manual_seed(3)
local a = tg.randn({ 3, 5 })
local b = tg.randn({ 7 }, { dtype = "bf16" })
local c = tg.tensor({ { 1, -2 }, { 2147483647, -2147483648 } }, { dtype = "i32" })
local d = tg.tensor({ 0, 65535, 7 }, { dtype = "u16" })
tg.save(path("ok.safetensors"), { a = a, b = b, c = c, d = d }, { step = 12, note = "tab\there \"q\"", lr = 0.1 })
local t, meta = tg.load(path("ok.safetensors"))
tap.is(t.a:max_abs_diff(a), 0, "f32 tensor read back exactly")
tap.is(t.b.dtype, "bf16", "bf16 stays bf16")
tap.is(t.b:max_abs_diff(b), 0, "bf16 tensor read back exactly")
tap.is(table.concat(t.c:totable()[2], ","), "2147483647,-2147483648", "i32 extremes read back")
tap.is(table.concat(t.d:totable(), ","), "0,65535,7", "u16 read back")
tap.is(meta.step, "12", "integer metadata as its decimal string")
tap.is(meta.lr, "0.1", "float metadata as the shortest string that reads back")
tap.is(meta.note, "tab\there \"q\"", "metadata strings with escapes read back")
local bytes = io.open(path("ok.safetensors"), "rb"):read("a")
local hlen = string.unpack("<I8", bytes)
tap.is((8 + hlen) % 8, 0, "the data starts 8-byte aligned")
local want_hdr = '{"__metadata__":{"lr":"0.1","note":"tab\\u0009here \\"q\\"","step":"12"},"a":{"dtype":"F32","shape":[3,5],"data_offsets":[0,60]}'
tap.is(bytes:sub(9, 8 + #want_hdr), want_hdr, "the header is plain safetensors JSON, names and metadata keys sorted")

-- hand-written files: header JSON, then data
local function file(name, json, data, raw_len)
  local f = io.open(path(name), "wb")
  f:write(string.pack("<I8", raw_len or #json), json, data or "")
  f:close()
  return path(name)
end
local function refused(name, json, data, pattern, what, raw_len)
  local p = file(name, json, data, raw_len)
  tap.error_like(function() tg.load(p) end, pattern, what)
end
local f32x2 = string.pack("<ff", 1, 2)
do -- 7 bytes
  local f = io.open(path("short"), "wb")
  f:write("\1\0\0\0\0\0\0")
  f:close()
  tap.error_like(function() tg.load(path("short")) end, "short: truncated: 7 bytes, shorter than the 8%-byte header length",
    "a 7-byte file is refused as truncated")
end
refused("hlen", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', f32x2,
  "hlen: truncated: the header length says 900 bytes but only", "a header length past the end", 900)
refused("json", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}', f32x2, "json: header JSON is broken: at byte",
  "broken header JSON")
refused("dup", '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
  f32x2, 'dup: header JSON is broken: .*key "x" given twice', "a tensor named twice")
refused("dtype", '{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}', f32x2,
  "dtype: tensor 'x': unknown or unsupported dtype \"F64\"", "an unknown dtype names the tensor")
refused("size", '{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', f32x2,
  "size: tensor 'x': data_offsets %[0, 8%] hold 8 bytes but its shape and F32 need 12", "shape * dtype size != range")
refused("past", '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', f32x2,
  "past: tensor 'x': data_offsets %[0, 16%] end past the 8 bytes of data", "a range past the end of the file")
refused("overlap", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
  f32x2, "overlap: tensor '[xy]': data_offsets %[%d, 8%] overlap those of tensor '[xy]'", "overlapping ranges")
refused("hole", '{"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32x2,
  "hole: tensor 'x': data_offsets %[4, 8%] leave bytes %[0, 4%) of the data unused", "a hole before a tensor's data")
refused("trail", '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32x2,
  "trail: 4 bytes of data after the last tensor's", "bytes after the last tensor")
refused("neg", '{"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', f32x2,
  "neg: tensor 'x': shape entry 1 is not a non%-negative integer", "a negative shape entry")
refused("field", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}}', f32x2,
  "field: tensor 'x': unknown field \"extra\"", "an unknown field in an entry")
refused("meta", '{"__metadata__":{"k":1},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', f32x2,
  "meta: __metadata__ value of \"k\" is not a string", "a non-string metadata value")
refused("deep", '{"x":[[[[[[1]]]]]]}', "", "deep: header JSON is broken: .*nested deeper", "deep nesting is bounded")
local okp = file("scalar", '{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"h":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}}',
  string.pack("<i8I2I2", -5, 0x3C00, 0xC000))
local st = tg.load(okp)
tap.is(st.s:totable()[1], -5, "an I64 scalar loads as a (1) i32")
tap.is(table.concat(st.h:totable(), ","), "1.0,-2.0", "F16 loads as f32")
tap.error_like(function() tg.save(path("x"), { a = "no" }) end, "x: 'a' is a string, not a tensor", "save names a non-tensor")

-- checkpoints that do not fit the model: refused, and nothing loaded
local function model(width, dtype)
  tg.manual_seed(1)
  return nn.GPT { vocab_size = 11, max_position_embeddings = 4, hidden_size = width, num_attention_heads = 2,
    num_layers = 1, dtype = dtype }
end
local m1 = model(8)
checkpoint.save(path("run"), { model = m1, step = 5, config = { width = 8 } })
local m2 = model(8)
for _, p in ipairs(m2:parameters()) do p.data:fill_(0.5) end
local function untouched()
  for _, p in ipairs(m2:parameters()) do
    if p.data:max_abs_diff(tg.full(p.shape, 0.5)) ~= 0 then return false end
  end
  return true
end
local weights = tg.load(path("run/step_00000005/model.safetensors"))
local function with(edit, name)
  local w = {}
  for k, v in pairs(weights) do w[k] = v end
  edit(w)
  tg.save(path("run/step_00000005/model.safetensors"), w, { step = 5 })
  local ok, err = pcall(checkpoint.load, path("run"), { model = m2 })
  return ok, err
end
local _, err = with(function(w) w["h.0.attn.qkv.bias"] = nil end)
tap.like(err, "model.safetensors: model tensor 'h.0.attn.qkv.bias' is missing from the file", "a missing tensor is named")
tap.ok(untouched(), "... and nothing was loaded")
_, err = with(function(w) w["h.0.extra"] = tg.zeros { 2 } end)
tap.like(err, "model.safetensors: tensor 'h.0.extra' in the file is not in the model", "an extra tensor is named")
_, err = with(function(w) w["embed.wpe"] = tg.zeros { 5, 8 } end)
tap.like(err, "tensor 'embed.wpe' has shape %[5,8%] in the file, the model has %[4,8%]", "a wrong shape is named")
_, err = with(function(w) w["embed.wpe"] = tg.zeros({ 4, 8 }, { dtype = "bf16" }) end)
tap.like(err, "tensor 'embed.wpe' is BF16 in the file, the model has f32", "a wrong dtype is named")
tap.ok(untouched(), "... and nothing was loaded after any refusal")
local ok = with(function() end)
tap.ok(ok, "the unchanged checkpoint loads")
tap.is(m2:parameters()[3].data:max_abs_diff(m1:parameters()[3].data), 0, "... with the saved values")

do -- the file shrinks after it was opened: its header and 16 bytes of data are left
  local p = path("shrinks.safetensors")
  tg.save(p, { big = tg.randn { 512, 512 } })
  local f = tg.safetensors.open(p)
  local h = assert(io.open(p, "rb"))
  local all = h:read("a")
  h:close()
  local hlen = string.unpack("<I8", all)
  h = assert(io.open(p, "wb"))
  h:write(all:sub(1, 8 + hlen + 16))
  h:close()
  tap.error_like(function() return f:read("big") end,
    "shrinks%.safetensors: tensor 'big': the file ends before the tensor's bytes %[%d+, %d+%) %(it was " .. #all ..
    " bytes when opened: truncated or rewritten since%)", "reading a tensor of a file that shrank since it was opened is an error naming it")
  tap.error_like(function() return f:read_into("big", tg.zeros { 512, 512 }) end, "the file ends before the tensor's bytes",
    "... read_into too")
  h = assert(io.open(p, "wb")) -- back to its full length (new bytes): reads see the file as it is now
  h:write(all)
  h:close()
  tap.is(f:read("big"):max_abs_diff(tg.load(p).big), 0, "once the file is whole again, the read gives its bytes")
end

do -- a name the file does not hold: info answers nil (the documented way to ask), read and read_into raise naming it
  local p = path("names.safetensors")
  tg.save(p, { here = tg.ones { 2 } })
  local f = tg.safetensors.open(p)
  tap.is(f:info("missing"), nil, "info of a name the file does not hold is nil, as the README says")
  tap.is_deeply(f:info("here").shape, { 2 }, "info of a name it holds gives its shape")
  tap.error_like(function() return f:read("missing") end, "missing", "read of that name raises, naming it")
  tap.error_like(function() return f:read_into("missing", tg.zeros { 2 }) end, "missing", "... read_into too")
end
tap.done_testing()
