-- tegraph.data: llm.c / nanoGPT token files (.bin): reading into i32 batches, writing small ones.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"
local ops = core.ops

local data = {}

-- llm.c layout: a header of 256 little-endian int32 (magic, version, token
-- count, unused), then the tokens as little-endian uint16 (validated in C: src/core/data.c).
data.MAGIC = 20240520
data.VERSION = 1
data.HEADER_BYTES = 256 * 4

local Loader = {}
Loader.__index = Loader

-- data.open(path [, {vocab=V, device=, headerless=}]) -> loader. Reads llm.c .bin files (the header above)
-- and, when vocab is given, nanoGPT's headerless files (little-endian uint16 tokens, nothing else). Fails
-- (naming the file) when it cannot be read, is shorter than its header, has a bad magic (without vocab) or
-- version, is truncated (fewer tokens than the header says, or an odd size), or has a token id >= vocab.
-- headerless = false: the file must have the llm.c header even with vocab (a bad magic is reported as such,
-- not read as tokens; e.g. a validation file next to a training file with a header). loader.vocab is vocab,
-- or without it the largest id + 1 (at least 256: a byte-level file gets 256).
local OPEN_KEYS = { vocab = true, device = true, headerless = true }
function data.open(path, o)
  if type(path) ~= "string" then raise("data.open: path must be a string, got " .. type(path)) end
  options.path("data.open", "the path", path)
  if o ~= nil and type(o) ~= "table" then raise("data.open: options must be a table {vocab=, device=, headerless=}") end
  o = o or {}
  options.check("data.open", o, OPEN_KEYS)
  if o.headerless ~= nil and type(o.headerless) ~= "boolean" then
    raise("data.open: headerless must be a boolean, got " .. type(o.headerless))
  end
  local f, err = core.fs.open_read(path) -- a FIFO or device is refused, not waited on
  if not f then raise(string.format("%s: cannot open token file: %s", path, err)) end
  local bytes, rerr = f:read("a")
  f:close()
  if not bytes then raise(string.format("%s: cannot read token file: %s", path, rerr or "read failed")) end
  if o.headerless == false and #bytes >= 4 and string.unpack("<i4", bytes) ~= data.MAGIC then
    raise(string.format("%s: bad magic %d in the header (expected %d: an llm.c .bin token file with its header)",
      path, string.unpack("<i4", bytes), data.MAGIC))
  end
  -- an llm.c header whose magic alone is wrong (its version and token count fit the file) is a damaged file, not
  -- headerless tokens: read as tokens its 1024 bytes would train as data
  if #bytes >= data.HEADER_BYTES + 2 and (#bytes - data.HEADER_BYTES) % 2 == 0 then
    local magic, version, count = string.unpack("<i4i4i4", bytes)
    if magic ~= data.MAGIC and version == data.VERSION and count == (#bytes - data.HEADER_BYTES) // 2 then
      raise(string.format("%s: bad magic %d in the header (expected %d; its version %d and token count %d are an " ..
        "llm.c header's: the file is damaged)", path, magic, data.MAGIC, version, count))
    end
  end
  if o.headerless == false and #bytes < 4 then o = { device = o.device } end -- the header check names the size
  local first, ntok, vocab = ops.token_file(bytes, path, o.vocab)
  return setmetatable({ path = path, bytes = bytes, first = first, ntok = ntok, vocab = vocab, pos = 0,
    device = o.device, headerless = first == 0 }, Loader)
end

-- Two loaders over the same tokens: the first 1 - frac of them and the last frac (a validation split).
function Loader:split(frac)
  if type(frac) ~= "number" or not (frac > 0 and frac < 1) then -- NaN fails both
    raise(string.format("%s: the split fraction must be in (0, 1), got %s", self.path, tostring(frac)))
  end
  local nval = math.floor(self.ntok * frac)
  local ntrain = self.ntok - nval
  if nval < 2 or ntrain < 2 then
    raise(string.format("%s: %d tokens are too few to hold out %.3g of them", self.path, self.ntok, frac))
  end
  local function part(first, n, tag)
    return setmetatable({ path = self.path .. " (" .. tag .. ")", bytes = self.bytes, first = first, ntok = n,
      vocab = self.vocab, pos = 0, device = self.device }, Loader)
  end
  return part(self.first, ntrain, "train"), part(self.first + 2 * ntrain, nval, "validation")
end

local function check_count(self, who, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    raise(string.format("%s: %s: %s must be an integer >= 1, got %s", self.path, who, name,
      type(v) == "number" and tostring(v) or type(v)))
  end
end

local function check_window(self, who, B, T)
  if getmetatable(self) ~= Loader then raise(who .. ": call it as loader:" .. who .. "(...)") end
  check_count(self, who, "B (sequences)", B)
  check_count(self, who, "T (tokens a sequence)", T)
end

-- count batches of (B, T) windows at fixed, evenly spaced offsets (the same every call): for evaluation.
function Loader:eval_batches(B, T, count)
  check_window(self, "eval_batches", B, T)
  check_count(self, "eval_batches", "count", count)
  if T + 1 > self.ntok then
    raise(string.format("%s: %d tokens, too few for windows of %d (+1)", self.path, self.ntok, T))
  end
  local last = self.ntok - T - 1
  local n = B * count
  local out = {}
  for c = 1, count do
    local starts = {}
    for b = 1, B do
      local k = (c - 1) * B + b - 1
      starts[b] = n > 1 and (k * last) // (n - 1) or 0
    end
    local x, y = ops.token_windows(self.bytes, self.first, starts, T, self.device)
    out[c] = { x, y }
  end
  return out
end

-- The number of tokens.
function Loader:size()
  return self.ntok
end

-- x, y (B, T) i32 with y the next tokens of x. mode "random" (default):
-- windows at uniform random offsets (math.random); "sequential": consecutive
-- windows, wrapping to the start at the end of the file.
function Loader:batch(B, T, mode)
  check_window(self, "batch", B, T)
  if mode ~= nil and mode ~= "random" and mode ~= "sequential" then
    raise(string.format("%s: batch: mode must be \"random\" or \"sequential\", got %s", self.path, tostring(mode)))
  end
  if T + 1 > self.ntok then
    raise(string.format("%s: %d tokens, too few for windows of %d (+1)", self.path, self.ntok, T))
  end
  local starts = {}
  local last = self.ntok - T - 1 -- largest valid start (0-based)
  for b = 1, B do
    if mode == "sequential" then
      if self.pos > last then self.pos = 0 end
      starts[b] = self.pos
      self.pos = self.pos + T
    else
      starts[b] = math.random(0, last)
    end
  end
  return ops.token_windows(self.bytes, self.first, starts, T, self.device)
end

-- The tokens [first, first+n) (0-based) as a Lua list.
function Loader:tokens(first, n)
  if getmetatable(self) ~= Loader then raise("tokens: call it as loader:tokens(first, n)") end
  if math.type(first) ~= "integer" or math.type(n) ~= "integer" or first < 0 or n < 0 or first > self.ntok - n then
    raise(string.format("%s: tokens(first, n): need integers with 0 <= first and first + n <= %d tokens, got %s, %s",
      self.path, self.ntok, tostring(first), tostring(n)))
  end
  local out = {}
  for i = 0, n - 1 do
    out[i + 1] = string.unpack("<I2", self.bytes, self.first + 2 * (first + i) + 1)
  end
  return out
end

-- data.write_u16(path, u16): writes the token bytes u16 (little-endian uint16, e.g. tok:encode(s, {out = "u16"}))
-- as an llm.c .bin file, through a temporary name and a rename (a reader never sees half a file).
function data.write_u16(path, u16)
  if type(path) ~= "string" then raise("data.write_u16: path must be a string, got " .. type(path)) end
  if type(u16) ~= "string" then raise("data.write_u16: u16 must be a string of token bytes, got " .. type(u16)) end
  if #u16 % 2 ~= 0 then raise(string.format("%s: odd number of token bytes", path)) end
  local n = #u16 // 2
  -- a name of its own per writer: ranks tokenizing the same file each write theirs, the last rename wins
  local tmp = string.format("%s.tmp%d.%s", path, os.time(), tostring({}):match("0x(%x+)") or tostring(math.random(1 << 30)))
  local f, err = io.open(tmp, "wb")
  if not f then raise(string.format("%s: cannot write token file: %s", path, err)) end
  local ok, werr = f:write(string.pack("<i4i4i4", data.MAGIC, data.VERSION, n), string.rep("\0", data.HEADER_BYTES - 12), u16)
  f:close()
  if ok then ok, werr = os.rename(tmp, path) end
  if not ok then
    os.remove(tmp)
    raise(string.format("%s: cannot write token file: %s", path, werr))
  end
  return n
end

-- data.tokenize(path, tok [, {tokenizer_id =, progress = fn(done, total), quiet =}]) -> the path of an llm.c
-- .bin file holding the tokens of the text file `path`: PATH.<hash>.bin next to it, where the hash covers the
-- file's bytes and the tokenizer (tokenizer_id: a string naming it, e.g. the contents of its files). An existing
-- cache file is used as it is when its header and size are consistent; otherwise (none, or a damaged one) the
-- text is tokenized and the file written. Returns path, ntokens,
-- whether it was cached.
function data.tokenize(path, tok, o)
  o = options.check("data.tokenize", o or {}, { "tokenizer_id", "progress", "quiet" })
  options.path("data.tokenize", "the path", path)
  local f, err = core.fs.open_read(path)
  if not f then raise(string.format("%s: cannot open text file: %s", path, err)) end
  local text, rerr = f:read("a")
  f:close()
  if not text then raise(string.format("%s: cannot read text file: %s", path, rerr or "read failed")) end
  if #text < 2 then raise(string.format("%s: %d bytes of text, too few to train on", path, #text)) end
  local id = (o.tokenizer_id or "") .. "|" .. tok.kind .. "|" .. tok.vocab_size
  local out = string.format("%s.%s.bin", path, ops.hash64(text, id))
  local cf = core.fs.open_read(out)
  if cf then
    local head = cf:read(12)
    local size = cf:seek("end")
    cf:close()
    -- used only when its header and size add up: a cache cut short or damaged (a full disk, a bad copy) is
    -- tokenized again and replaced, rather than failing every run that reads it
    if head and #head == 12 then
      local magic, version, n = string.unpack("<i4i4i4", head)
      if magic == data.MAGIC and version == data.VERSION and n >= 0 and size == data.HEADER_BYTES + 2 * n then
        return out, n, true
      end
    end
  end
  if tok.vocab_size > 65536 then
    raise(string.format("%s: the tokenizer's %d ids do not fit uint16 token files", path, tok.vocab_size))
  end
  local u16 = tok:encode(text, { out = "u16", progress = o.progress })
  local n = data.write_u16(out, u16)
  return out, n, false
end

-- data.write(path, tokens): writes a list of token ids (0..65535) as an
-- llm.c .bin file. Returns the number of tokens; fails naming the file.
function data.write(path, tokens)
  if type(path) ~= "string" then raise("data.write: path must be a string, got " .. type(path)) end
  if type(tokens) ~= "table" then raise("data.write: tokens must be a list of token ids, got " .. type(tokens)) end
  local n = #tokens
  local parts = { string.pack("<i4i4i4", data.MAGIC, data.VERSION, n), string.rep("\0", data.HEADER_BYTES - 12) }
  local chunk = {}
  for i = 1, n do
    local t = tokens[i]
    if math.type(t) ~= "integer" or t < 0 or t > 65535 then
      raise(string.format("%s: token %d is %s, expected an integer in 0..65535", path, i, tostring(t)))
    end
    chunk[#chunk + 1] = string.pack("<I2", t)
    if #chunk == 4096 then
      parts[#parts + 1] = table.concat(chunk)
      chunk = {}
    end
  end
  parts[#parts + 1] = table.concat(chunk)
  local f, err = io.open(path, "wb")
  if not f then raise(string.format("%s: cannot write token file: %s", path, err)) end
  local ok, werr = f:write(table.concat(parts))
  f:close()
  if not ok then raise(string.format("%s: cannot write token file: %s", path, werr)) end
  return n
end

return data
