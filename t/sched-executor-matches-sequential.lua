-- sched-executor-matches-sequential.lua — every built-in schedule run by the executor in one process,
-- eager and graphed (one set in the executed order, or one set per stage), with delay_wgrad off and
-- on, gives gradients bit-identical to plain sequential training, with each parameter's hooks
-- firing exactly once per microbatch (and the step's hook check passing).
local tg = require "tegraph"
local S = require "tegraph.schedule"
local t = require "tap"

tg.hook_check(true)
local D, TOK, STEPS = 8, 4, 2

-- Chunk c: Linear then LayerNormMLP (a pre-norm MLP block), every leaf with the mode's delay option.
local function build(C, delay)
  tg.manual_seed(1234)
  local chunks = {}
  for c = 1, C do
    local pre = "c" .. c
    chunks[c] = tg.nn.Sequential {
      tg.nn.Linear(D, D, { name = pre .. ".fc", chunk = c, delay_wgrad = delay }),
      tg.nn.LayerNormMLP(D, 2 * D, { name = pre .. ".mlp", chunk = c, delay_wgrad = delay }),
      name = pre, chunk = c }
  end
  return chunks
end

local grads_of = require("grads").grads_of

local function same(a, b)
  local n = 0
  for k, v in pairs(a) do
    n = n + 1
    local w = b[k]
    if w == nil then return false, "missing " .. k end
    for i = 1, #v do
      if v[i] ~= w[i] then return false, string.format("%s[%d]: %.9g vs %.9g", k, i, v[i], w[i]) end
    end
  end
  for k in pairs(b) do if a[k] == nil then return false, "extra " .. k end end
  return n > 0, "no gradients"
end

-- Hooks: count per "name:mb" and total.
local function hook_counter(chunks)
  local log = { n = 0, per = {} }
  for _, c in ipairs(chunks) do
    c:register_wgrad_hook(function(p, info)
      log.n = log.n + 1
      local k = p.name .. ":" .. info.microbatch
      log.per[k] = (log.per[k] or 0) + 1
    end)
  end
  return log
end

local function nparams(chunks)
  local n = 0
  for _, c in ipairs(chunks) do n = n + #c:parameters() end
  return n
end

local function once_each(chunks, log, M)
  for _, c in ipairs(chunks) do
    for _, p in ipairs(c:parameters()) do
      for m = 1, M do
        if log.per[p.name .. ":" .. m] ~= 1 then
          return false, string.format("%s mb %d fired %d times", p.name, m, log.per[p.name .. ":" .. m] or 0)
        end
      end
    end
  end
  return true
end

-- Fixed inputs and loss gradients per microbatch.
local function data(M)
  tg.manual_seed(99)
  local xs, dys = {}, {}
  for m = 1, M do
    xs[m] = tg.randn { TOK, D }
    dys[m] = tg.randn { TOK, D }
  end
  return xs, dys
end

-- Plain sequential training: every microbatch forward through every chunk, then backward through
-- the chunks in reverse, microbatches 1..M (the order each schedule retires a chunk's wgrads in,
-- checked below, so the fp32 accumulation order is the same).
local function reference(C, M, xs, dys)
  local chunks = build(C, false)
  tg.step_begin { microbatches = M }
  for m = 1, M do
    local x = xs[m]
    for c = 1, C do x = chunks[c]:forward(x, m) end
  end
  for m = 1, M do
    local dy = dys[m]
    for c = C, 1, -1 do dy = chunks[c]:backward(dy, m) end
  end
  tg.step_end()
  return grads_of(chunks)
end

-- The order in which the plan computes each chunk's wgrads, as "1234" per chunk.
local function wgrad_orders_ascending(plan)
  local seq = {}
  for s = 1, plan.stages do
    for _, a in ipairs(plan[s]) do
      if a.op == "W" or (a.op == "B" and a.w) then
        seq[a.chunk] = seq[a.chunk] or {}
        table.insert(seq[a.chunk], a.mb)
      end
    end
  end
  for _, l in pairs(seq) do
    for i = 1, #l do if l[i] ~= i then return false end end
  end
  return true
end

local cases = {
  { "gpipe", S.gpipe { stages = 2, microbatches = 4 } },
  { "1f1b", S.one_f_one_b { stages = 2, microbatches = 4 } },
  { "interleaved", S.interleaved { stages = 2, chunks_per_stage = 2, microbatches = 4 } },
  { "zb_h1", S.zb_h1 { stages = 2, microbatches = 4 } },
  { "zb_v", S.zb_v { stages = 2, microbatches = 4 } },
  { "1f1b p=4", S.one_f_one_b { stages = 4, microbatches = 8 }, eager_only = true },
  { "zb_h1 p=4", S.zb_h1 { stages = 4, microbatches = 8 }, eager_only = true },
  { "zb_v p=4", S.zb_v { stages = 4, microbatches = 8 } },
}

local refs = {}
for _, case in ipairs(cases) do
  local name, plan = case[1], case[2]
  local C, M = plan.stages * (plan.chunks or 1), plan.microbatches
  t.ok(wgrad_orders_ascending(plan), name .. ": each chunk's wgrads retire in microbatch order 1..M")
  local xs, dys = data(M)
  local rkey = C .. ":" .. M
  refs[rkey] = refs[rkey] or reference(C, M, xs, dys)
  local ref = refs[rkey]
  local modes = case.eager_only and { "eager" } or { "eager", "graphed", "graphed per stage" }
  for _, mode in ipairs(modes) do
    for _, delay in ipairs { false, true } do
      local label = string.format("%s, %s, delay_wgrad=%s", name, mode, tostring(delay))
      local chunks = build(C, delay)
      local log = hook_counter(chunks)
      local graphed
      if mode ~= "eager" then
        local samples = {}
        for c = 1, C do samples[c] = xs[1] end
        graphed = S.make_graphed(plan, chunks, { samples = samples, warmup = 1, per_stage = mode == "graphed per stage" })
      end
      local ok_all, why_all = true, nil
      for step = 1, STEPS do
        log.n, log.per = 0, {}
        local ok, err = pcall(S.execute, plan, { chunks = chunks, graphed = graphed, inputs = xs, loss_grad = dys })
        if not ok then
          ok_all, why_all = false, string.format("step %d: %s", step, tostring(err))
          break
        end
        local g_ok, why = same(ref, grads_of(chunks))
        if not g_ok then ok_all, why_all = false, string.format("step %d: %s", step, why) break end
        local h_ok, hwhy = once_each(chunks, log, M)
        if not h_ok or log.n ~= nparams(chunks) * M then
          ok_all, why_all = false, string.format("step %d: %s (%d hooks)", step, hwhy or "wrong total", log.n)
          break
        end
      end
      t.ok(ok_all, label .. ": gradients bit-identical to sequential training, hooks once per parameter per microbatch, "
        .. STEPS .. " steps")
      if not ok_all then t.diag(why_all) end
    end
  end
end

-- The executed order interleaves the stages the way the simulator's engine does: it is a valid
-- graphed replay order (every F before its B before its W) covering every compute action once.
do
  local plan = S.zb_v { stages = 2, microbatches = 4 }
  local order = S.exec_order(plan)
  local n = 0
  for s = 1, plan.stages do for _, a in ipairs(S.to_order(plan, s)) do n = n + 1 + ((a.w and 1) or 0) end end
  t.is(#order, n, "exec_order lists every compute action once (fused B as B then W)")
  local state, good = {}, true
  for _, a in ipairs(order) do
    local k = a.chunk .. ":" .. a.mb
    local want = ({ F = nil, B = "F", W = "B" })[a.op]
    if state[k] ~= want then good = false end
    state[k] = a.op
  end
  t.ok(good, "exec_order runs F before B before W for every (chunk, mb)")
end

t.done_testing()
