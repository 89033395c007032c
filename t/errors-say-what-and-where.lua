-- errors-say-what-and-where.lua — errors that name the thing: a token "file" that is a directory names the
-- path; an allocation that fails names the tensor's shape, dtype, bytes and device at the caller's line;
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

tap.done_testing()
