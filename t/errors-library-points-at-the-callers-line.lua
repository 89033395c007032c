-- errors-library-points-at-the-callers-line.lua — errors raised inside the Lua library (optim, data, nn,
-- schedule, reduce) carry the position of the user's line that called it, however deep in the library the
-- check sits, and the innermost user function when the library is called through user helpers.
local tap = require "tap"
local tg = require "tegraph"

local file = debug.getinfo(1, "S").short_src
local function here() return debug.getinfo(2, "l").currentline end
local function at(line) return "^" .. file:gsub("%p", "%%%0") .. ":" .. line .. ": " end

-- runs fn (which sets `line` to the line of the library call) and checks the error's position and text
local line
local function raises_here(fn, text, what)
  local ok, err = pcall(fn)
  tap.ok(not ok, what .. ": raises")
  err = tostring(err)
  tap.like(err, at(line), what .. ": positioned at the calling line " .. tostring(line))
  tap.like(err, text, what .. ": says what was wrong")
end

raises_here(function() line = here(); tg.schedule.gpipe { stages = 0, microbatches = 2 } end,
  "schedule: stages must be >= 1, got 0", "a schedule generator's argument check two calls deep")
raises_here(function() line = here(); tg.schedule.one_f_one_b { stages = 2, microbatches = 1.5 } end,
  "schedule: microbatches must be an integer, got 1.5", "1f1b with a fractional count")
raises_here(function() line = here(); tg.schedule.interleaved("x") end,
  "expects a table", "interleaved without a table")
raises_here(function() line = here(); tg.optim.AdamW({}) end,
  "AdamW: needs a non%-empty list of parameters", "AdamW without parameters")
raises_here(function() line = here(); tg.optim.cosine_schedule {} end,
  "cosine_schedule: lr and total", "cosine_schedule without lr")
raises_here(function() line = here(); tg.data.open("/nonexistent/tokens.bin") end,
  "/nonexistent/tokens.bin: cannot open token file", "data.open of a missing file")
raises_here(function() line = here(); tg.nn.GPT("tiny") end,
  "nn.GPT: expected a table of options, got string", "nn.GPT with a string")
raises_here(function() line = here(); tg.nn.GPT { vocab_size = 10 } end,
  "nn.GPT: cfg%..* %(a positive integer%) is required", "nn.GPT without its sizes")
raises_here(function() line = here(); tg.reduce.tracker { params = {} } end,
  "reduce.tracker: on_ready %(a function%) is required", "reduce.tracker without on_ready")
raises_here(function() line = here(); tg.train.new { model = {} } end,
  "train: model must be an nn.GPT", "train.new with a model that is not an nn.GPT")
raises_here(function()
  local gpt = tg.nn.GPT { vocab_size = 16, max_position_embeddings = 8, hidden_size = 16, num_attention_heads = 2,
    num_layers = 1 }
  line = here(); tg.train.new { model = gpt, hooks = "x" }
end, "train: hooks must be reduce or noop %(got x%)", "train.new with unknown hooks")

-- through a helper of the user's: the helper's line (the innermost user code) is named
local function build_schedule(n)
  line = here(); local plan = tg.schedule.gpipe { stages = n, microbatches = 4 } -- not a tail call
  return plan
end
raises_here(function() build_schedule(-1) end, "stages must be >= 1, got %-1",
  "called from a user helper: the helper's line")

-- a schedule that stalls is named at the simulate call
local bad = tg.schedule.gpipe { stages = 2, microbatches = 2 }
bad[1], bad[2] = bad[2], bad[1]
raises_here(function() line = here(); tg.schedule.simulate(bad) end, "schedule.simulate: ",
  "simulate of an invalid plan")

tap.done_testing()
