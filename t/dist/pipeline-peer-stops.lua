-- dist/pipeline-peer-stops.lua — driven by t/dist-pipeline-peer-stops-the-run.sh: a 2-stage 1F1B run over the pp
-- communicator (comm timeout 3 s) in which stage 2 goes wrong at microbatch 2 ("stuck": busy for 60 s; "kill":
-- killed; "none": nothing). Stage 1 must then fail at a receive within the timeout, not hang. "cycle" and
-- "sendsend" run deadlocking plans instead, which every rank refuses before running.
local tg = require "tegraph"
local S = require "tegraph.schedule"
local what = arg[1] or "none"
tg.comm.init { timeout = 3 }
local pp = tg.comm.split { pp = 2 }.pp
local stage = pp:rank() + 1
local D, TOK, M = 8, 4, 4
tg.manual_seed(1234)
local chunks = {}
for c = 1, 2 do chunks[c] = tg.nn.Linear(D, D, { name = "c" .. c, chunk = c }) end
tg.manual_seed(99)
local xs, dys = {}, {}
for m = 1, M do
  xs[m] = tg.randn { TOK, D }
  dys[m] = tg.randn { TOK, D }
end
local function loss_grad(mb)
  if mb == 2 and what == "stuck" then
    local t0 = os.time()
    while os.time() < t0 + 60 do end
  elseif mb == 2 and what == "kill" then
    os.execute("kill -9 $PPID") -- the shell's parent: this rank
  end
  return dys[mb]
end
-- "cycle", "sendsend": hand-written plans that deadlock (a receive first on both stages; two blocking sends facing
-- each other): every rank holds the whole plan, so each refuses it before running anything, naming the action.
local function A(op, chunk, mb, peer, w) return { op = op, chunk = chunk, mb = mb, peer = peer, w = w } end
local bad = {
  cycle = { stages = 2, chunks = 1, microbatches = 1, kind = "hand",
    { A("recv_bwd", 2, 1, 2), A("F", 1, 1), A("send_fwd", 1, 1, 2), A("B", 1, 1, nil, true) },
    { A("recv_fwd", 1, 1, 1), A("F", 2, 1), A("B", 2, 1, nil, true), A("send_bwd", 2, 1, 1) } },
  sendsend = { stages = 2, chunks = 1, microbatches = 2, kind = "hand",
    { A("F", 1, 1), A("send_fwd", 1, 1, 2), A("F", 1, 2), A("send_fwd", 1, 2, 2), A("recv_bwd", 2, 1, 2),
      A("B", 1, 1, nil, true), A("recv_bwd", 2, 2, 2), A("B", 1, 2, nil, true) },
    { A("recv_fwd", 1, 1, 1), A("F", 2, 1), A("B", 2, 1, nil, true), A("send_bwd", 2, 1, 1), A("recv_fwd", 1, 2, 1),
      A("F", 2, 2), A("B", 2, 2, nil, true), A("send_bwd", 2, 2, 1) } },
}
S.execute(bad[what] or S.one_f_one_b { stages = 2, microbatches = M },
  { chunks = chunks, inputs = xs, loss_grad = loss_grad, comm = pp })
print("stage " .. stage .. " finished")
