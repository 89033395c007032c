-- gpt-graph-full-gives-the-eager-losses.lua — examples/gpt.lua --graph full (full-iteration capture: an eager first
-- step, then the whole step captured once and replayed) logs the same losses as the eager run, bit for bit, and says what it runs; --on-nan skip with it and an unknown --graph word are refused.
local tap = require "tap"
local R = require "run_example"

local base = os.tmpname()
local logs = { base .. "-eager.jsonl", base .. "-full.jsonl" }

-- The loss fields of a --log file, as written, in step order.
local function losses(path)
  local out = {}
  local f = io.open(path, "r")
  if not f then return out end
  for line in f:lines() do
    local step = tonumber(line:match('"step":(%d+)'))
    if step then out[step] = line:match('"loss":([^,}]+)') end
  end
  f:close()
  return out
end

local common = "--steps 8 --eval 0 --samples 0 --microbatches 2 --clip 0.5 --every 4 --log "
local ok1, out1 = R.run("gpt.lua", common .. R.q(logs[1]))
local ok2, out2 = R.run("gpt.lua", common .. R.q(logs[2]) .. " --graph full")
tap.ok(ok1, "the eager run finishes")
if not ok1 then tap.diag(out1) end
tap.ok(ok2, "the --graph full run finishes")
if not ok2 then tap.diag(out2) end
tap.like(out2, "full%-iteration capture", "--graph full says it captures the whole step")
local e, f = losses(logs[1]), losses(logs[2])
local same = #e == 8 and #f == 8
for s = 1, 8 do same = same and e[s] ~= nil and e[s] == f[s] end
tap.ok(same, string.format("the 8 logged losses are equal (first %s / %s, last %s / %s)", tostring(e[1]), tostring(f[1]),
  tostring(e[8]), tostring(f[8])))
tap.ok(e[1] ~= e[8], "the loss changes over the run")

local ok3, out3 = R.run("gpt.lua", "--steps 2 --eval 0 --samples 0 --graph full --on-nan skip")
tap.ok(not ok3, "--graph full with --on-nan skip fails")
tap.like(out3, "use %-%-on%-nan stop with %-%-graph full", "naming the way out")
local ok4, out4 = R.run("gpt.lua", "--steps 2 --graph=partly")
tap.ok(not ok4, "an unknown --graph word fails")
tap.like(out4, "%-%-graph is a flag: .* or %-%-graph full %(got 'partly'%)", "listing what --graph takes")

for _, p in ipairs(logs) do os.remove(p) end
os.remove(base)
tap.done_testing()
