-- fp8-evaluation-between-steps-keeps-the-scaling-state.lua — under delayed scaling a forward records its amaxes
-- and, at microbatch 1, updates the scales; tg.fp8.keep_state(model, fn) runs fn and puts the amax histories,
-- scales and scale_invs back (also when fn fails), and the GPT's eval_loss, logits, decode and generate run
-- under it: a training run with evaluations and generation between its steps has the losses and FP8 states of
-- the run without them, bit for bit.
local tg = require "tegraph"
local t = require "tap"
local nn = tg.nn

local function flat(x)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(x:totable())
  return out
end

local function states(m)
  local out = {}
  for _, s in ipairs(m:fp8_state()) do
    for _, x in ipairs { s.amax_history, s.scale, s.scale_inv } do
      for _, v in ipairs(flat(x)) do out[#out + 1] = v end
    end
  end
  return out
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] and not (a[i] ~= a[i] and b[i] ~= b[i]) then return false end
  end
  return true
end

-- ---------------------------------------------------------------- one Linear: an evaluation batch between steps
do
  local function run(eval)
    tg.manual_seed(1)
    local lin = nn.Linear(16, 16, { fp8 = tg.fp8.DelayedScaling { amax_history_len = 4 }, name = "l" })
    tg.manual_seed(2)
    local ys = {}
    for step = 1, 3 do
      local x, dy, xe = tg.randn({ 16, 16 }, { std = step }), tg.randn({ 16, 16 }), tg.randn({ 16, 16 }, { std = 100 })
      tg.step_begin { microbatches = 1 }
      ys[#ys + 1] = flat(lin:forward(x, 1))
      lin:backward(dy, 1)
      tg.step_end()
      if eval then eval(lin, xe) end
    end
    return ys, states(lin)
  end
  local base, base_state = run(nil)
  local plain, plain_state = run(function(lin, xe) lin:forward(xe); lin:drop_saved() end)
  t.ok(not same(plain[3], base[3]) and not same(plain_state, base_state),
    "a bare forward between steps updates the scales: the next steps' outputs differ")
  local kept, kept_state = run(function(lin, xe)
    tg.fp8.keep_state(lin, function() lin:forward(xe); lin:drop_saved() end)
  end)
  for s = 1, 3 do t.ok(same(kept[s], base[s]), "keep_state: step " .. s .. "'s output equals the run without evaluation") end
  t.ok(same(kept_state, base_state), "keep_state: the histories, scales and scale_invs equal the run without evaluation")

  local lin = nn.Linear(16, 16, { fp8 = tg.fp8.DelayedScaling { amax_history_len = 2 } })
  lin:forward(tg.randn({ 16, 16 })); lin:drop_saved()
  local before = states(lin)
  local ok, err = pcall(tg.fp8.keep_state, lin, function() lin:forward(tg.randn({ 16, 16 }, { std = 50 })); error("eval failed", 0) end)
  lin:drop_saved()
  t.ok(not ok and err == "eval failed", "keep_state passes fn's error on")
  t.ok(same(states(lin), before), "and puts the state back when fn fails")
  local a, b = tg.fp8.keep_state({ lin }, function(p, q) return p + q, "two" end, 1, 2)
  t.ok(a == 3 and b == "two", "keep_state takes a list of modules and returns fn's results")
  t.error_like(function() tg.fp8.keep_state(lin, 1) end, "keep_state: fn must be a function", "fn is checked")
  t.error_like(function() tg.fp8.keep_state({ lin, 5 }, function() end) end, "model entry 2 has no fp8_state",
    "a list entry that is not a module is named")
end

-- ---------------------------------------------------------------- a state made inside fn (fp8_autocast's first FP8 forward)
do
  local function run(eval_first)
    tg.manual_seed(11)
    local m = nn.Linear(16, 16, { name = "auto" })
    local r = tg.fp8.DelayedScaling { amax_history_len = 2 }
    tg.manual_seed(12)
    local xe = tg.randn({ 16, 16 }, { std = 50 })
    if eval_first then
      tg.fp8.keep_state(m, function() tg.fp8_autocast(r, function() m:forward(xe); m:drop_saved() end) end)
    end
    local ys = {}
    for step = 1, 2 do
      local x, dy = tg.randn({ 16, 16 }, { std = step }), tg.randn({ 16, 16 })
      tg.step_begin { microbatches = 1 }
      tg.fp8_autocast(r, function() ys[step] = flat(m:forward(x, 1)); m:backward(dy, 1) end)
      tg.step_end()
    end
    return ys, states(m)
  end
  local base, base_state = run(false)
  local got, got_state = run(true)
  t.ok(same(got[1], base[1]) and same(got[2], base[2]),
    "an evaluation that made the FP8 state (under fp8_autocast) inside keep_state leaves the training outputs unchanged")
  t.ok(same(got_state, base_state), "... and the state equals the run without it")
end

-- ---------------------------------------------------------------- a GPT: eval_loss, logits, decode, generate
do
  local V, T = 32, 16
  local seed = 12345
  local function ids(rows) -- token ids from a fixed LCG, the same in both runs
    local out = {}
    for r = 1, rows do
      out[r] = {}
      for c = 1, T do seed = (seed * 1103515245 + 12345) % 2147483648; out[r][c] = seed % V end
    end
    return tg.tensor(out, { dtype = "i32" })
  end
  local function run(between)
    tg.manual_seed(7)
    local model = nn.GPT { vocab_size = V, max_position_embeddings = T, hidden_size = 16, num_attention_heads = 2,
      num_layers = 2, fp8 = tg.fp8.DelayedScaling { amax_history_len = 3 } }
    local params = model:parameters()
    local opt = tg.optim.AdamW(params, { lr = 1e-2 })
    seed = 12345
    local losses = {}
    for step = 1, 4 do
      local x, y = ids(2), ids(2)
      tg.step_begin { microbatches = 1 }
      local loss = model:forward_loss(x, y, 1)
      model:backward(1.0, 1)
      tg.step_end()
      opt:step()
      losses[#losses + 1] = nn.loss_value(loss)
      if between then between(model, step) end
    end
    return losses, states(model)
  end
  local base, base_state = run(nil)
  local got, got_state = run(function(model, step)
    local saved = seed
    local xe = ids(1)
    seed = saved
    model:eval_loss(xe, xe)
    model:logits(xe)
    local cache = model:kv_cache(1)
    model:decode(cache, tg.tensor({ { 1, 2, 3 } }, { dtype = "i32" }))
    model:generate({ { 1, 2 } }, 3, { temperature = 1, seed = step })
  end)
  t.ok(#got_state > 0, "the GPT's layers have FP8 states")
  for s = 1, 4 do t.ok(got[s] == base[s], string.format("GPT step %d: the loss with evaluation and generation between " ..
    "steps equals the run without them (%.9g, %.9g)", s, got[s], base[s])) end
  t.ok(same(got_state, base_state), "GPT: the FP8 states equal the run without evaluation")
end

t.done_testing()
