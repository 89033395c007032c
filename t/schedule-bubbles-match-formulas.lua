-- schedule-bubbles-match-formulas.lua — simulated bubbles match the published formulas: 1F1B and
-- GPipe (P-1)/(M+P-1) with W fused, interleaved (P-1)/(VM+P-1), ZB-H1 a third of 1F1B's idle time,
-- ZB-V no idle inside any stage's span; peak activations as designed.
local tap = require "tap"
local S = require "tegraph.schedule"

local EPS = 1e-12

for _, pm in ipairs({ { 2, 4 }, { 4, 8 }, { 4, 3 }, { 8, 16 }, { 3, 1 } }) do
  local P, Mb = pm[1], pm[2]
  local want = (P - 1) / (Mb + P - 1)
  local r = S.simulate(S.one_f_one_b { stages = P, microbatches = Mb })
  tap.near(r.bubble, want, EPS, string.format("1f1b P=%d M=%d: bubble (P-1)/(M+P-1) = %.4f", P, Mb, want))
  tap.is(r.makespan, 3 * (Mb + P - 1), string.format("1f1b P=%d M=%d: makespan 3(M+P-1) with B fused to B+W", P, Mb))
  local ok = true
  for s = 1, P do
    if r.peak[s] ~= math.min(P - s + 1, Mb) then ok = false end
  end
  tap.ok(ok and r.peak_max <= P, string.format("1f1b P=%d M=%d: stage s holds min(P-s+1, M) <= P activations", P, Mb))
  local g = S.simulate(S.gpipe { stages = P, microbatches = Mb })
  tap.near(g.bubble, want, EPS, string.format("gpipe P=%d M=%d: bubble (P-1)/(M+P-1)", P, Mb))
  tap.is(g.peak_max, Mb, string.format("gpipe P=%d M=%d: all M activations alive at the peak", P, Mb))
end

-- The formula holds for any F and fused B+W cost.
local r = S.simulate(S.one_f_one_b { stages = 4, microbatches = 8 }, { F = 1, B = 2, W = 1.5 })
tap.near(r.bubble, 3 / 11, EPS, "1f1b with F=1 B=2 W=1.5: bubble still (P-1)/(M+P-1)")
tap.near(r.makespan, 4.5 * 11, EPS, "1f1b with F=1 B=2 W=1.5: makespan (F+B+W)(M+P-1)")

for _, pmv in ipairs({ { 4, 8, 2 }, { 4, 16, 2 }, { 2, 4, 3 }, { 4, 4, 2 }, { 8, 16, 2 } }) do
  local P, Mb, V = pmv[1], pmv[2], pmv[3]
  local ri = S.simulate(S.interleaved { stages = P, microbatches = Mb, chunks_per_stage = V })
  local want = (P - 1) / (V * Mb + P - 1)
  tap.near(ri.bubble, want, EPS, string.format("interleaved P=%d M=%d V=%d: bubble (P-1)/(VM+P-1) = %.4f", P, Mb, V, want))
end

for _, pm in ipairs({ { 2, 4 }, { 4, 8 }, { 4, 4 }, { 6, 12 }, { 8, 16 } }) do
  local P, Mb = pm[1], pm[2]
  local one = S.simulate(S.one_f_one_b { stages = P, microbatches = Mb })
  local zb = S.simulate(S.zb_h1 { stages = P, microbatches = Mb })
  local idle1, idlez = 0, 0
  for s = 1, P do idle1, idlez = idle1 + one.idle[s], idlez + zb.idle[s] end
  tap.near(idlez, idle1 / 3, EPS, string.format("zb_h1 P=%d M=%d: idle time a third of 1F1B's (%g vs %g)", P, Mb, idlez, idle1))
  tap.near(zb.bubble, (P - 1) / (3 * Mb + P - 1), EPS, string.format("zb_h1 P=%d M=%d: bubble (P-1)/(3M+P-1)", P, Mb))
  tap.is(zb.peak_max, one.peak_max, string.format("zb_h1 P=%d M=%d: same peak activations as 1F1B (%d)", P, Mb, one.peak_max))
end

for _, pm in ipairs({ { 2, 4 }, { 4, 8 }, { 4, 13 }, { 8, 16 } }) do
  local P, Mb = pm[1], pm[2]
  local z = S.simulate(S.zb_v { stages = P, microbatches = Mb })
  local gaps = 0
  for s = 1, P do gaps = gaps + z.gaps[s] end
  tap.is(gaps, 0, string.format("zb_v P=%d M=%d: no stage idles between its first and last action", P, Mb))
  -- The only idle time left is the P-1 chunk-forwards the first microbatch needs to reach the last stage.
  tap.near(z.bubble, (P - 1) / (6 * Mb + P - 1), EPS,
    string.format("zb_v P=%d M=%d: bubble (P-1)/(6M+P-1) = %.4f, the startup lower bound", P, Mb, (P - 1) / (6 * Mb + P - 1)))
  tap.ok(z.peak_max <= 2 * P, string.format("zb_v P=%d M=%d: at most 2P half-size chunk activations (P stages' worth)", P, Mb))
  local h1 = S.simulate(S.zb_h1 { stages = P, microbatches = Mb })
  tap.ok(z.bubble < h1.bubble, string.format("zb_v P=%d M=%d: smaller bubble than zb_h1", P, Mb))
end

-- Unequal costs move ZB-V off zero: the simulation honours per-op costs.
local zu = S.simulate(S.zb_v { stages = 4, microbatches = 8 }, { F = 1, B = 2, W = 0.5 })
tap.ok(zu.bubble > (3 / 51), "zb_v with F=1 B=2 W=0.5: bubble grows over the equal-cost bound")

-- Communication costs delay receivers: one microbatch through two stages crosses twice.
local c0 = S.simulate(S.gpipe { stages = 2, microbatches = 1 })
local c1 = S.simulate(S.gpipe { stages = 2, microbatches = 1 }, { comm = 0.25 })
tap.near(c1.makespan - c0.makespan, 2 * 0.25, EPS, "gpipe P=2 M=1 with comm=0.25: makespan grows by two transfers")
local o0 = S.simulate(S.one_f_one_b { stages = 4, microbatches = 8 })
local o1 = S.simulate(S.one_f_one_b { stages = 4, microbatches = 8 }, { comm = 0.25 })
tap.ok(o1.makespan > o0.makespan and o1.busy[1] == o0.busy[1], "1f1b with comm=0.25: longer, same busy time")

-- A cost function per action.
local cf = S.simulate(S.gpipe { stages = 2, microbatches = 2 }, function(a, s)
  if a.op == "F" then return s end
  if a.op == "B" then return 2 * s end
  return 0
end)
tap.is(cf.busy[2], 2 * 2 + 2 * 4, "a cost function sets per-stage costs (stage 2: 2F of 2 + 2B of 4)")

-- Blocking sends only slow things down.
local blk = S.simulate(S.one_f_one_b { stages = 4, microbatches = 8 }, { sends = "blocking" })
tap.ok(blk.makespan >= o0.makespan, "blocking sends never beat buffered ones")

tap.done_testing()
