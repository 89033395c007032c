-- gpt-refuses-bad-options-up-front.lua — examples/gpt.lua refuses counts and sizes out of range before building
-- anything (exit 2, naming the option, with the usage), and --max-skips is a bounded count.
local tap = require "tap"

local top_src = os.getenv("TG_TOP_SRCDIR") or "."
local top_build = os.getenv("TG_TOP_BUILDDIR") or "."
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local errfile = os.tmpname()
local function run(args)
  local cmd = q(top_build .. "/tegraph") .. " --device cpu run " .. q(top_src .. "/examples/gpt.lua") .. " " .. args ..
    " 2>" .. q(errfile)
  local p = assert(io.popen(cmd, "r"))
  local so = p:read("a")
  local _, _, c = p:close()
  local f = io.open(errfile, "r")
  local se = f and f:read("a") or ""
  if f then f:close() end
  return c, so, se
end

for _, case in ipairs {
  { "--layers -1", "%-%-layers must be at least 1 %(got '%-1'%)" },
  { "--digits 0", "%-%-digits must be at least 1 %(got '0'%)" },
  { "--steps -1", "%-%-steps must be at least 1 %(got '%-1'%)" },
  { "--batch 0", "%-%-batch must be at least 1 %(got '0'%)" },
  { "--heads=0", "%-%-heads must be at least 1" },
  { "--microbatches 0", "%-%-microbatches must be at least 1" },
  { "--lr -0.1", "%-%-lr must be at least 0" },
  { "--max-skips -2", "%-%-max%-skips must be at least 0" },
} do
  local c, so, se = run(case[1])
  tap.is(c, 2, "gpt.lua " .. case[1] .. " exits 2")
  tap.like(se, "^gpt%.lua: " .. case[2] .. "[^\n]*\nusage: tegraph run examples/gpt%.lua", "... naming the option, with the usage")
  tap.is(so, "", "... before anything ran")
end
os.remove(errfile)
tap.done_testing()
