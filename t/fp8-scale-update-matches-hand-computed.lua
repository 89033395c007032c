-- fp8-scale-update-matches-hand-computed.lua — TransformerEngine's delayed-scaling update (tg.fp8.scale_update,
-- C tg_fp8_scale_update) against values computed by hand for a known amax sequence: the history rolls (row i
-- gets row i + 1, the last row the old row 0, row 0 becomes 0), amax is the column's maximum or its most recent
-- value, scale = (fp8_max / amax) / 2^margin, and the previous scale is kept when amax is 0, infinite or NaN;
-- an infinite scale becomes FLT_MAX. The update is device work: captured once and replayed it equals the eager
-- updates. Bad arguments and bad recipes fail naming what is wrong.
local tg = require "tegraph"
local t = require "tap"

local function f32(x) return (string.unpack("f", string.pack("f", x))) end
local FLT_MAX = f32(3.4028234663852886e38)
local INF, NAN = math.huge, 0 / 0

local function flat(tt)
  local o = {}
  local function walk(v) if type(v) == "table" then for _, x in ipairs(v) do walk(x) end else o[#o + 1] = v end end
  walk(tt)
  return o
end

local function same(got, want)
  if #got ~= #want then return false, string.format("%d values vs %d", #got, #want) end
  for i = 1, #got do
    local g, w = got[i], want[i]
    if not (g == w or (g ~= g and w ~= w)) then return false, string.format("[%d] = %.9g, expected %.9g", i, g, w) end
  end
  return true
end

local function check(label, tensor, want)
  local ok, why = same(flat(tensor:totable()), flat(want))
  t.ok(ok, label)
  if not ok then t.diag(why) end
end

-- ---------------------------------------------------------------- max over a history of 3 rows, three roles
do
  local MX = { 448, 448, 57344 } -- E4M3, E4M3, E5M2 (HYBRID: input, weight, grad_output)
  local h, s, si = tg.zeros({ 3, 3 }), tg.tensor({ 1, 1, 1 }), tg.tensor({ 1, 1, 1 })
  local function step(row0) h:narrow(1, 1):copy_(tg.tensor({ row0 })); tg.fp8.scale_update(h, s, si, MX, 0, "max") end

  step({ 2, 0, 4 })
  check("max: amax (2, 0, 4) gives scales 448/2, kept 1 (amax 0), 57344/4", s, { 224, 1, 14336 })
  check("max: scale_inv = 1 / scale", si, { f32(1 / 224), 1, f32(1 / 14336) })
  check("max: the history rolled: row 0 zeroed, the recorded amaxes in the last row", h, { { 0, 0, 0 }, { 0, 0, 0 }, { 2, 0, 4 } })

  step({ 7, 0.5, 1 })
  check("max: the column maxima (7, 0.5, 4) over the history give 64, 896, 14336", s, { 64, 896, 14336 })
  check("max: scale_inv after the second update", si, { f32(1 / 64), f32(1 / 896), f32(1 / 14336) })
  check("max: second roll", h, { { 0, 0, 0 }, { 2, 0, 4 }, { 7, 0.5, 1 } })

  step({ 1, 0, 2 })
  check("max: a smaller amax does not lower the window's maximum", s, { 64, 896, 14336 })
  check("max: third roll (the first amaxes are in row 1, the oldest kept)", h, { { 0, 0, 0 }, { 7, 0.5, 1 }, { 1, 0, 2 } })

  step({ 0, 0, 0 })
  check("max: the first amaxes left the window: grad_output's maximum is now 2 (57344/2)", s, { 64, 896, 28672 })
  check("max: fourth roll", h, { { 0, 0, 0 }, { 1, 0, 2 }, { 0, 0, 0 } })

  step({ INF, NAN, 0 })
  check("max: an infinite or NaN amax in the window keeps the scale", s, { 64, 896, 28672 })
  check("max: the infinite and NaN amaxes are kept in the history", h, { { 0, 0, 0 }, { 0, 0, 0 }, { INF, NAN, 0 } })

  step({ 0, 0, 0 })
  check("max: all-zero windows keep every scale", s, { 64, 896, 28672 })
end

-- ---------------------------------------------------------------- most_recent, margin 2, one role (1-D history)
do
  local h, s, si = tg.zeros({ 2, 1 }), tg.tensor({ 1 }), tg.tensor({ 1 })
  local function step(a) h:narrow(1, 1):fill_(a); tg.fp8.scale_update(h, s, si, 57344, 2, "most_recent") end
  step(8)
  check("most_recent + margin 2: 57344 / 8 / 4", s, { 1792 })
  step(0)
  check("most_recent: amax 0 keeps the scale although the older row holds 8", s, { 1792 })
  check("most_recent: the history still rolls", h, { { 0 }, { 0 } })
  step(1e-40) -- a subnormal amax: 57344 / 1e-40 overflows f32
  check("an amax so small that the scale overflows gives FLT_MAX", s, { FLT_MAX })
  check("and scale_inv = 1 / FLT_MAX", si, { f32(1 / FLT_MAX) })
  step(NAN)
  check("most_recent: a NaN amax keeps the scale", s, { FLT_MAX })
end

-- ---------------------------------------------------------------- max: a NaN beside finite amaxes wins the maximum
do
  local h, s, si = tg.zeros({ 2, 1 }), tg.tensor({ 1 }), tg.tensor({ 1 })
  local function step(a) h:narrow(1, 1):fill_(a); tg.fp8.scale_update(h, s, si, 448, 0, "max") end
  step(8)
  step(2)
  check("max: window (8, 2) gives 448 / 8", s, { 56 })
  step(NAN)
  check("max: window (2, NaN) keeps 56 (the NaN is not dropped for the 2 beside it)", s, { 56 })
  step(4)
  check("max: window (NaN, 4) still keeps 56", s, { 56 })
  step(4)
  check("max: once the NaN left the window, (4, 4) gives 448 / 4", s, { 112 })
end

-- ---------------------------------------------------------------- current scaling: a history of one
do
  local h, s, si = tg.zeros({ 1 }), tg.tensor({ 1 }), tg.tensor({ 1 })
  h:fill_(3)
  tg.fp8.scale_update(h, s, si, 448, 0, "most_recent")
  check("a history of one row: the scale from this amax, 448 / 3 rounded to f32", s, { f32(448 / 3) })
  check("the single row is zeroed", h, { 0 })
end

-- ---------------------------------------------------------------- captured: N replays equal N eager updates
do
  local MX = { 448, 57344 }
  local function run(captured)
    local h, s, si = tg.zeros({ 4, 2 }), tg.tensor({ 1, 1 }), tg.tensor({ 1, 1 })
    local amax = tg.zeros({ 2 })
    local row0 = h:narrow(1, 1):view({ 2 })
    local function body()
      row0:add_(amax) -- the step's "cast" records its amax (device work)
      tg.fp8.scale_update(h, s, si, MX, 1, "max")
    end
    local g = captured and tg.stream.capture(body) or nil
    local seen = {}
    for k, a in ipairs{ { 3, 5 }, { 0.25, 9 }, { 6, 0 }, { 1, 1 }, { 0.5, 2 }, { 0, 0 } } do
      amax:copy_(tg.tensor(a))
      if g then g:replay() else body() end
      seen[k] = { flat(s:totable()), flat(si:totable()), flat(h:totable()) }
    end
    return seen
  end
  local eager, replayed = run(false), run(true)
  local ok, why = true, nil
  for k = 1, #eager do
    for j = 1, 3 do
      local o, w = same(replayed[k][j], eager[k][j])
      if not o then ok, why = false, string.format("update %d, %s: %s", k, ({ "scale", "scale_inv", "history" })[j], w) end
    end
  end
  t.ok(ok, "a captured scale update replayed 6 times equals 6 eager updates (scales, scale_invs, histories)")
  if why then t.diag(why) end
  t.is(eager[1][1][1], f32(f32(448 / 3) / 2), "and the first replayed update used the amax written before it (448 / 3 / 2^1)")
end

-- ---------------------------------------------------------------- bad arguments and recipes
do
  local h, s, si = tg.zeros({ 4, 3 }), tg.tensor({ 1, 1, 1 }), tg.tensor({ 1, 1, 1 })
  t.error_like(function() tg.fp8.scale_update(tg.zeros({ 4, 2 }), s, si, { 448, 448, 448 }) end,
    "amax_history %[4,2%] f32 vs scale %[3%] f32", "a history of the wrong width is refused naming both shapes")
  t.error_like(function() tg.fp8.scale_update(h, s, si, { 448, 448 }) end, "fp8_max has 2 values for 3 roles",
    "fp8_max must give one value per role")
  t.error_like(function() tg.fp8.scale_update(h, s, si, { 448, 0, 448 }) end, "fp8_max%[2%] = 0 must be finite and > 0",
    "a zero fp8_max is refused, named by its position in the Lua list")
  t.error_like(function() tg.fp8.scale_update(tg.zeros({ 4 }), tg.tensor({ 1 }), tg.tensor({ 1 }), -1) end,
    "fp8_max = %-1 must be finite and > 0", "a negative fp8_max given as a number is refused")
  t.error_like(function() tg.fp8.scale_update(h, s, s, { 448, 448, 448 }) end,
    "scale %[3%] f32 and scale_inv %[3%] f32 share memory", "scale_inv the same tensor as scale is refused")
  t.error_like(function() tg.fp8.scale_update(h, h:narrow(4, 1):view({ 3 }), si, { 448, 448, 448 }) end,
    "amax_history %[4,3%] f32 and scale %[3%] f32 share memory", "scale a view into amax_history (its last row) is refused")
  t.error_like(function() tg.fp8.scale_update(h, s, si, { 448, 448, 448 }, -1) end, "margin = %-1 must be in 0..127",
    "a negative margin is refused")
  t.error_like(function() tg.fp8.scale_update(h, s, si, { 448, 448, 448 }, 0, "mean") end, "invalid option 'mean'",
    "an unknown amax algorithm is refused")
  t.error_like(function() tg.fp8.scale_update(h, s, tg.tensor({ 1, 1 }), { 448, 448, 448 }) end, "scale_inv",
    "scale_inv of another shape is refused")
  t.error_like(function() tg.fp8.scale_update(tg.zeros({ 4, 3 }, { dtype = "bf16" }), s, si, { 448, 448, 448 }) end,
    "amax_history %[4,3%] bf16", "a bf16 history is refused")

  t.error_like(function() tg.fp8.DelayedScaling{ margin = -1 } end, "margin must be an integer in 0..127 %(got %-1%)",
    "DelayedScaling refuses a negative margin")
  t.error_like(function() tg.fp8.DelayedScaling{ margin = 0.5 } end, "margin must be an integer", "and a fractional one")
  t.error_like(function() tg.fp8.DelayedScaling{ amax_history_len = 0 } end, "amax_history_len must be an integer in 1..",
    "DelayedScaling refuses an empty history")
  t.error_like(function() tg.fp8.DelayedScaling{ amax_compute_algo = "mean" } end,
    "amax_compute_algo must be \"max\" or \"most_recent\" %(got mean%)", "DelayedScaling refuses an unknown algorithm")
  t.error_like(function() tg.fp8.DelayedScaling{ fp8_format = "E5M2" } end,
    "fp8_format must be \"HYBRID\" or \"E4M3\" %(got E5M2%)", "an all-E5M2 format is refused (TE has none)")
  t.error_like(function() tg.fp8.DelayedScaling{ amax_history = 16 } end, "unknown field 'amax_history'",
    "a misspelt field is refused naming it")
  t.error_like(function() tg.fp8.CurrentScaling{ margin = 1 } end, "CurrentScaling: unknown field 'margin'",
    "CurrentScaling takes only fp8_format")
  local r = tg.fp8.DelayedScaling{}
  t.is(r.margin, 0, "DelayedScaling defaults: margin 0")
  t.is(r.amax_history_len, 1024, "amax_history_len 1024")
  t.is(r.amax_compute_algo, "max", "amax_compute_algo max")
  t.is(r.fp8_format, "HYBRID", "fp8_format HYBRID")
  t.is(tg.fp8.CurrentScaling{ fp8_format = "E4M3" }.scaling, "current", "CurrentScaling makes a current-scaling recipe")
end

t.done_testing()
