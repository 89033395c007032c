-- lua_tokens.lua — fuzz driver: the input is a token file (llm.c .bin layout) followed by nothing else;
-- tegraph.data opens it with a vocabulary and batch shape taken from its own bytes, and draws
-- batches; the decoding calls are also driven directly with counts and offsets from the input.
local tg = require "tegraph"
local data = require "tegraph.data"
local ops = tg.ops
local path = os.getenv("TMPDIR") or "/tmp"
path = path .. "/tegraph-fuzz-tokens-" .. tostring(os.time()) .. "-" .. tostring(math.random(1 << 30)) .. ".bin"

local function u8(s, i) return s:byte(i) or 0 end

return function(s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  local vocab = (u8(s, 13) * 256 + u8(s, 14)) % 70000
  local B, T = u8(s, 15) % 5, u8(s, 16) % 9
  local ok, loader = pcall(data.open, path, { vocab = vocab > 0 and vocab or nil })
  if ok then
    pcall(loader.batch, loader, B, T, u8(s, 17) % 2 == 0 and "random" or "sequential")
    pcall(loader.batch, loader, B, T, "sequential")
    pcall(loader.tokens, loader, u8(s, 18) - 8, u8(s, 19) - 8)
  end
  -- the decoding ops with offsets and counts from the input (some far out of range)
  local function int(i)
    local b = u8(s, i)
    local small = b % 64 - 16
    if b >= 250 then return ({ 2 ^ 31, 2 ^ 62, -2 ^ 62, math.maxinteger, math.mininteger, 2 ^ 32 + 4 })[b - 249] end
    return small
  end
  pcall(ops.u16_scan, s, int(20), int(21))
  pcall(ops.token_windows, s, int(22), { int(23), int(24) }, int(25))
  os.remove(path)
end
