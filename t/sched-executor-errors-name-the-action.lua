-- sched-executor-errors-name-the-action.lua — the executor fails clearly on plans it cannot run:
-- a cyclic wait or a missing send is a deadlock naming each stuck stage's action; W before B, W out of B order,
-- a chunk on the wrong stage, a missing input, a failing hook or input function, and a graphed
-- set captured for another plan all name the stage and action. A failed run leaves no step open.
-- schedule.execute validates the whole plan first (so it refuses those plans before anything runs); the C
-- executor's own checks are exercised by running it directly (tegraph.core's sched.run).
local tg = require "tegraph"
local S = require "tegraph.schedule"
local t = require "tap"

tg.hook_check(true)
local D, TOK = 4, 3

local function build(C)
  tg.manual_seed(7)
  local chunks = {}
  for c = 1, C do chunks[c] = tg.nn.Linear(D, D, { name = "c" .. c, chunk = c }) end
  return chunks
end

tg.manual_seed(1)
local xs, dys = {}, {}
for m = 1, 4 do xs[m], dys[m] = tg.randn { TOK, D }, tg.randn { TOK, D } end

local function A(op, chunk, mb, peer, w) return { op = op, chunk = chunk, mb = mb, peer = peer, w = w } end

-- Two stages, one microbatch, written by hand.
local function two_stage(list1, list2)
  return { stages = 2, chunks = 1, microbatches = 1, kind = "hand", owner = { 1, 2 }, list1, list2 }
end

local good1 = { A("F", 1, 1), A("send_fwd", 1, 1, 2), A("recv_bwd", 2, 1, 2), A("B", 1, 1, nil, true) }
local good2 = { A("recv_fwd", 1, 1, 1), A("F", 2, 1), A("B", 2, 1, nil, true), A("send_bwd", 2, 1, 1) }

local function run(plan, extra)
  local chunks = build(plan.stages * (plan.chunks or 1))
  local opts = { chunks = chunks, inputs = xs, loss_grad = dys }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return pcall(S.execute, plan, opts)
end

-- The C executor alone, on a plan execute's validation would refuse first.
local function run_raw(plan)
  local chunks = build(plan.stages * (plan.chunks or 1))
  tg.step_begin { microbatches = plan.microbatches }
  local ok, err = pcall(require("tegraph.core").sched.run, plan, { chunks = chunks,
    input = function(mb) return xs[mb] end, loss_grad = function(mb) return dys[mb] end })
  for _, m in ipairs(chunks) do m:drop_saved() end
  tg.hook_check(false); pcall(tg.step_end); tg.hook_check(true)
  return ok, err
end

do
  local ok, err = run(two_stage(good1, good2))
  t.ok(ok, "the hand-written plan runs")
  if not ok then t.diag(err) end
end

do -- stage 1 waits for the gradient before sending the activation: a cycle
  local p = two_stage({ A("F", 1, 1), A("recv_bwd", 2, 1, 2), A("send_fwd", 1, 1, 2), A("B", 1, 1, nil, true) }, good2)
  local ok, err = run(p)
  t.ok(not ok, "a cyclic wait fails")
  t.like(tostring(err), "schedule%.execute: stage 1 action 2 %(recv_bwd chunk 2 mb 1 from stage 2%): deadlock",
    "execute refuses it before running, naming the stuck action")
  ok, err = run_raw(p)
  t.like(tostring(err), "schedule deadlock", "it is called a deadlock")
  t.like(tostring(err), "stage 1 action 2 %(recv_bwd chunk 2 mb 1 from stage 2%)", "it names stage 1's stuck recv")
  t.like(tostring(err), "stage 2 action 1 %(recv_fwd chunk 1 mb 1 from stage 1%)", "it names stage 2's stuck recv")
end

do -- the activation is never sent
  local p = two_stage({ A("F", 1, 1) }, good2)
  local ok, err = run(p)
  t.ok(not ok, "a recv without a send fails")
  t.like(tostring(err), "stage 2 action 1 %(recv_fwd chunk 1 mb 1 from stage 1%): no matching send_fwd on stage 1",
    "execute refuses it before running, naming the recv")
  ok, err = run_raw(p)
  t.like(tostring(err), "stage 2 action 1 %(recv_fwd chunk 1 mb 1 from stage 1%) waits for a send that has not happened "
    .. "%(stage 1 has finished without sending it%)", "it names the recv and says the sender finished")
end

do
  local p = two_stage({ A("F", 1, 1), A("send_fwd", 1, 1, 2), A("W", 1, 1), A("recv_bwd", 2, 1, 2), A("B", 1, 1) }, good2)
  local ok, err = run(p)
  t.ok(not ok, "W before B fails")
  t.like(tostring(err), "stage 1 action 3 %(W chunk 1 mb 1%): W before B", "the error names the W")
end

