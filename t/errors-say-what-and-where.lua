-- errors-say-what-and-where.lua — errors that name the thing: a token "file" that is a directory names the
-- path; a FIFO given to tg.load, safetensors.open, data.open, the llm.c and tokenizer readers is refused as not a
-- regular file instead of waited on; an allocation that fails names the tensor's shape, dtype, bytes and device at the caller's line;
-- arange of a huge count needs no host scratch of its size.
local tap = require "tap"
local tg = require "tegraph"

local file = debug.getinfo(1, "S").short_src
local function here() return debug.getinfo(2, "l").currentline end
local function at(line) return "^" .. file:gsub("%p", "%%%0") .. ":" .. line .. ": " end

-- data.open on a directory
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir " .. dir))
local line
local ok, err = pcall(function() line = here(); return tg.data.open(dir) end)
os.execute("rmdir " .. dir)
tap.ok(not ok, "data.open of a directory fails")
tap.like(tostring(err), at(line) .. dir:gsub("%p", "%%%0") .. ": cannot read token file: .*[Dd]irectory",
  "and names the path, the reason, and the caller's line")

-- readers given a FIFO (a named pipe with no writer): refused as not a regular file, naming the path, instead of waiting
-- forever for a writer. Each FIFO gets a writer 4 s later, so a reader that does wait fails the test (too slow)
-- rather than hanging it.
local fifo_dir = os.tmpname()
os.remove(fifo_dir)
assert(os.execute("mkdir " .. fifo_dir))
local function fifo(name)
  local path = fifo_dir .. "/" .. name
  assert(os.execute("mkfifo " .. path), "mkfifo")
  os.execute("timeout 6 sh -c 'sleep 4; exec 3>" .. path .. "' </dev/null >/dev/null 2>&1 &")
  return path
end
local function refuses(what, path, fn, where)
  local t0 = os.time()
  local ok2, err2 = pcall(fn, path)
  tap.ok(not ok2 and os.time() - t0 < 3, what .. " of a FIFO fails at once")
  tap.like(tostring(err2), (where or "") .. path:gsub("%p", "%%%0") .. ": not a regular file %(a FIFO%)",
    "... naming the path and what it is")
end
refuses("tg.load", fifo("model.safetensors"), tg.load)
refuses("tg.safetensors.open", fifo("open.safetensors"), tg.safetensors.open)
refuses("data.open", fifo("tokens.bin"), tg.data.open, "cannot open token file: ")
refuses("gpt2.read_llmc_header", fifo("model.bin"), require("tegraph.gpt2").read_llmc_header, "cannot open: ")
do -- a GPT-2 tokenizer directory whose vocab.json is a FIFO
  local tdir = fifo_dir .. "/tok"
  assert(os.execute("mkdir " .. tdir))
  local m = assert(io.open(tdir .. "/merges.txt", "w"))
  m:write("#version: 0.2\na b\n")
  m:close()
  refuses("tokenizer.gpt2", fifo("tok/vocab.json"), function() return tg.tokenizer.gpt2(tdir) end)
end
tap.is(select(2, tg.fs.open_read(fifo("plain"))), fifo_dir .. "/plain: not a regular file (a FIFO)",
  "fs.open_read, the library's reader, returns nil and why for a FIFO (as io.open does for a missing file)")
tap.error_like(function() return tg.fs.open_read("a\0b") end, "the path \"a\\0...\" holds a NUL byte at byte 1",
  "fs.open_read refuses a path with a NUL byte (not open the part before it)")
os.execute("rm -rf " .. fifo_dir)

-- allocations that cannot be had
ok, err = pcall(function() line = here(); return tg.arange(2 ^ 46, { device = "cpu" }) end)
tap.ok(not ok, "arange(2^46) on the CPU fails (256 TiB of f32: more than any address space, whatever the overcommit policy)")
tap.like(tostring(err), at(line) .. "tensor %[70368744177664%] f32 %(281474976710656 bytes%) on cpu: ",
  "its error names the shape, dtype, bytes and device at the caller's line")
tap.like(tostring(err), "out of host memory allocating 281474976710656 bytes %(262144%.0 GiB%)", "and the cause")
ok, err = pcall(function() line = here(); return tg.zeros({ 16777216, 8388608 }, { dtype = "bf16", device = "cpu" }) end)
tap.like(tostring(err), at(line) .. "tensor %[16777216,8388608%] bf16 %(281474976710656 bytes%) on cpu: ",
  "zeros of 256 TiB names its shape and size too")
ok, err = pcall(function() line = here(); return tg.empty({ 2 ^ 46 }, { dtype = "i32", device = "cpu" }) end)
tap.like(tostring(err), at(line) .. "tensor %[70368744177664%] i32 %(281474976710656 bytes%) on cpu: ",
  "and so does empty")

-- arange still fills large tensors right (a block at a time)
local n = 200003
local a = tg.arange(n)
tap.is(a:numel(), n, "arange(200003) has 200003 elements")
local v = a:totable()
local right = true
for i = 1, n do
  if v[i] ~= i - 1 then right = false; break end
end
tap.ok(right, "arange(200003) holds 0 .. 200002, across its blocks")
local ai = tg.arange(70000, { dtype = "i32" })
tap.is(ai:narrow(70000, 1):item(), 69999, "i32 arange: the last element is n - 1")

-- the runtime's text-only load and loadfile name themselves and the caller's line, as Lua's own do
local lok, lerr = pcall(function() return load({}) end)
tap.ok(not lok and lerr:find("errors%-say%-what%-and%-where%.lua:%d+: bad argument #1 to 'load' %(function expected, got table%)"),
  "load({}) names load and the caller's line: " .. tostring(lerr))
local fok, ferr = pcall(function() return loadfile({}) end)
tap.ok(not fok and ferr:find(":%d+: bad argument #1 to 'loadfile' %(string expected, got table%)"),
  "loadfile({}) names loadfile: " .. tostring(ferr))
tap.is(load("return 6 * 7")(), 42, "load of Lua source still runs")

tap.done_testing()
