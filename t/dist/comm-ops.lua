-- dist/comm-ops.lua — every comm op gives the right values on every rank (f32, bf16, i32; sync and async; in place), sub-groups, bad calls error clearly.
local tg = require "tegraph"
local t = require "dist_tap"

local comm = tg.comm
local n, r = t.size, t.rank
local dev = tg.default_device()
local S = n * (n + 1) / 2 -- sum over ranks of (rank + 1)

local function T(vals, dtype) return tg.tensor(vals, { dtype = dtype or "f32", device = dev }) end

-- all_reduce, every op and dtype
t.close(comm.all_reduce(T { r + 1, 2 * (r + 1), -(r + 1) }), { S, 2 * S, -S }, 0, "all_reduce sum (f32)")
t.close(comm.all_reduce(T { r + 1, 4 * (r + 1) }, { op = "avg" }), { S / n, 4 * S / n }, 0, "all_reduce avg (f32)")
t.close(comm.all_reduce(T { r, -r }, { op = "max" }), { n - 1, 0 }, 0, "all_reduce max")
t.close(comm.all_reduce(T { r, -r }, { op = "min" }), { 0, -(n - 1) }, 0, "all_reduce min")
t.close(comm.all_reduce(T({ r + 1, 0.5 * (r + 1) }, "bf16")), { S, 0.5 * S }, 0, "all_reduce sum (bf16)")
t.close(comm.all_reduce(T({ r + 1, 2 }, "bf16"), { op = "avg" }), { S / n, 2 }, 0, "all_reduce avg (bf16)")
t.close(comm.all_reduce(T({ r + 1, 100 }, "i32")), { S, 100 * n }, 0, "all_reduce sum (i32)")
t.close(comm.all_reduce(T({ r, 7 - r }, "i32"), { op = "max" }), { n - 1, 7 }, 0, "all_reduce max (i32)")
-- bf16 sums round at every step, like NCCL: 256 + 1 is 256 in bf16
t.close(comm.all_reduce(T({ r == 0 and 256 or 1 }, "bf16")), { n == 2 and 256 or 256 + (n - 1) }, n == 2 and 0 or 8,
  "bf16 sums round through bf16")

-- async: the request completes in place and wait returns the tensor
local x = T { r + 1, r + 1 }
local h = comm.all_reduce(x, { op = "sum", async = true })
t.ok(tostring(h):find("all_reduce") ~= nil, "an async op returns a request (" .. tostring(h) .. ")")
local got = h:wait()
t.ok(got == x, "wait() returns the op's tensor")
t.close(x, { S, S }, 0, "async all_reduce result after wait")
t.ok(h:test() == true, "test() is true after wait")
h:wait() -- waiting twice is fine
-- several in flight at once, waited in reverse
local xs, hs = {}, {}
for k = 1, 4 do
  xs[k] = T { k * (r + 1) }
  hs[k] = comm.all_reduce(xs[k], { async = true })
end
for k = 4, 1, -1 do hs[k]:wait() end
local okall = true
for k = 1, 4 do okall = okall and xs[k]:totable()[1] == k * S end
t.ok(okall, "four async all_reduces in flight complete with their own results")

-- reduce_scatter: out = rank's slice of the sum
local K = 3
local inv = {}
for i = 1, n * K do inv[i] = r * 100 + i end
local out = comm.reduce_scatter(T { 0, 0, 0 }, T(inv))
local want = {}
for j = 1, K do want[j] = 100 * (n * (n - 1) / 2) + n * (r * K + j) end
t.close(out, want, 0, "reduce_scatter sum: each rank gets its slice")
local buf = T(inv)
comm.reduce_scatter(buf:narrow(r * K + 1, K), buf, { op = "avg" })
local wavg = {}
for j = 1, K do wavg[j] = want[j] / n end
t.close(buf:narrow(r * K + 1, K), wavg, 0, "reduce_scatter avg in place (out = this rank's slice of in)")
local hr = comm.reduce_scatter(T { 0, 0, 0 }, T(inv), { async = true })
t.close(hr:wait(), want, 0, "reduce_scatter async")

