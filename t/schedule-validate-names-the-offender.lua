-- schedule-validate-names-the-offender.lua — broken plans (W before B, W out of B order, missing recv,
-- cyclic wait, send/send deadlock, wrong peer, missing W, ...) fail validate with the first offending
-- action named.
local tap = require "tap"
local S = require "tegraph.schedule"

local function copy(plan)
  local c = {}
  for k, v in pairs(plan) do
    if type(k) == "number" then
      c[k] = {}
      for i, a in ipairs(v) do
        local b = {}
        for f, x in pairs(a) do b[f] = x end
        c[k][i] = b
      end
    else
      c[k] = v
    end
  end
  return c
end

local function find(list, op, chunk, mb)
  for i, a in ipairs(list) do
    if a.op == op and a.chunk == chunk and a.mb == mb then return i end
  end
end

local function rejects(plan, want, msg, opts)
  local ok, err, where = S.validate(plan, opts)
  tap.ok(not ok, msg .. ": rejected")
  tap.is(err, want, msg .. ": names the action")
  return where
end

-- W before B: move W(chunk 2, mb 1) on stage 2 in front of its B.
local zh = S.zb_h1 { stages = 2, microbatches = 2 }
local p = copy(zh)
local iw, ib = find(p[2], "W", 2, 1), find(p[2], "B", 2, 1)
local w = table.remove(p[2], iw)
table.insert(p[2], ib, w)
local where = rejects(p, string.format("stage 2 action %d (W chunk 2 mb 1): W before B", ib), "W before B")
tap.is_deeply({ where.stage, where.index }, { 2, ib }, "W before B: the third result locates it")

-- B before F.
p = copy(S.one_f_one_b { stages = 1, microbatches = 2 })
p[1] = { { op = "B", chunk = 1, mb = 1, w = true }, { op = "F", chunk = 1, mb = 1 },
  { op = "F", chunk = 1, mb = 2 }, { op = "B", chunk = 1, mb = 2, w = true } }
rejects(p, "stage 1 action 1 (B+W chunk 1 mb 1): B before F", "B before F")

-- Missing recv: the send on stage 1 has no partner.
p = copy(S.one_f_one_b { stages = 2, microbatches = 2 })
local ir = find(p[2], "recv_fwd", 1, 2)
table.remove(p[2], ir)
local is = find(p[1], "send_fwd", 1, 2)
rejects(p, string.format("stage 1 action %d (send_fwd chunk 1 mb 2 to stage 2): no matching recv_fwd on stage 2", is),
  "missing recv")

-- Missing send: the F on stage 2 would read an input nobody sends.
p = copy(S.one_f_one_b { stages = 2, microbatches = 2 })
table.remove(p[1], find(p[1], "send_fwd", 1, 1))
rejects(p, string.format("stage 2 action %d (recv_fwd chunk 1 mb 1 from stage 1): no matching send_fwd on stage 1",
  find(p[2], "recv_fwd", 1, 1)), "missing send")

-- F before its input arrives.
p = copy(S.one_f_one_b { stages = 2, microbatches = 1 })
p[2] = { { op = "F", chunk = 2, mb = 1 }, { op = "recv_fwd", chunk = 1, mb = 1, peer = 1 },
  { op = "B", chunk = 2, mb = 1, w = true }, { op = "send_bwd", chunk = 2, mb = 1, peer = 1 } }
rejects(p, "stage 2 action 1 (F chunk 2 mb 1): F before its input is received (recv_fwd chunk 1 mb 1)",
  "F before recv")

-- Cyclic wait: stage 1 waits for a gradient before sending the activation stage 2 waits for.
local cyc = { kind = "cyclic", stages = 2, chunks = 1, microbatches = 1 }
cyc[1] = { { op = "recv_bwd", chunk = 2, mb = 1, peer = 2 }, { op = "F", chunk = 1, mb = 1 },
  { op = "send_fwd", chunk = 1, mb = 1, peer = 2 }, { op = "B", chunk = 1, mb = 1, w = true } }
