-- dist/fp8-amax-reduce.lua — tg.fp8.amax_reduce on 2 ranks: with delayed scaling each rank records the amaxes of its
-- own data; the policy all-reduces (max) the step's amaxes before the next step's first forward, so every rank's
-- scale update gives the same scales — fp8_max over the largest amax of any rank. Without it the ranks' scales
-- differ (their data do).
local tg = require "tegraph"
local t = require "dist_tap"

local n, r = t.size, t.rank
local D, TOK, M, STEPS = 8, 6, 2, 3
local recipe = tg.fp8.DelayedScaling{ amax_history_len = 4 }
local function f32(x) return (string.unpack("f", string.pack("f", x))) end

local function build()
  tg.manual_seed(11)
  return tg.nn.Sequential{
    tg.nn.Linear(D, 2 * D, { name = "fc1", fp8 = recipe }),
    tg.nn.LayerNormLinear(2 * D, D, { name = "fc2", fp8 = recipe }),
    name = "net" }
end

-- rank r's data: scaled by r + 1, so the ranks' amaxes differ
tg.manual_seed(100 + r)
local xs, dys = {}, {}
for s = 1, STEPS do
  xs[s], dys[s] = {}, {}
  for m = 1, M do
    xs[s][m] = tg.randn({ TOK, D }, { std = r + 1 })
    dys[s][m] = tg.randn({ TOK, D }, { std = 1 / (r + 1) })
  end
end

local function run(reduced)
  local net = build()
  local amax = reduced and tg.fp8.amax_reduce{ model = net, comm = t.comm } or nil
  local xmax = {}
  for s = 1, STEPS do
    tg.step_begin{ microbatches = M }
    local m1 = 0
    for m = 1, M do
      net:forward(xs[s][m], m)
      m1 = math.max(m1, xs[s][m]:max_abs())
    end
    for m = 1, M do net:backward(dys[s][m], m) end
    tg.step_end()
    xmax[s] = m1
    if amax then amax:reduce() end
  end
  -- one more forward: its update uses the last step's (reduced or local) amaxes
  tg.step_begin{ microbatches = 1 }
  net:forward(xs[1][1], 1)
  net:backward(dys[1][1], 1)
  tg.step_end()
  return net, xmax
end

-- whether tensor v holds the same values on every rank
local function same_on_ranks(v)
  local hi, lo = v:clone(), v:clone()
  t.comm:all_reduce(hi, { op = "max" })
  t.comm:all_reduce(lo, { op = "min" })
  return hi:max_abs_diff(lo) == 0
end

local net, xmax = run(true)
local states = net:fp8_state()
t.ok(#states == 2, "both Linears hold an FP8 state")
local all_same = true
for _, s in ipairs(states) do
  -- row 0 holds the last forward's own amaxes (not reduced yet); the rolled rows hold the reduced ones
  all_same = all_same and same_on_ranks(s.scale) and same_on_ranks(s.scale_inv) and same_on_ranks(s.amax_history:narrow(2, 3))
end
t.ok(all_same, "with the amax reduce every rank has the same scales, scale_invs and past amaxes")
-- fc1's input scale: 448 / the largest |x| of any rank over the last history window (4 rows hold steps 1..3)
local g = tg.tensor({ math.max(xmax[1], xmax[2], xmax[3]) })
t.comm:all_reduce(g, { op = "max" })
local want = f32(448 / f32(g:totable()[1]))
t.ok(states[1].scale:totable()[1] == want,
  string.format("fc1's input scale is 448 / the largest amax over ranks and steps (%.9g)", want))
t.ok(states[1].scale:totable()[1] ~= f32(448 / f32(math.max(xmax[1], xmax[2], xmax[3]))) or r == n - 1,
  "on the ranks with smaller data it is not their local scale")

local net2 = run(false)
local differ = false
for _, s in ipairs(net2:fp8_state()) do differ = differ or not same_on_ranks(s.scale) end
t.ok(differ, "without the reduce the ranks' scales differ")

t.done_testing()