-- all_gather
local g = comm.all_gather(tg.zeros({ n * 2 }, { device = dev }), T { r, r + 0.5 })
local wg = {}
for q = 0, n - 1 do
  wg[#wg + 1] = q
  wg[#wg + 1] = q + 0.5
end
t.close(g, wg, 0, "all_gather concatenates in rank order")
local gb = tg.zeros({ n * 2 }, { device = dev })
gb:narrow(r * 2 + 1, 2):copy_(T { r, r + 0.5 })
comm.all_gather(gb, gb:narrow(r * 2 + 1, 2), { async = true }):wait()
t.close(gb, wg, 0, "all_gather in place (in = this rank's slice of out), async")
local wi = {}
for q = 0, n - 1 do wi[q + 1] = q + 10 end
t.close(comm.all_gather(tg.zeros({ n }, { dtype = "i32", device = dev }), T({ r + 10 }, "i32")), wi, 0, "all_gather i32")

-- broadcast
t.close(comm.broadcast(T { r, r, r }, n - 1), { n - 1, n - 1, n - 1 }, 0, "broadcast from the last rank (root as a number)")
t.close(comm.broadcast(T({ r + 1 }, "bf16"), { root = 0 }), { 1 }, 0, "broadcast from rank 0 ({root=0}, bf16)")
t.close(comm.broadcast(T { r * 2 }, { root = 1, async = true }):wait(), { 2 }, 0, "broadcast async")

-- send / recv around a ring
local right, left = (r + 1) % n, (r - 1 + n) % n
local inbox = T { 0, 0 }
local hrecv, hsend = comm.group(function() -- NCCL launches the pair together (MPI: nonblocking anyway)
  return comm.recv(inbox, left, { async = true }), comm.send(T { r * 10 + 1, r * 10 + 2 }, right, { async = true })
end)
hsend:wait()
hrecv:wait()
t.close(inbox, { left * 10 + 1, left * 10 + 2 }, 0, "send/recv around a ring (in a group)")
local ok_blocking, err_blocking = pcall(comm.group, function() comm.all_reduce(T { 1 }) end)
t.ok(not ok_blocking and tostring(err_blocking):find("inside a group of ops must be async", 1, true) ~= nil,
  "a blocking op inside a group is refused before it is queued")
-- all_gather from another, non-overlapping part of the output's storage (not in place)
do
  local vals, want = {}, {}
  for i = 1, n do vals[i], want[i] = -1, 10 * i end
  vals[n + 1] = 10 * (r + 1)
  local buf = T(vals)
  comm.all_gather(buf:narrow(1, n), buf:narrow(n + 1, 1))
  t.close(buf:narrow(1, n), want, 0, "all_gather whose input shares the output's storage without overlapping")
end
-- blocking pairs: even ranks send first
local back = T { -1 }
if r % 2 == 0 then
  comm.send(T { r + 0.25 }, right)
  comm.recv(back, left)
else
  comm.recv(back, left)
  comm.send(T { r + 0.25 }, right)
end
t.close(back, { left + 0.25 }, 0, "blocking send then recv")
-- several messages between one pair (ranks 0 and 1) arrive in order; the other ranks only agree
if n >= 2 then
  local in_order = r >= 2 -- not in the pair: nothing to check here
  if r < 2 then
    local peer = 1 - r
    local rq = {}
    local boxes = {}
    comm.group(function()
      for k = 1, 3 do
        boxes[k] = T { 0 }
        rq[#rq + 1] = comm.recv(boxes[k], peer, { async = true })
      end
      for k = 1, 3 do rq[#rq + 1] = comm.send(T { r * 100 + k }, peer, { async = true }) end
    end)
    for _, q in ipairs(rq) do q:wait() end
    in_order = boxes[1]:totable()[1] == peer * 100 + 1 and boxes[2]:totable()[1] == peer * 100 + 2
      and boxes[3]:totable()[1] == peer * 100 + 3
  end
  t.ok(in_order, "p2p messages between a pair match in issue order")
else
  t.skip("p2p messages need two ranks")
end

-- barrier: no rank leaves it before every rank has entered. Rank 0 enters last (it waits 0.2 s
-- first); the ranks share one monotonic clock (one host), so each rank's exit time is compared
-- with the latest entry time, gathered as whole seconds and microseconds.
do
  local function stamp()
    local s = tg.time()
    local whole = math.floor(s)
    return whole, math.floor((s - whole) * 1e6)
  end
  if r == 0 then
    local t0 = tg.time()
    while tg.time() - t0 < 0.2 do end
  end
  local es, eu = stamp()
  comm.barrier()
  local xs, xu = stamp()
  local entries = tg.zeros({ 2 * n }, { dtype = "i32", device = dev })
  comm.all_gather(entries, T({ es, eu }, "i32"))
  local e = entries:totable()
  local ls, lu = e[1], e[2]
  for k = 2, n do
    if e[2 * k - 1] > ls or (e[2 * k - 1] == ls and e[2 * k] > lu) then ls, lu = e[2 * k - 1], e[2 * k] end
  end
  t.ok(xs > ls or (xs == ls and xu >= lu), string.format("barrier: left at %d.%06d, after the last rank entered (%d.%06d)",
    xs, xu, ls, lu))
end

-- sub-communicators
local lay = comm.split { dp = n }
t.ok(lay.dp:size() == n and lay.pp:size() == 1 and lay.dp_rank == r and lay.pp_rank == 0,
  "split{dp=n}: one data-parallel group of every rank, pipeline groups of one")
t.close(lay.dp:all_reduce(T { r + 1 }), { S }, 0, "all_reduce over the dp group")
t.close(lay.pp:all_reduce(T { r + 1 }), { r + 1 }, 0, "all_reduce over a group of one is the identity")
if n % 2 == 0 then
  local l2 = comm.split { pp = 2 }
  t.ok(l2.dp:size() == n / 2 and l2.pp:size() == 2 and l2.pp_rank == r // (n // 2),
    "split{pp=2}: stages of n/2 ranks, rank = pp_rank * dp + dp_rank")
  t.close(l2.pp:all_reduce(T { r }), { (r % (n // 2)) * 2 + n // 2 }, 0, "all_reduce over a pipeline group")
  local odd = comm.split(r % 2)
  t.close(odd:all_reduce(T { 1 }), { n / 2 }, 0, "split(color): groups of the same color")
  t.ok(odd:rank() == r // 2, "split(color): ranks ordered by key (default: world rank)")
end

-- bad calls name the problem
local function err_of(f)
  local okc, e = pcall(f)
  return okc and "" or tostring(e)
end
t.ok(err_of(function() comm.reduce_scatter(T { 0, 0 }, T { 1, 2, 3 }) end):find("expected " .. n .. " ranks x 2") ~= nil,
  "reduce_scatter with a wrong size names the expected shape")
t.ok(err_of(function() comm.send(T { 1 }, r) end):find("peer " .. r .. " is not another rank") ~= nil,
  "send to oneself is refused")
t.ok(err_of(function() comm.all_reduce(T({ 1 }, "i32"), { op = "avg" }) end):find("avg of i32") ~= nil,
  "avg of integers is refused")
t.ok(err_of(function() comm.all_reduce(T { 1 }, { op = "mean" }) end):find('op must be "sum"') ~= nil,
  "an unknown op is refused")
t.ok(err_of(function() comm.broadcast(T { 1 }, n) end):find("root " .. n .. " is not a rank") ~= nil,
  "a bad broadcast root is refused")
t.ok(comm.size() == n and comm.rank() == r and comm.local_rank() == r and comm.local_size() == n,
  "rank, size, local rank and size (one node)")
t.ok(type(comm.timeout()) == "number", "timeout() reports the wait limit")
t.ok(comm.backend():find(dev == "cpu" and "mpi" or "nccl") ~= nil, "backend: " .. comm.backend())

t.done_testing()
