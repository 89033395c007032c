-- gpt-refuses-bad-options-up-front.lua — examples/gpt.lua refuses counts and sizes out of range before building
-- anything (exit 2, naming the option, with the usage), and --max-skips is a bounded count; so are values and
-- combinations of options checked after the parse (--hooks, --eps, --beta1/2, --pipeline against the ranks,
-- --layers-per-chunk against the layers, --trace-steps, options that exclude each other).
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
  -- values and combinations checked after the parse: the same usage error, not a traceback after the setup
  { "--hooks x", "%-%-hooks must be reduce or noop %(got 'x'%)" },
  { "--eps 0", "%-%-eps must be > 0 %(got 0%)" },
  { "--beta1 1", "%-%-beta1 must be in %[0, 1%) %(got 1%)" },
  { "--beta2 -0.5", "%-%-beta2 must be in %[0, 1%)" },
  { "--pipeline 3", "%-%-pipeline 3 does not divide the 1 ranks" },
  { "--layers-per-chunk 3 --graph", "train: %-%-layers%-per%-chunk 3 does not divide the 2 layers" },
  { "--trace-steps 0:1 --trace t.json", "%-%-trace%-steps must be a:b with 1 <= a <= b %(got '0:1'%)" },
  { "--trace-steps 2:3", "%-%-trace%-steps goes with %-%-trace FILE" },
  { "--graph full --zero1", "train: graph = \"full\" with zero1 is not supported" },
  { "--text a.txt --data b.bin", "%-%-text and %-%-data exclude each other" },
  { "--tokenizer gpt2", "%-%-tokenizer goes with %-%-text" },
  { "--val v.bin", "%-%-val/%-%-val%-split need %-%-text or %-%-data" },
} do
  local c, so, se = run(case[1])
  tap.is(c, 2, "gpt.lua " .. case[1] .. " exits 2")
  tap.like(se, "^gpt%.lua: " .. case[2] .. "[^\n]*\nusage: tegraph run examples/gpt%.lua", "... naming the option, with the usage")
  tap.is(so, "", "... before anything ran")
end
ex.cleanup()
tap.done_testing()
