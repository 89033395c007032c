-- dist/trace-ddp.lua — a trace of ddp on every rank: Chrome trace JSON (pid = rank) with a compute span per module backward per
-- microbatch and step, exactly one comm span per bucket all-reduce per step (named for its bucket, with its bytes), non-negative
-- durations, and a summary that adds up (overlapped <= comm busy, exposed = busy - overlapped).
local tg = require "tegraph"
local t = require "dist_tap"
local json = require "json"
local reduce = require "tegraph.reduce"

local D, H, TOK, M, STEPS = 8, 12, 5, 2, 2
local BUCKET = 200 -- elements: several buckets

tg.manual_seed(1234)
local model = tg.nn.Sequential {
  tg.nn.Linear(D, H, { name = "fc_in", fuse_wgrad_accumulation = true }),
  tg.nn.LayerNormMLP(H, 2 * H, { name = "mlp", fuse_wgrad_accumulation = true }),
  tg.nn.LayerNormLinear(H, D, { name = "proj", fuse_wgrad_accumulation = true }),
  name = "net",
}
local ddp = reduce.ddp { params = model:parameters(), bucket_numel = BUCKET, op = "avg" }
local nb = #ddp.buckets
t.ok(nb >= 3, string.format("the model's grads span several buckets (%d)", nb))
local bucket_bytes = {}
for i, b in ipairs(ddp.buckets) do bucket_bytes[i] = b.tensor:numel() * 4 end

tg.manual_seed(7 + t.rank)
local x, dy = tg.randn({ TOK, D }), tg.randn({ TOK, D })
local function step()
  tg.step_begin { microbatches = M }
  for m = 1, M do model:forward(x, m) end
  for m = M, 1, -1 do model:backward(dy, m) end
  tg.step_end()
  ddp:finish()
end
step() -- untraced warm-up
local path = os.tmpname()
tg.trace.start()
for _ = 1, STEPS do step() end
local sum = tg.trace.stop(path, { quiet = true })

local ok, doc = pcall(json.read, path)
os.remove(path)
t.ok(ok and type(doc) == "table" and type(doc.traceEvents) == "table", "each rank's trace is Chrome trace JSON")
doc = ok and doc or { traceEvents = {} }

local pid_ok, bad_dur, backward, comm, steps, nx = true, 0, {}, {}, {}, 0
local comm_bytes_ok = true
for _, e in ipairs(doc.traceEvents) do
  if e.pid ~= t.rank then pid_ok = false end
  if e.ph == "X" then
    nx = nx + 1
    if not (e.dur >= 0 and e.ts >= 0) then bad_dur = bad_dur + 1 end
    if e.cat == "compute" and e.args.phase == "backward" then
      local k = string.format("%s/%s %d %d", e.args.module, e.args.type, e.args.step, e.args.mb)
      backward[k] = (backward[k] or 0) + 1
      steps[e.args.step] = true
    elseif e.cat == "comm" then
      local b = tonumber(e.name:match("^all_reduce ddp bucket (%d+)$"))
      local k = string.format("%s %d", tostring(b), e.args.step)
      comm[k] = (comm[k] or 0) + 1
      if b and e.args.bytes ~= bucket_bytes[b] then comm_bytes_ok = false end
    end
  end
end
t.ok(pid_ok, "every event carries the rank as its pid")
t.ok(bad_dur == 0, "every span has a non-negative start and duration")
local traced = {}
for s in pairs(steps) do traced[#traced + 1] = s end
table.sort(traced)
t.ok(#traced == STEPS, string.format("the spans cover the %d traced steps (%s)", STEPS, table.concat(traced, ",")))

local missing = {}
for _, s in ipairs(traced) do
  -- (the MLP's gelu runs in fc1's GEMM epilogue: no module of its own)
  for _, name in ipairs { "net/Sequential", "fc_in/Linear", "mlp/LayerNormMLP", "mlp.norm/LayerNorm", "mlp.fc1/Linear",
                          "mlp.fc2/Linear", "proj/LayerNormLinear", "proj.norm/LayerNorm", "proj/Linear" } do
    for m = 1, M do
      local k = string.format("%s %d %d", name, s, m)
      if backward[k] ~= 1 then missing[#missing + 1] = k .. ": " .. tostring(backward[k] or 0) end
    end
  end
end
t.ok(#missing == 0, "a compute span for every module's backward, per microbatch and step" ..
  (#missing > 0 and (" (" .. table.concat(missing, ", ") .. ")") or ""))

local wrong, ncomm = {}, 0
for _, n in pairs(comm) do ncomm = ncomm + n end
for _, s in ipairs(traced) do
  for b = 1, nb do
    local n = comm[string.format("%d %d", b, s)]
    if n ~= 1 then wrong[#wrong + 1] = string.format("bucket %d step %d: %s", b, s, tostring(n or 0)) end
  end
end
t.ok(#wrong == 0 and ncomm == nb * STEPS, string.format("exactly one all_reduce span per bucket per step (%d spans, %d expected)%s",
  ncomm, nb * STEPS, #wrong > 0 and (": " .. table.concat(wrong, ", ")) or ""))
t.ok(comm_bytes_ok, "each comm span carries its bucket's bytes")

t.ok(sum.nspans == nx, "the summary counts the spans written")
t.ok(sum.comm_busy_ms > 0 and sum.compute_ms > 0, string.format("comm and compute were busy (%.3f / %.3f ms)",
  sum.comm_busy_ms, sum.compute_ms))
t.ok(sum.overlapped_ms >= 0 and sum.overlapped_ms <= sum.comm_busy_ms + 1e-9, string.format(
  "overlapped (%.3f ms) <= comm busy (%.3f ms)", sum.overlapped_ms, sum.comm_busy_ms))
t.ok(math.abs(sum.exposed_ms + sum.overlapped_ms - sum.comm_busy_ms) < 1e-9 and
  math.abs(sum.exposed_pct - 100 * sum.exposed_ms / sum.comm_busy_ms) < 1e-6, "exposed = busy - overlapped, and its percentage")
t.done_testing()
