-- dist/comm-capture.lua — collectives issued while a device captures are recorded into the graph: nothing runs at
-- capture; each replay runs them again in the captured order with the values of eager calls (on the CPU also their
-- sequence numbers: each replay is a checked call; CUDA replays run without the host and are not counted); sends,
-- receives, barriers and groups are refused while capturing. Runs on the default device (the CPU in make check;
-- on 2 GPUs: TG_DEVICE=cuda tegraph run -n 2 t/dist/comm-capture.lua).
local tg = require "tegraph"
local t = require "dist_tap"

local c = t.comm
local n, r = t.size, t.rank
local devname = tostring(tg.default_device())
local on_cpu = devname == "cpu" or devname:sub(1, 4) == "cpu:"
local on_dev = { device = tg.default_device() } -- the tensors' (and the captures') device
local N = 3

-- all_reduce (sum) in place, captured then replayed N times, against N eager calls on a twin tensor
local x = tg.tensor({ r + 1, -(r + 1), 0.5 }, on_dev)
local y = tg.tensor({ r + 1, -(r + 1), 0.5 }, on_dev)
local seq0 = c:seq()
local g = tg.stream.capture(function() c:all_reduce(x, { op = "sum", name = "captured sum" }) end, on_dev)
local seqc = c:seq()
t.ok(not on_cpu or g:size() == 1, "the captured all_reduce is one command of the graph (" .. g:size() .. ")")
t.close(x, { r + 1, -(r + 1), 0.5 }, 0, "nothing ran at capture: the tensor keeps its values")
t.ok(seqc == seq0, "capture runs no collective: the sequence number stays " .. seq0 .. " (got " .. seqc .. ")")
local seq1 = c:seq()
for _ = 1, N do g:replay() end
local dseq_replay = c:seq() - seq1
local seq2 = c:seq()
for _ = 1, N do c:all_reduce(y, { op = "sum", name = "captured sum" }) end
local dseq_eager = c:seq() - seq2
t.close(x, y, 0, N .. " replays give the values of " .. N .. " eager all_reduces, bit for bit")
local S = n * (n + 1) / 2
t.close(x, { S * n ^ (N - 1), -S * n ^ (N - 1), 0.5 * n ^ N }, 0, "and those values are the sums over ranks")
if on_cpu then
  t.ok(dseq_replay == N and dseq_eager == N,
    "each replay advances the sequence number like an eager call (replays " .. dseq_replay .. ", eager " .. dseq_eager .. ")")
else
  t.ok(dseq_replay == 0 and dseq_eager == N,
    "CUDA replays run without the host: not counted (replays " .. dseq_replay .. ", eager " .. dseq_eager .. ")")
end

-- async inside the capture: the request completes at once, its work runs at each replay; avg divides at replay
local a = tg.tensor({ 2 * (r + 1), 4 }, on_dev)
local g2 = tg.stream.capture(function()
  local h = c:all_reduce(a, { op = "avg", async = true })
  h:wait()
end, on_dev)
t.close(a, { 2 * (r + 1), 4 }, 0, "an async all_reduce captured: nothing ran at capture, its wait returned")
g2:replay()
t.close(a, { 2 * S / n, 4 }, 0, "replay runs the captured avg all_reduce")

-- the four collectives in one graph, in order, with device work around them
local K = 2
local inbuf = tg.zeros({ n * K }, on_dev)
local part = tg.zeros({ K }, on_dev)
local gath = tg.zeros({ n * K }, on_dev)
local b = tg.zeros({ 2 }, on_dev)
local base = tg.tensor((function()
  local v = {}
  for i = 1, n * K do v[i] = r * 10 + i end
  return v
end)(), on_dev)
local g3 = tg.stream.capture(function()
  inbuf:copy_(base)
  c:reduce_scatter(part, inbuf, { op = "sum" })
  c:all_gather(gath, part)
  b:copy_(part)
  c:broadcast(b, n - 1)
end, on_dev)
t.close(gath, tg.zeros({ n * K }, on_dev), 0, "reduce_scatter, all_gather and broadcast captured: nothing ran at capture")
local want = {}
for i = 1, n * K do want[i] = 10 * S - 10 * n + n * i end -- sum over ranks of (rank * 10 + i)
for rep = 1, 2 do
  gath:fill_(0)
  g3:replay()
  t.close(gath, want, 0, "replay " .. rep .. ": reduce_scatter then all_gather give the full sum")
  local last = { want[(n - 1) * K + 1], want[(n - 1) * K + 2] }
  t.close(b, last, 0, "replay " .. rep .. ": the broadcast sends the last rank's slice")
end

-- a graph holds what its collectives use: the communicator and tensors outlive the caller's handles
local z = tg.tensor({ 1 }, on_dev)
local gz = tg.stream.capture(function() c:all_reduce(z) end, on_dev)
local zt = z
z = nil
collectgarbage()
collectgarbage()
gz:replay()
gz = nil
collectgarbage()
t.close(zt, { n }, 0, "a captured collective replays after the script dropped its handles; freeing the graph is clean")

-- what cannot be captured is refused, naming it
local function err_of(f)
  local okc, e = pcall(f)
  return okc and "" or tostring(e)
end
local peer = (r + 1) % n
local one = tg.tensor({ 1 }, on_dev)
local e = err_of(function()
  tg.stream.capture(function() c:send(one, peer) end, on_dev)
end)
t.ok(e:find("send: not allowed while ", 1, true) ~= nil and e:find(" captures", 1, true) ~= nil,
  "a send inside a capture is refused: " .. e)
e = err_of(function() tg.stream.capture(function() c:barrier() end, on_dev) end)
t.ok(e:find("barrier", 1, true) ~= nil and e:find("captur") ~= nil, "a barrier inside a capture is refused: " .. e)
e = err_of(function()
  tg.stream.capture(function()
    c:group(function() c:all_reduce(one, { async = true }) end)
  end, on_dev)
end)
t.ok(e:find("group: not allowed while ", 1, true) ~= nil, "a group inside a capture is refused: " .. e)
t.close(c:all_reduce(tg.tensor({ 1 }, on_dev)), { n }, 0, "after the refusals the ranks still agree (no stray collective)")

-- ranks that captured different collectives: the first replay of the label is compared across the ranks (on the
-- CPU the check runs at replay, like an eager call's) and fails on every rank naming both, before any data moves
if on_cpu then
  local w = tg.zeros({ r == 0 and 4 or 6 }, on_dev)
  local gw = tg.stream.capture(function() c:all_reduce(w, { name = "captured mismatch" }) end, on_dev)
  e = err_of(function() gw:replay() end)
  t.ok(e:find("replay of a captured all_reduce: all_reduce: the ranks disagree: rank 0 has call #", 1, true) ~= nil and
    e:find("all_reduce of 4 f32 (sum) on cpu 'captured mismatch'; rank 1 has call #", 1, true) ~= nil and
    e:find("all_reduce of 6 f32 (sum) on cpu 'captured mismatch'", 1, true) ~= nil,
    "captured collectives that differ across ranks fail the replay naming both ranks' calls: " .. e)
  t.close(c:all_reduce(tg.tensor({ 1 }, on_dev)), { n }, 0, "and the ranks still agree afterwards")
end

t.done_testing()
