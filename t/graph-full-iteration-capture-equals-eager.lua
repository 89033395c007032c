-- graph-full-iteration-capture-equals-eager.lua — tg.graph.capture_step: a whole training step of a small GPT
-- (forward and backward of two microbatches, delayed wgrad of the layers, a reduce hook that does device work,
-- capturable AdamW) captured once and replayed per step, with static input buffers a loader fills, gives the
-- eager losses, parameters and reduced gradients bit for bit; the hooks run once, during the capture (their
-- device work runs at every replay, once); the step check counts the replays; bad uses fail naming the problem.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local optim = require "tegraph.optim"
local t = require "tap"

tg.hook_check(true)
local V, T, B, M, STEPS = 11, 6, 2, 2, 4
local lr_of = optim.cosine_schedule { lr = 1e-2, warmup = 1, total = STEPS, min_lr = 1e-3 }

-- The loader's batches: different tokens every step.
tg.manual_seed(7)
local function ids()
  local v = {}
  for i = 1, B * T do v[i] = math.random(0, V - 1) end
  return tg.tensor(v, { dtype = "i32" }):view({ B, T })
end
math.randomseed(11)
local batches = {}
for s = 1, STEPS do
  batches[s] = {}
  for m = 1, M do batches[s][m] = { ids(), ids() } end
end

-- A model, its optimizer and a "reduce" hook: on each parameter's last microbatch it adds the gradient into
-- that parameter's bucket (device work, as an all-reduce into a bucket), and counts its host calls.
local function setup()
  tg.manual_seed(1234)
  local model = nn.GPT { vocab_size = V, max_position_embeddings = T, hidden_size = 8, num_attention_heads = 2,
    num_layers = 2, delay_wgrad = "layers", fuse_wgrad_accumulation = true }
  local r = { model = model, buckets = {}, calls = 0, log = {} }
  for _, p in ipairs(model:parameters()) do
    local g = p.main_grad or p.grad
    r.buckets[p.name] = tg.zeros_like(g)
    p:register_hook(function(q, info)
      r.calls = r.calls + 1
      r.log[#r.log + 1] = string.format("%s mb=%d last=%s", q.name, info.microbatch, tostring(info.last))
      if info.last then r.buckets[q.name]:axpby_(1, q.main_grad or q.grad, 1) end
    end)
  end
  r.opt = optim.AdamW(model:parameters(), { lr = lr_of(1), weight_decay = 0.1, capturable = true })
  return r
end

-- One step on the given inputs: every microbatch's forward and backward, the delayed wgrads, the optimizer.
local function step_body(r, xs, ys, losses)
  for m = 1, M do
    losses[m] = r.model:forward_loss(xs[m], ys[m], m)
    r.model:backward(1.0 / M, m)
  end
  for m = 1, M do r.model:backward_dw(m) end
  r.opt:step()
end

local function flat(x) return x:view({ x:numel() }):totable() end
local function snapshot(r)
  local out = {}
  for _, p in ipairs(r.model:parameters()) do out[p.name] = flat(p.master or p.data) end
  for k, b in pairs(r.buckets) do out["bucket " .. k] = flat(b) end
  return out
end

local function same(a, b)
  for k, v in pairs(a) do
    local w = b[k]
    if not w or #w ~= #v then return false, k .. " missing or resized" end
    for i = 1, #v do
      if v[i] ~= w[i] then return false, string.format("%s[%d]: %.9g vs %.9g", k, i, v[i], w[i]) end
    end
  end
  return true
end

-- Eager reference.
local eager = setup()
local eager_losses = {}
for s = 1, STEPS do
  eager.opt:set_lr(lr_of(s))
  local xs, ys = {}, {}
  for m = 1, M do xs[m], ys[m] = batches[s][m][1], batches[s][m][2] end
  local losses = {}
  tg.step_begin { microbatches = M }
  step_body(eager, xs, ys, losses)
  tg.step_end()
  eager_losses[s] = {}
  for m = 1, M do eager_losses[s][m] = losses[m]:totable()[1] end
end

-- Full-iteration capture: static input buffers, one capture, a replay per step.
local full = setup()
local sx, sy = {}, {}
for m = 1, M do sx[m], sy[m] = tg.zeros({ B, T }, { dtype = "i32" }), tg.zeros({ B, T }, { dtype = "i32" }) end
local losses = {}
local captured = tg.graph.capture_step(function() step_body(full, sx, sy, losses) end, { microbatches = M })
local nparams = #full.model:parameters()
t.is(full.calls, M * nparams, "the hooks ran once per parameter and microbatch, while the step was captured")
t.is(full.log[1], eager.log[1], "with the eager hooks' info (first firing)")
t.is(full.log[#full.log], eager.log[M * nparams], "with the eager hooks' info (last firing)")
t.is(full.opt:step_count(), 0, "the capture ran nothing (the optimizer's device step count is still 0)")
for s = 1, STEPS do
  for m = 1, M do -- the loader fills the static buffers
    sx[m]:copy_(batches[s][m][1])
    sy[m]:copy_(batches[s][m][2])
  end
  full.opt:set_lr(lr_of(s))
  captured:replay()
  local ok = true
  for m = 1, M do ok = ok and losses[m]:totable()[1] == eager_losses[s][m] end
  t.ok(ok, string.format("step %d: the replayed step's losses equal eager's bit for bit (%.7g, %.7g)", s,
    losses[1]:totable()[1], losses[M]:totable()[1]))
end
t.is(full.calls, M * nparams, "replays ran no hook on the host (their device work is in the graph)")
t.is(full.opt:step_count(), STEPS, "the optimizer stepped once per replay")
local ok, why = same(snapshot(eager), snapshot(full))
t.ok(ok, "parameters and reduced gradient buckets after the replays equal eager's bit for bit (each hook's device work ran once per step)")
if not ok then t.diag(why) end

-- The step check counts the replays: a raw replay in a step of another size, or outside a step, is refused;
-- two replays in one step fail the step check naming a parameter.
t.error_like(function()
  tg.step_begin { microbatches = M + 1 }
  local rok, err = pcall(captured.graph.replay, captured.graph)
  tg.step_end()
  error(err, 0)
end, "full%-iteration capture of 2 microbatches in a step of 3", "a replay in a step of another microbatch count is refused")
t.error_like(function() captured.graph:replay() end, "full%-iteration capture outside a step",
  "a replay outside a step is refused")
tg.step_begin { microbatches = M }
captured.graph:replay()
captured.graph:replay()
local sok, serr = pcall(tg.step_end)
t.ok(not sok, "two replays of the captured step in one step fail the step check")
t.like(tostring(serr), "hook check failed.*fired %[2,2%]", "naming a parameter fired twice per microbatch")

-- Bad calls name the problem.
t.error_like(function() tg.graph.capture_step(42) end, "capture_step: fn must be a function", "fn must be a function")
t.error_like(function() tg.graph.capture_step(function() end, { microbatches = 0 }) end,
  "capture_step: opts%.microbatches must be an integer >= 1 %(got 0%)", "microbatches must be >= 1")
t.error_like(function() tg.graph.capture_step(function() error("loader broke") end, { microbatches = 1 }) end,
  "capture_step: .*loader broke", "an error inside the step names it")
t.ok(not tg.graph.capturing(), "after a failed capture nothing captures")
t.ok(pcall(function() tg.step_begin { microbatches = 1 }; tg.step_end() end), "a step opens and closes after the failed capture")

t.done_testing()
