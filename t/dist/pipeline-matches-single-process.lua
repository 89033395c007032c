-- dist/pipeline-matches-single-process.lua — pipeline stages on their own ranks (schedule.execute with comm =
-- the pp communicator): 1F1B and ZB-H1 (eager with delay_wgrad off and on, graphed with it off and on) and the
-- two-chunks-per-stage schedules give each rank's parameters gradients bit-identical to the single-process run of
-- the same plan, over two steps, with every hook firing once per parameter per microbatch on each rank; different
-- plans on the ranks, a wrong stage list or a communicator of the wrong size fail clearly on every rank.
-- Tensors live on tg.default_device(): CPU tensors over MPI in CI, CUDA tensors over NCCL on GPUs.
local tg = require "tegraph"
local S = require "tegraph.schedule"
local plan_ = require "tegraph.schedule.plan"
local t = require "dist_tap"
local G = require "grads"

if t.size ~= 2 then t.skip_all("needs exactly 2 ranks (got " .. t.size .. ")") end
tg.hook_check(true)
local D, TOK, STEPS = 8, 4, 2
local layout = t.comm:split { pp = 2 }
local pp, stage = layout.pp, layout.pp_rank + 1
t.ok(pp:size() == 2 and pp:rank() == stage - 1, "the pp communicator has both ranks, stage = pp rank + 1")

-- Chunk c: Linear then LayerNormMLP. Every rank builds every chunk (the same initialisation), and runs its own.
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