cyc[2] = { { op = "recv_fwd", chunk = 1, mb = 1, peer = 1 }, { op = "F", chunk = 2, mb = 1 },
  { op = "B", chunk = 2, mb = 1, w = true }, { op = "send_bwd", chunk = 2, mb = 1, peer = 1 } }
local cyc_msg = "stage 1 action 1 (recv_bwd chunk 2 mb 1 from stage 2): deadlock (%s sends): "
  .. "stage 1 waits at action 1 (recv_bwd chunk 2 mb 1 from stage 2) for stage 2; "
  .. "stage 2 waits at action 1 (recv_fwd chunk 1 mb 1 from stage 1) for stage 1"
rejects(cyc, cyc_msg:format("blocking"), "cyclic wait")
rejects(cyc, cyc_msg:format("buffered"), "cyclic wait with buffered sends", { sends = "buffered" })

-- Send/send: both stages send first, then receive. Fine when sends are buffered, a deadlock
-- when a send blocks until its receive is posted (NCCL-style rendezvous).
local ss = { kind = "send-send", stages = 2, chunks = 1, microbatches = 2 }
ss[1] = { { op = "F", chunk = 1, mb = 1 }, { op = "send_fwd", chunk = 1, mb = 1, peer = 2 },
  { op = "F", chunk = 1, mb = 2 }, { op = "send_fwd", chunk = 1, mb = 2, peer = 2 },
  { op = "recv_bwd", chunk = 2, mb = 1, peer = 2 }, { op = "B", chunk = 1, mb = 1, w = true },
  { op = "recv_bwd", chunk = 2, mb = 2, peer = 2 }, { op = "B", chunk = 1, mb = 2, w = true } }
ss[2] = { { op = "recv_fwd", chunk = 1, mb = 1, peer = 1 }, { op = "F", chunk = 2, mb = 1 },
  { op = "B", chunk = 2, mb = 1, w = true }, { op = "send_bwd", chunk = 2, mb = 1, peer = 1 },
  { op = "recv_fwd", chunk = 1, mb = 2, peer = 1 }, { op = "F", chunk = 2, mb = 2 },
  { op = "B", chunk = 2, mb = 2, w = true }, { op = "send_bwd", chunk = 2, mb = 2, peer = 1 } }
tap.ok(S.validate(ss, { sends = "buffered" }), "send-then-recv passes with buffered sends")
rejects(ss, "stage 1 action 4 (send_fwd chunk 1 mb 2 to stage 2): deadlock (blocking sends): "
  .. "stage 1 waits at action 4 (send_fwd chunk 1 mb 2 to stage 2) for stage 2; "
  .. "stage 2 waits at action 4 (send_bwd chunk 2 mb 1 to stage 1) for stage 1", "send/send deadlock with blocking sends")
tap.error_like(function() S.simulate(ss, { sends = "blocking" }) end, "schedule%.simulate: stage 1 action 4",
  "simulate with blocking sends refuses it")
tap.ok(S.simulate(ss).makespan > 0, "simulate (buffered sends by default) runs it")
tap.error_like(function() S.simulate(cyc) end, "schedule%.simulate: stage 1 action 1 %(recv_bwd", "simulate refuses a cyclic wait")

-- Wrong peer.
p = copy(S.one_f_one_b { stages = 3, microbatches = 1 })
local k = find(p[1], "send_fwd", 1, 1)
p[1][k].peer = 3
rejects(p, string.format("stage 1 action %d (send_fwd chunk 1 mb 1 to stage 3): wrong peer: chunk 2 lives on stage 2", k),
  "wrong peer")

-- A missing W.
p = copy(zh)
table.remove(p[1], find(p[1], "W", 1, 2))
rejects(p, "stage 1: chunk 1 mb 2 has no W", "missing W")

