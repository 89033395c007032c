-- llm.c .bin token files: written and read back into shifted i32 batches; bad magic, bad version, truncation,
-- ids >= vocab and missing files fail with errors naming the file and the problem.
local tg = require "tegraph"
local data = require "tegraph.data"
local tap = require "tap"

local dir = os.tmpname()
os.remove(dir)
local files = {}
local function tmp(name)
  local p = dir .. "-" .. name
  files[#files + 1] = p
  return p
end

local function write_raw(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local function header(magic, version, n)
  return string.pack("<i4i4i4", magic, version, n) .. string.rep("\0", 1024 - 12)
end

local function u16s(list)
  local parts = {}
  for i, t in ipairs(list) do parts[i] = string.pack("<I2", t) end
  return table.concat(parts)
end

-- a good file: tokens 0..99 (ids < 100), then one id of 65535 in a second file
local good = tmp("good.bin")
local toks = {}
for i = 1, 100 do toks[i] = i - 1 end
tap.is(data.write(good, toks), 100, "data.write returns the number of tokens")
local f = assert(io.open(good, "rb"))
local raw = f:read("a")
f:close()
tap.is(#raw, 1024 + 200, "the file is a 1024-byte header plus 2 bytes per token")
tap.is(select(1, string.unpack("<i4", raw)), 20240520, "the header starts with the llm.c magic")
tap.is(select(1, string.unpack("<i4", raw, 5)), 1, "then version 1")
tap.is(select(1, string.unpack("<i4", raw, 9)), 100, "then the token count")

local ld = data.open(good, { vocab = 100, device = "cpu" })
tap.is(ld:size(), 100, "open reads the token count")
tap.is_deeply(ld:tokens(10, 3), { 10, 11, 12 }, "tokens() reads the uint16 ids back")
tap.is_deeply(ld:tokens(97, 3), { 97, 98, 99 }, "tokens() reads up to the last token")
tap.error_like(function() return ld:tokens(-4, 6) end, "tokens%(first, n%): need integers with 0 <= first and first %+ n <= 100",
  "tokens() before the first token (the header) is refused")
tap.error_like(function() return ld:tokens(0.5, 2) end, "got 0.5, 2", "tokens() at a fractional position is refused")
tap.error_like(function() return ld:tokens(98, 3) end, "got 98, 3", "tokens() past the last token is refused")
tap.error_like(function() return ld:split(0 / 0) end, "the split fraction must be in %(0, 1%), got %-?nan",
  "split(NaN) is refused")
tap.error_like(function() return ld:batch(0, 4) end, "batch: B %(sequences%) must be an integer >= 1, got 0", "batch(0, T) is refused")
tap.error_like(function() return ld:batch(2, "x") end, "batch: T %(tokens a sequence%) must be an integer >= 1, got string",
  "batch(B, 'x') is refused naming T")
tap.error_like(function() return ld:batch(2, 4, "sequentail") end, "mode must be \"random\" or \"sequential\"",
  "a misspelt batch mode is refused")
tap.error_like(function() return ld:eval_batches(2, 3) end, "eval_batches: count must be an integer >= 1, got nil",
  "eval_batches without a count is refused")

-- sequential batches: consecutive windows; y is x shifted by one
local x, y = ld:batch(3, 8, "sequential")
tap.is_deeply(x:shape(), { 3, 8 }, "a batch is (B, T)")
tap.is(x.dtype, "i32", "of i32 ids")
tap.is_deeply(x:totable()[1], { 0, 1, 2, 3, 4, 5, 6, 7 }, "the first window starts at token 0")
tap.is_deeply(y:totable()[1], { 1, 2, 3, 4, 5, 6, 7, 8 }, "y is x shifted by one token")
tap.is_deeply(x:totable()[3], { 16, 17, 18, 19, 20, 21, 22, 23 }, "windows follow each other")
for _ = 1, 3 do ld:batch(3, 8, "sequential") end -- tokens 24..95
local x2 = ld:batch(1, 8, "sequential")
tap.is(x2:totable()[1][1], 0, "sequential windows wrap to the start at the end of the file")

-- random batches stay inside the file and keep the shift
math.randomseed(3)
local rx, ry = ld:batch(16, 20)
local okshift, inside = true, true
for b, row in ipairs(rx:totable()) do
  local yr = ry:totable()[b]
  for t = 1, 20 do
    if yr[t] ~= row[t] + 1 then okshift = false end
    if row[t] < 0 or yr[t] > 99 then inside = false end
  end
end
tap.ok(okshift and inside, "random windows: inside the file, y = x + 1 on this counting file")

-- errors name the file and the problem
local function fails(path, pattern, what, opts)
  local err = tap.error_like(function() data.open(path, opts) end, pattern, what)
  if err then tap.ok(err:find(path, 1, true) ~= nil, what .. ": the message names the file") end
end

fails(tmp("missing.bin"), "cannot open token file", "a missing file")
local short = tmp("short.bin")
write_raw(short, string.rep("\0", 100))
fails(short, "truncated token file: 100 bytes, shorter than the 1024%-byte llm.c header", "a file shorter than its header")
local magic = tmp("magic.bin")
write_raw(magic, header(12345, 1, 4) .. u16s { 1, 2, 3, 4 })
fails(magic, "bad magic 12345 .*expected 20240520", "a bad magic")
fails(magic, "bad magic 12345 in the header %(expected 20240520; its version 1 and token count 4 are an llm%.c header's",
  "a bad magic with --vocab given (headerless allowed): the rest of the header shows a damaged file", { vocab = 65535 })
local near = tmp("near.bin")
write_raw(near, header(20240521, 1, 4) .. u16s { 1, 2, 3, 4 })
fails(near, "bad magic 20240521", "a magic one off the llm.c one, with vocab given, is not read as tokens", { vocab = 65535 })
local version = tmp("version.bin")
write_raw(version, header(20240520, 2, 4) .. u16s { 1, 2, 3, 4 })
fails(version, "unsupported version 2", "a bad version")
local trunc = tmp("trunc.bin")
write_raw(trunc, header(20240520, 1, 10) .. u16s { 1, 2, 3, 4 })
fails(trunc, "truncated token file: the header says 10 tokens but the file holds 4", "tokens missing at the end")
local big = tmp("big.bin")
data.write(big, { 5, 7, 65535, 3 })
fails(big, "token id 65535 at position 2 is >= the vocabulary size 50257", "an id >= vocab", { vocab = 50257 })
tap.lives_ok(function() data.open(big) end, "without a vocabulary any uint16 id is accepted")
fails(good, "the vocabulary size must be a positive integer, got 0", "a vocabulary of 0", { vocab = 0 })
fails(good, "the vocabulary size must be a positive integer, got %-5", "a negative vocabulary", { vocab = -5 })
fails(good, "the vocabulary size must be a positive integer, got 1%.5", "a fractional vocabulary", { vocab = 1.5 })
local odd = tmp("odd.bin")
write_raw(odd, u16s { 1, 2, 3 } .. "\1")
fails(odd, "7 bytes: not a headerless uint16 token file %(odd size%)", "a headerless file of odd size", { vocab = 10 })
local one = tmp("one.bin")
write_raw(one, u16s { 1 })
fails(one, "1 tokens, need at least 2", "a headerless file of one token", { vocab = 10 })
local neg = tmp("neg.bin")
write_raw(neg, header(20240520, 1, -3) .. u16s { 1, 2 })
fails(neg, "negative token count %-3 in the header", "a negative token count")
local nomagic = tmp("nomagic.bin") -- no magic, and the rest is no llm.c header either
write_raw(nomagic, header(12345, 9, 4) .. u16s { 1, 2, 3, 4 })
local headerless = data.open(nomagic, { vocab = 65536 })
tap.is_deeply({ headerless:size(), headerless.headerless }, { (1024 + 8) // 2, true },
  "with a vocabulary a file without the magic reads as headerless tokens, all of its bytes")
tap.error_like(function() ld:batch(1, 100) end, "too few for windows of 100", "windows longer than the file are refused")
tap.error_like(function() data.write(tmp("bad.bin"), { 1, 70000 }) end, "token 2 is 70000, expected an integer in 0%.%.65535",
  "write refuses ids beyond uint16")

-- the decoding under the loader: windows out of the file name the window; u16_scan
local ops = require("tegraph.core").ops
local bytes = u16s { 10, 20, 30, 40, 50 }
local wx, wy = ops.token_windows(bytes, 0, { 0, 2 }, 2, "cpu")
tap.is_deeply({ wx:totable(), wy:totable() }, { { { 10, 20 }, { 30, 40 } }, { { 20, 30 }, { 40, 50 } } },
  "token_windows decodes little-endian uint16 windows and their shift")
tap.error_like(function() ops.token_windows(bytes, 0, { 0, 3 }, 2, "cpu") end,
  "window 2 starts at 3; it needs tokens up to 6 but there are 5", "a window past the last token is named")
tap.error_like(function() ops.token_windows(bytes, 0, { 0.5 }, 2, "cpu") end, "window 1: its start is not an integer",
  "a start that is not an integer is named")
tap.error_like(function() ops.u16_scan(bytes, 2, 5) end, "token bytes %[2, 12%) outside the 10 bytes given",
  "u16_scan refuses a span past the bytes")
local mx, at = ops.u16_scan(u16s { 7, 300, 2, 300 }, 0, 4)
tap.is_deeply({ mx, at }, { 300, 1 }, "u16_scan: the largest id and its first position")

for _, p in ipairs(files) do os.remove(p) end
tap.done_testing()