do -- W out of B order, run without validate: refused before anything runs
  local p = { stages = 1, chunks = 1, microbatches = 2, kind = "hand", owner = { 1 },
    { A("F", 1, 1), A("F", 1, 2), A("B", 1, 1), A("B", 1, 2), A("W", 1, 2), A("W", 1, 1) } }
  local delayed = tg.nn.Linear { in_features = D, out_features = D, name = "c1", delay_wgrad = true }
  local ok, err = pcall(S.execute, p, { chunks = { delayed }, inputs = xs, loss_grad = dys })
  t.ok(not ok, "a plan with W out of B order fails")
  t.like(tostring(err), "stage 1 action 5 %(W chunk 1 mb 2%): W of chunk 1 must follow its B order; the wgrad store's head is mb 1",
    "the error names the W and the store's head")
  t.ok(delayed:parameters()[1].grad:max_abs() == 0 and not delayed:need_backward_dw() and not tg.step_open(),
    "nothing ran: no gradient, nothing queued, no step left open")
  p[1][5], p[1][6] = A("W", 1, 1), A("W", 1, 2)
  local ok2, err2 = pcall(S.execute, p, { chunks = { delayed }, inputs = xs, loss_grad = dys })
  t.ok(ok2, "with W in B order it runs")
  if not ok2 then t.diag(err2) end
end

do
  local p = two_stage({ A("F", 2, 1) }, good2)
  local ok, err = run(p)
  t.ok(not ok, "a chunk computed on another stage fails")
  t.like(tostring(err), "stage 1 action 1 %(F chunk 2 mb 1%): chunk 2 belongs to stage 2", "the error names the action and owner")
end

do
  local p = two_stage(good1, { A("F", 2, 1), A("B", 2, 1, nil, true), A("send_bwd", 2, 1, 1) })
  local ok, err = run(p)
  t.ok(not ok, "an F whose input never came fails")
  t.like(tostring(err), "stage 1 action 2 %(send_fwd chunk 1 mb 1 to stage 2%): no matching recv_fwd on stage 2",
    "execute refuses it before running, naming the unmatched send")
  ok, err = run_raw(p)
  t.like(tostring(err), "stage 2 action 1 %(F chunk 2 mb 1%): its input has not arrived %(no recv_fwd chunk 1 mb 1",
    "the error names the F and the missing recv")
end

do
  local p = two_stage({ A("F", 1, 1), A("send_fwd", 1, 1, 2), A("send_fwd", 1, 1, 2) }, good2)
  local ok, err = run(p)
  t.ok(not ok, "sending twice fails")
  t.like(tostring(err), "stage 1 action 3 %(send_fwd chunk 1 mb 1 to stage 2%): duplicate send_fwd",
    "execute refuses it before running, naming the second send")
  ok, err = run_raw(p)
  t.like(tostring(err), "stage 1 action 3 %(send_fwd chunk 1 mb 1 to stage 2%): nothing to send", "the error names the second send")
end

do -- a hook error aborts the backward that fired it; the message says where
  local p = two_stage(good1, good2)
  local chunks = build(2)
  chunks[2]:parameters()[1]:register_hook(function() error("hook boom") end)
  local ok, err = pcall(S.execute, p, { chunks = chunks, inputs = xs, loss_grad = dys })
  t.ok(not ok, "a failing hook fails the run")
  t.like(tostring(err), "stage 2 action 3 %(B%+W chunk 2 mb 1%)", "the error names the action that fired the hook")
  t.like(tostring(err), "hook boom", "and carries the hook's message")
  t.ok(not tg.step_open(), "no step is left open after a failed run")
end

do
  local ok, err = run(two_stage(good1, good2), { inputs = function() error("no data today") end })
  t.ok(not ok, "a failing inputs function fails the run")
  t.like(tostring(err), "stage 1 action 1 %(F chunk 1 mb 1%): inputs function: .*no data today", "the error names the F")
end

do
  local ok, err = run(two_stage(good1, good2), { loss_grad = function() return 42 end })
  t.ok(not ok, "a loss_grad returning a non-tensor fails")
  t.like(tostring(err), "stage 2 action 3 %(B%+W chunk 2 mb 1%).*returned a number", "the error names the B")
end

do -- graphed set captured for 1F1B, replayed with GPipe's order
  local a = S.one_f_one_b { stages = 2, microbatches = 4 }
  local b = S.gpipe { stages = 2, microbatches = 4 }
  local chunks = build(2)
  local g = S.make_graphed(a, chunks, { samples = { xs[1], xs[1] }, warmup = 1 })
  local ok, err = pcall(S.execute, b, { chunks = chunks, graphed = g, inputs = xs, loss_grad = dys })
  t.ok(not ok, "replaying a graphed set in another plan's order fails")
  t.like(tostring(err), "stage %d action %d+ %(.-%): graphed replay out of order", "the error names the action and the graph check")
  local ok2, err2 = pcall(S.execute, a, { chunks = chunks, graphed = g, inputs = xs, loss_grad = dys })
  t.ok(ok2, "the same set then runs its own plan from the start")
  if not ok2 then t.diag(err2) end
