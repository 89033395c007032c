-- gpt-max-skips-stops-a-run-of-skipped-steps.lua — with --on-nan skip, every step skipped for a non-finite loss or
-- gradient norm is counted in the progress line, and --max-skips N stops the run after N in a row (exit non-zero,
-- naming the step); --max-skips 0 never stops.
local tap = require "tap"

local ex = require "run_example"
local function run(args) return ex.run_cpu("gpt.lua", args) end

-- --lr 1e30 without clipping: the first update blows the weights up, every later step is non-finite
local BAD = "--width 16 --layers 1 --heads 2 --batch 4 --steps 8 --samples 0 --eval 0 --lr 1e30 --warmup 0 --clip 0 " ..
  "--every 1 --on-nan skip"
local c, so, se = run(BAD .. " --max-skips 3")
tap.ok(c ~= 0, "three skipped steps in a row with --max-skips 3: the run fails (status " .. tostring(c) .. ")")
tap.like(se, "step 4: 3 steps in a row skipped: the loss or gradient norm is not finite", "... at step 4, saying why")
tap.like(so, "skipped 2", "the progress line counts the skipped steps")
tap.ok(not so:find("step 5/8", 1, true), "... and no step ran after the stop")
c, so = run(BAD .. " --max-skips 0")
tap.is(c, 0, "--max-skips 0: the skipped steps never stop the run")
tap.like(so, "step 8/8 .*skipped 7", "... and all 7 are counted")
ex.cleanup()
tap.done_testing()