-- W out of B order: a chunk's wgrad store is a FIFO in B order, so W2 before W1 (after B1, B2)
-- would compute mb 1's wgrad under mb 2's name.
p = copy(S.zb_h1 { stages = 2, microbatches = 2 })
local w1, w2 = find(p[2], "W", 2, 1), find(p[2], "W", 2, 2)
local b1, b2 = find(p[2], "B", 2, 1), find(p[2], "B", 2, 2)
tap.ok(b1 < b2 and b2 < w1 and w1 < w2, "zb_h1's last stage runs B1, B2, then W1, W2")
p[2][w1], p[2][w2] = p[2][w2], p[2][w1]
where = rejects(p, string.format("stage 2 action %d (W chunk 2 mb 2): W of chunk 2 must follow its B order; "
  .. "the wgrad store's head is mb 1", w1), "W out of B order")
tap.is_deeply({ where.stage, where.index }, { 2, w1 }, "W out of B order: the third result locates it")
p = copy(S.one_f_one_b { stages = 1, microbatches = 2 })
p[1] = { { op = "F", chunk = 1, mb = 1 }, { op = "F", chunk = 1, mb = 2 }, { op = "B", chunk = 1, mb = 1 },
  { op = "B", chunk = 1, mb = 2, w = true }, { op = "W", chunk = 1, mb = 1 } }
rejects(p, "stage 1 action 4 (B+W chunk 1 mb 2): the fused W of chunk 1 must follow its B order; the wgrad store's head is mb 1",
  "a fused B+W while an earlier B's W is queued")
p[1] = { { op = "F", chunk = 1, mb = 1 }, { op = "F", chunk = 1, mb = 2 }, { op = "B", chunk = 1, mb = 1 },
  { op = "W", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 2, w = true } }
tap.ok(S.validate(p), "the same with W1 before the fused B+W2 passes")

-- A W after a fused B+W.
p = copy(S.one_f_one_b { stages = 1, microbatches = 1 })
p[1][#p[1] + 1] = { op = "W", chunk = 1, mb = 1 }
rejects(p, "stage 1 action 3 (W chunk 1 mb 1): W after a fused B+W", "W after a fused B")

-- Duplicate F.
p = copy(S.one_f_one_b { stages = 1, microbatches = 2 })
table.insert(p[1], 2, { op = "F", chunk = 1, mb = 1 })
rejects(p, "stage 1 action 2 (F chunk 1 mb 1): duplicate F", "duplicate F")

-- A chunk computed on two stages.
p = copy(S.one_f_one_b { stages = 2, microbatches = 1 })
table.insert(p[2], 1, { op = "F", chunk = 1, mb = 1 })
rejects(p, "stage 2 action 1 (F chunk 1 mb 1): chunk 1 belongs to stage 1", "chunk on the wrong stage")

-- Malformed actions.
p = copy(S.one_f_one_b { stages = 1, microbatches = 1 })
p[1][1] = { op = "X", chunk = 1, mb = 1 }
rejects(p, "stage 1 action 1 (X chunk 1 mb 1): unknown op X", "unknown op")
p = copy(S.one_f_one_b { stages = 2, microbatches = 2 })
p[1][1].mb = 3
rejects(p, "stage 1 action 1 (F chunk 1 mb 3): mb must be an integer in 1..2", "mb out of range")
local okh, errh = S.validate({ stages = 0, microbatches = 1 })
tap.ok(not okh and errh:find("stages", 1, true), "a plan without stages is rejected")

-- A list past the last stage, and w that is not a boolean.
p = copy(S.one_f_one_b { stages = 2, microbatches = 1 })
p[3] = { { op = "F", chunk = 1, mb = 1 } }
rejects(p, "plan[3] is not a stage: the plan has 2 stages", "an extra plan[3] on a 2-stage plan")
p = copy(S.one_f_one_b { stages = 2, microbatches = 1 })
local kb = find(p[1], "B", 1, 1)
p[1][kb].w = "yes"
rejects(p, string.format("stage 1 action %d (B+W chunk 1 mb 1): w must be true or false, got string yes", kb), "w = \"yes\"")

tap.done_testing()