end

do
  local ok, err = pcall(S.execute, S.gpipe { stages = 2, microbatches = 2 }, { inputs = xs, loss_grad = dys })
  t.ok(not ok and tostring(err):find("no module", 1, true) ~= nil, "running without modules names what is missing")
end

-- Incomplete plans are refused before anything runs (no validate flag needed), naming the missing action; a chunk
-- that delays wgrad needs its W for every microbatch.
do
  local function one(list, delay)
    local m = tg.nn.Linear(D, D, { name = "c1", chunk = 1, delay_wgrad = delay })
    local ok, err = pcall(S.execute, { stages = 1, chunks = 1, microbatches = 2, kind = "hand", list },
      { chunks = { m }, inputs = xs, loss_grad = dys })
    return ok, err, m
  end
  local ok, err, m = one({ A("F", 1, 1), A("B", 1, 1, nil, true) }, false)
  t.like(tostring(err), "schedule%.execute: stage 1: chunk 1 mb 2 has no F", "a plan without microbatch 2 is refused, naming it")
  t.ok(m:parameters()[1].grad:max_abs() == 0 and not tg.step_open(), "nothing ran and no step is left open")
  ok, err = one({ A("F", 1, 1), A("F", 1, 2), A("B", 1, 1, nil, true) }, false)
  t.like(tostring(err), "chunk 1 mb 2 has no B", "a plan with an F and no B is refused, naming the B")
  ok, err, m = one({ A("F", 1, 1), A("F", 1, 2), A("B", 1, 1), A("W", 1, 1), A("B", 1, 2) }, true)
  t.like(tostring(err), "chunk 1 mb 2 has no W", "a delaying chunk's missing W is refused, naming it")
  t.ok(not m:need_backward_dw() and not tg.step_open(), "nothing is queued and no step is left open")
  ok, err = one({ A("F", 1, 1), A("F", 1, 2), A("B", 1, 1), A("B", 1, 2) }, true)
  t.like(tostring(err), "chunk 1 mb 1 has no W", "a delaying chunk without any W is refused too")
  ok, err = one({ A("F", 1, 1), A("F", 1, 2), A("B", 1, 1), A("B", 1, 2) }, false)
  t.ok(ok, "a chunk that delays no wgrad may leave its W out")
  if not ok then t.diag(err) end
end

-- A run that fails half way drops what it saved or queued and closes its step: the next execute starts clean.
do
  local p = { stages = 1, chunks = 1, microbatches = 2, kind = "hand",
    { A("F", 1, 1), A("F", 1, 2), A("B", 1, 1), A("W", 1, 1), A("B", 1, 2), A("W", 1, 2) } }
  local m = tg.nn.Linear(D, D, { name = "c1", chunk = 1, delay_wgrad = true })
  local ok, err = pcall(S.execute, p, { chunks = { m }, inputs = xs,
    loss_grad = function(mb) if mb == 2 then error("no gradient for 2") end return dys[mb] end })
  t.like(tostring(err), "no gradient for 2", "a loss_grad failing at microbatch 2 fails the run")
  t.ok(not tg.step_open(), "the failed run left no step open")
  t.ok(not m:need_backward_dw(), "and nothing queued")
  local ok2, err2 = pcall(S.execute, p, { chunks = { m }, inputs = xs, loss_grad = dys })
  t.ok(ok2, "the next execute runs in a fresh step")
  if not ok2 then t.diag(err2) end
end

-- per-stage graphed sets run in one process must not reuse static buffers across microbatches: a stage's input
-- gradient is read by the other set later (silently wrong gradients before); made without reuse they run
do
  local plan = S.one_f_one_b { stages = 2, microbatches = 4 }
  local function sets(o)
    local chunks = build(2)
    local out = {}
    for s = 1, 2 do
      local g = tg.graph.make_graphed({ chunks[s] }, { sample = xs[1], microbatches = 4, order = S.to_order(plan, s),
        reuse = o.reuse, share = o.share })
      out[s] = g[1]
    end
    return out
  end
  local ok, err = pcall(S.execute, plan, { graphed = sets {}, inputs = xs, loss_grad = dys })
  t.ok(not ok and tostring(err):find("2 graphed sets in one process, and chunk %d's reuses static buffers"),
    "execute refuses per-stage sets that reuse static buffers in one process: " .. tostring(err))
  local ok2, err2 = pcall(S.execute, plan, { graphed = sets { reuse = false, share = false }, inputs = xs, loss_grad = dys })
  t.ok(ok2, "... and runs them made with reuse = false, share = false (" .. tostring(err2) .. ")")
end

t.done_testing()
