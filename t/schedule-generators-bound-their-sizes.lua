-- schedule-generators-bound-their-sizes.lua — every schedule generator of the Lua library applies the bounds the
-- `tegraph schedule` command line has (P <= 1024, M <= 65536, V <= 64, P x max(V, 2) x M <= 65536) instead of
-- running for minutes; non-integer and non-finite sizes (1/0, 1e300, strings) and unknown keys are refused by name;
-- and the public functions that take a plan refuse what is not one, at the caller's line.
local tap = require "tap"
local caller = require "caller"
local at, refused = caller.at, caller.refused
local S = require "tegraph.schedule"

local gens = {
  { "gpipe", S.gpipe }, { "one_f_one_b", S.one_f_one_b }, { "interleaved", S.interleaved }, { "zb_h1", S.zb_h1 },
  { "zb_v", S.zb_v },
}
for _, g in ipairs(gens) do
  local name, gen = g[1], g[2]
  local t0 = os.clock()
  refused(function() gen { stages = 100000, microbatches = 100000 } end,
    "schedule: stages 100000 is too large %(at most 1024%)", name .. " with 100000 stages")
  tap.ok(os.clock() - t0 < 5, "... at once")
  refused(function() gen { stages = 4, microbatches = 100000 } end,
    "schedule: microbatches 100000 is too large %(at most 65536%)", name .. " with 100000 microbatches")
  refused(function() gen { stages = 1000, microbatches = 1000 } end,
    "schedule%." .. name .. ": 1000 stages x 2 chunks x 1000 microbatches is too large %(at most 65536 " ..
    "microbatch%-chunks%)", name .. " with P x M past the bound")
  refused(function() gen { stages = 1 / 0, microbatches = 4 } end, "schedule: stages must be an integer, got inf",
    name .. " with stages = 1/0")
  refused(function() gen { stages = 2, microbatches = 1e300 } end,
    "schedule: microbatches must be an integer, got 1e%+300", name .. " with microbatches = 1e300")
  refused(function() gen { stages = 0 / 0, microbatches = 4 } end, "schedule: stages must be an integer, got %-?nan",
    name .. " with stages = NaN")
  refused(function() gen { stages = "2", microbatches = 4 } end, "schedule: stages must be an integer, got string 2",
    name .. " with stages = \"2\"")
  refused(function() gen { stages = 2, microbatches = 4, microbatchs = 8 } end,
    "schedule%." .. name .. ": unknown option 'microbatchs' %(known: chunks, chunks_per_stage, costs, microbatches, stages%)",
    name .. " with a misspelt key")
end
refused(function() S.interleaved { stages = 2, microbatches = 4, chunks_per_stage = 100 } end,
  "schedule: chunks_per_stage 100 is too large %(at most 64%)", "interleaved with 100 chunks per stage")
refused(function() S.interleaved { stages = 64, microbatches = 64, chunks_per_stage = 32 } end,
  "64 stages x 32 chunks x 64 microbatches is too large", "interleaved: the product counts the chunks")
refused(function() S.one_f_one_b { stages = 2, microbatches = 4, chunks_per_stage = 2 } end,
  "schedule%.one_f_one_b: has 1 chunk per stage; chunks_per_stage = 2 does not apply", "1f1b with 2 chunks per stage")
refused(function() S.zb_v { stages = 2, microbatches = 4, chunks = 3 } end,
  "schedule%.zb_v: has 2 chunks per stage; chunks_per_stage = 3 does not apply", "zb_v with 3 chunks per stage")
tap.ok(S.zb_v { stages = 2, microbatches = 4, chunks_per_stage = 2 }, "zb_v with its own count is accepted")
tap.ok(S.one_f_one_b { stages = 1024, microbatches = 32 }, "1f1b at the bounds (1024 x 2 x 32) is built")
tap.ok(S.validate(S.gpipe { stages = 4, microbatches = 8 }), "a plan inside the bounds validates")

-- the functions taking a plan
refused(function() S.execute(nil, {}) end,
  "schedule%.execute: plan must be a table %(a schedule generator's result%), got nil", "execute(nil)")
local plan = S.one_f_one_b { stages = 2, microbatches = 2 }
refused(function() S.execute(plan, { chunkz = {} }) end, "schedule%.execute: unknown option 'chunkz' %(known: chunks, ",
  "execute with a misspelt option")
refused(function() S.execute(plan, 5) end, "schedule%.execute: opts must be a table, got number", "execute with opts = 5")
refused(function() S.make_graphed(nil, {}) end, "schedule%.make_graphed: plan must be a table", "make_graphed(nil)")
refused(function() S.make_graphed(plan, 7) end, "schedule%.make_graphed: chunks must be a list of modules",
  "make_graphed with chunks = 7")
refused(function() S.exec_order({ stages = "x" }) end, "schedule%.exec_order: plan%.stages must be a positive integer, got x",
  "exec_order of a table that is no plan")
refused(function() S.measure(nil, {}) end, "schedule%.measure: plan must be a table", "measure(nil)")
refused(function() S.measure(plan, {}, { pdi = 0 }) end, "schedule%.measure: unknown option 'pdi' %(known: pid%)",
  "measure with a misspelt option")
refused(function() S.table(nil) end, "schedule%.table: plan must be a table", "table(nil)")
refused(function() S.add_comm({ stages = 2, microbatches = 2 }) end,
  "schedule%.add_comm: plan%[1%] %(stage 1's actions%) must be a table", "add_comm of a plan without stage lists")
refused(function() S.describe(nil) end, "schedule%.describe: an action must be a table, got nil", "describe(nil)")

tap.done_testing()
