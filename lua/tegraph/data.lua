-- tegraph.data: llm.c / nanoGPT token files (.bin): reading into i32 batches, writing small ones.
local raise = require "tegraph.raise"
local core = require "tegraph.core"
local ops = core.ops

local data = {}

-- llm.c layout: a header of 256 little-endian int32 (magic, version, token
-- count, unused), then the tokens as little-endian uint16.
data.MAGIC = 20240520
data.VERSION = 1
data.HEADER_BYTES = 256 * 4

local Loader = {}
Loader.__index = Loader

-- data.open(path [, {vocab=V}]) -> loader. Fails (naming the file) when it
-- cannot be read, is shorter than its header, has a bad magic or version, is
-- truncated (fewer tokens than the header says), or has a token id >= vocab.
function data.open(path, o)
  o = o or {}
  local f, err = io.open(path, "rb")
  if not f then raise(string.format("%s: cannot open token file: %s", path, err)) end
  local bytes, rerr = f:read("a")
  f:close()
  if not bytes then raise(string.format("%s: cannot read token file: %s", path, rerr or "read failed")) end
  if #bytes < data.HEADER_BYTES then
    raise(string.format("%s: truncated token file: %d bytes, shorter than the %d-byte llm.c header", path, #bytes,
      data.HEADER_BYTES))
  end
  local magic, version, ntok = string.unpack("<i4i4i4", bytes)
  if magic ~= data.MAGIC then
    raise(string.format("%s: bad magic %d in the header (expected %d: an llm.c/nanoGPT .bin token file)", path, magic,
      data.MAGIC))
  end
  if version ~= data.VERSION then
    raise(string.format("%s: unsupported version %d (expected %d: uint16 tokens)", path, version, data.VERSION))
  end
  if ntok < 0 then raise(string.format("%s: negative token count %d in the header", path, ntok)) end
  local have = (#bytes - data.HEADER_BYTES) // 2
  if have < ntok then
    raise(string.format("%s: truncated token file: the header says %d tokens but the file holds %d (%d bytes)", path,
      ntok, have, #bytes))
  end
  if ntok < 2 then raise(string.format("%s: %d tokens, need at least 2", path, ntok)) end
  if o.vocab then
    local max, at = ops.u16_scan(bytes, data.HEADER_BYTES, ntok)
    if max >= o.vocab then
      raise(string.format("%s: token id %d at position %d is >= the vocabulary size %d", path, max, at, o.vocab))
    end
  end
  return setmetatable({ path = path, bytes = bytes, ntok = ntok, vocab = o.vocab, pos = 0, device = o.device }, Loader)
end

-- The number of tokens.
function Loader:size()
  return self.ntok
end

-- x, y (B, T) i32 with y the next tokens of x. mode "random" (default):
-- windows at uniform random offsets (math.random); "sequential": consecutive
-- windows, wrapping to the start at the end of the file.
function Loader:batch(B, T, mode)
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
  return ops.token_windows(self.bytes, data.HEADER_BYTES, starts, T, self.device)
end

-- The tokens [first, first+n) (0-based) as a Lua list.
function Loader:tokens(first, n)
  local out = {}
  for i = 0, n - 1 do
    out[i + 1] = string.unpack("<I2", self.bytes, data.HEADER_BYTES + 2 * (first + i) + 1)
  end
  return out
end

-- data.write(path, tokens): writes a list of token ids (0..65535) as an
-- llm.c .bin file. Returns the number of tokens; fails naming the file.
function data.write(path, tokens)
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