-- The chunks this rank's stage computes, as a list of chunk numbers.
local function mine(plan)
  local owner, out = plan_.owners(plan), {}
  for c = 1, plan.stages * (plan.chunks or 1) do
    if owner[c] == stage then out[#out + 1] = c end
  end
  return out
end

-- the gradients of chunks cs (indices into chunks)
local function grads_of(chunks, cs)
  local sel = {}
  for _, c in ipairs(cs) do sel[#sel + 1] = chunks[c] end
  return G.grads_of(sel)
end

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

local function hook_counter(chunks, cs)
  local log = { n = 0, per = {} }
  for _, c in ipairs(cs) do
    chunks[c]:register_wgrad_hook(function(p, info)
      log.n = log.n + 1
      local k = p.name .. ":" .. info.microbatch
      log.per[k] = (log.per[k] or 0) + 1
    end)
  end
  return log
end

local function once_each(chunks, cs, log, M)
  local n = 0
  for _, c in ipairs(cs) do
    for _, p in ipairs(chunks[c]:parameters()) do
      n = n + 1
      for m = 1, M do
        if log.per[p.name .. ":" .. m] ~= 1 then
          return false, string.format("%s mb %d fired %d times", p.name, m, log.per[p.name .. ":" .. m] or 0)
        end
      end
    end
  end
  if log.n ~= n * M then return false, string.format("%d hooks, expected %d", log.n, n * M) end
  return true
end

-- Fixed inputs and loss gradients per microbatch (the same on every rank).
local function data(M)
  tg.manual_seed(99)
  local xs, dys = {}, {}
  for m = 1, M do
    xs[m] = tg.randn { TOK, D }
    dys[m] = tg.randn { TOK, D }
  end
  return xs, dys
end

local function diag_fail(label, why)
  if why then io.stderr:write(string.format("rank %d: %s: %s\n", t.rank, label, why)) end
end

local cases = {
  { "1f1b", S.one_f_one_b { stages = 2, microbatches = 4 } },
  { "zb_h1", S.zb_h1 { stages = 2, microbatches = 4 } },
  { "interleaved", S.interleaved { stages = 2, chunks_per_stage = 2, microbatches = 4 }, eager_only = true },
  { "zb_v", S.zb_v { stages = 2, microbatches = 4 }, eager_only = true },
}

for _, case in ipairs(cases) do
  local name, plan = case[1], case[2]
  local C, M = plan.stages * (plan.chunks or 1), plan.microbatches
  local cs = mine(plan)
  local xs, dys = data(M)
  local modes = case.eager_only and { { "eager", true } }
    or { { "eager", false }, { "eager", true }, { "graphed", false }, { "graphed", true } }
  for _, md in ipairs(modes) do
    local mode, delay = md[1], md[2]
    local label = string.format("%s, %s, delay_wgrad=%s", name, mode, tostring(delay))
    -- the reference: the whole plan in this process
    local ref_chunks = build(C, delay)
    S.execute(plan, { chunks = ref_chunks, inputs = xs, loss_grad = dys })
    local ref = grads_of(ref_chunks, cs)
    -- the pipeline: this rank's stage only
    local chunks = build(C, delay)
    local log = hook_counter(chunks, cs)
    local graphed
    if mode == "graphed" then
      local samples = {}
      for c = 1, C do samples[c] = xs[1] end
      graphed = S.make_graphed(plan, chunks, { samples = samples, warmup = 1, stages = { stage } })
    end
    local ok_all, why_all = true, nil
    for step = 1, STEPS do
      log.n, log.per = 0, {}
      local ok, err = pcall(S.execute, plan, { chunks = chunks, graphed = graphed, inputs = xs, loss_grad = dys,
        comm = pp, validate = true })
      if not ok then
        ok_all, why_all = false, string.format("step %d: %s", step, tostring(err))
        break
      end
      local g_ok, why = same(ref, grads_of(chunks, cs))
      if not g_ok then ok_all, why_all = false, string.format("step %d: %s", step, why) break end
      local h_ok, hwhy = once_each(chunks, cs, log, M)
      if not h_ok then ok_all, why_all = false, string.format("step %d: %s", step, hwhy) break end
    end
    diag_fail(label, why_all)
    t.ok(ok_all, label .. ": each rank's gradients bit-identical to the single-process run of the plan, hooks once "
      .. "per parameter per microbatch, " .. STEPS .. " steps")
  end
end

-- Misuse and mismatches fail on every rank with a message saying what is wrong (and nobody hangs).
do
  local xs, dys = data(4)
  local function try(plan, extra)
    local chunks = build(plan.stages * (plan.chunks or 1), false)
    local o = { chunks = chunks, inputs = xs, loss_grad = dys, comm = pp }
    for k, v in pairs(extra or {}) do o[k] = v end
    local ok, err = pcall(S.execute, plan, o)
    return ok, tostring(err)
  end
  local a = S.one_f_one_b { stages = 2, microbatches = 4 }
  local b = stage == 1 and a or S.zb_h1 { stages = 2, microbatches = 4 }
  local ok, err = try(b)
  local good = not ok and err:find("the pipeline ranks run different plans", 1, true) ~= nil
  diag_fail("different schedules", not good and err or nil)
  t.ok(good,
    "1F1B on one rank and ZB-H1 on the other: both fail, naming different plans")

  local c = S.one_f_one_b { stages = 2, microbatches = stage == 1 and 4 or 3 }
  ok, err = try(c)
  t.ok(not ok and err:find("different plans", 1, true) ~= nil and err:find("microbatches", 1, true) ~= nil,
    "different microbatch counts: both fail, naming different plans")

  ok, err = try(a, { stages = { 3 - stage } })
  t.ok(not ok and err:find("opts.stages says otherwise", 1, true) ~= nil,
    "opts.stages naming another stage than the rank's fails")

  ok, err = try(S.one_f_one_b { stages = 4, microbatches = 4 })
  t.ok(not ok and err:find("the plan has 4 stages but the pipeline communicator has 2 ranks", 1, true) ~= nil,
    "a 4-stage plan on a 2-rank communicator fails")

  -- after all that, a good run still works (the ranks are in step)
  local chunks = build(2, false)
  ok, err = pcall(S.execute, a, { chunks = chunks, inputs = xs, loss_grad = dys, comm = pp })
  diag_fail("a run after the failures", not ok and err or nil)
  t.ok(ok, "a matching run after the failed ones succeeds")
end

t.done_testing()
