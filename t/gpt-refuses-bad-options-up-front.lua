-- gpt-refuses-bad-options-up-front.lua — examples/gpt.lua refuses counts and sizes out of range before building
-- anything (exit 2, naming the option, with the usage), and --max-skips is a bounded count.
local tap = require "tap"

local ex = require "run_example"
local function run(args) return ex.run_cpu("gpt.lua", args) end

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
ex.cleanup()
tap.done_testing()
