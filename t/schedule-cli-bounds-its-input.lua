-- schedule-cli-bounds-its-input.lua — `tegraph schedule` refuses inputs that would run for minutes or take gigabytes
-- (stages, chunks, microbatches and their product are bounded), -v where the schedule has a fixed chunk count, and
-- negative or non-finite costs (which made the makespan 0); the library's simulate refuses such costs too; the
-- worklist simulation and timeline give the results the formulas predict at sizes the old sweeps took minutes for.
local S = require "tegraph.schedule"
local tap = require "tap"

local function run_cli(args)
  local out, err = {}, {}
  local real_out, real_err = io.stdout, io.stderr
  io.stdout = { write = function(self, ...) for _, v in ipairs({ ... }) do out[#out + 1] = tostring(v) end return self end }
  io.stderr = { write = function(self, ...) for _, v in ipairs({ ... }) do err[#err + 1] = tostring(v) end return self end }
  local okc, status = pcall(S.cli, table.unpack(args))
  io.stdout, io.stderr = real_out, real_err
  if not okc then error(status) end
  return status, table.concat(out), table.concat(err)
end

local status, _, err = run_cli { "1f1b", "-p", "100000", "-m", "8" }
tap.is(status, 2, "-p 100000: a usage error")
tap.like(err, "^tegraph schedule: %-%-stages 100000 is too large %(at most 1024%)", "... naming the bound")
status, _, err = run_cli { "interleaved", "-p", "4", "-m", "8", "-v", "100000" }
tap.is(status, 2, "-v 100000: a usage error")
tap.like(err, "%-%-chunks 100000 is too large %(at most 64%)", "... naming the bound")
status, _, err = run_cli { "gpipe", "-p", "1000", "-m", "1000" }
tap.is(status, 2, "P x M past the bound: a usage error")
tap.like(err, "1000 stages x 2 chunks x 1000 microbatches is too large %(at most 65536 microbatch%-chunks%)", "... naming the product")
status, _, err = run_cli { "zb_v", "-p", "4", "-m", "8", "-v", "3" }
tap.is(status, 2, "zb_v -v 3: a usage error, not ignored")
tap.like(err, "zb_v has 2 chunks per stage; %-v 3 does not apply", "... saying zb_v has 2 chunks")
status, _, err = run_cli { "1f1b", "-p", "4", "-m", "8", "-v", "2" }
tap.like(err, "1f1b has 1 chunk per stage; %-v 2 does not apply", "1f1b -v 2 is refused too")
status = run_cli { "zb_v", "-p", "4", "-m", "8", "-v", "2" }
tap.is(status, 0, "zb_v -v 2 (its own count) is accepted")
status, _, err = run_cli { "1f1b", "-p", "4", "-m", "8", "--costs", "F=-1,B=1" }
tap.is(status, 2, "a negative cost: a usage error")
tap.like(err, "%-%-costs F=%-1: a cost must be a finite number >= 0", "... naming the entry")
status, _, err = run_cli { "1f1b", "-p", "4", "-m", "8", "--costs", "W=1e999" }
tap.like(err, "%-%-costs W=1e999: a cost must be a finite number >= 0", "an infinite cost is refused")
status, _, err = run_cli { "1f1b", "-p", "4", "-m", "8", "--costs", "F=1,X=2" }
tap.like(err, "bad %-%-costs entry X=2", "an unknown cost name is refused")
tap.error_like(function() S.simulate(S.one_f_one_b { stages = 2, microbatches = 2 }, { F = -1 }) end,
  "schedule: cost F must be a finite number >= 0 %(got %-1%)", "simulate refuses a negative cost")

-- the worklists: the results of large plans still match the formulas (1F1B bubble (P-1)/(M+P-1) with F=B=W=1 fused)
local P, M = 128, 64
local r = S.simulate(S.one_f_one_b { stages = P, microbatches = M })
tap.near(r.bubble, (P - 1) / (M + P - 1), 1e-12, "1F1B at P = 128, M = 64: the bubble is (P-1)/(M+P-1)")
local z = S.simulate(S.zb_v { stages = 32, microbatches = 64 })
tap.is(z.gaps[1], 0, "ZB-V at P = 32: no idle time inside the first stage's span")
local b = S.simulate(S.one_f_one_b { stages = 8, microbatches = 16 }, { sends = "blocking" })
tap.near(b.bubble, 7 / 23, 1e-12, "blocking sends: the same bubble")
tap.done_testing()
