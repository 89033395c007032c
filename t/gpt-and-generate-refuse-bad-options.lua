-- gpt-and-generate-refuse-bad-options.lua — examples/gpt.lua and examples/generate.lua refuse options they used to
-- accept or fail on deep in the library: an unknown --schedule without --pipeline, a known one without --pipeline
-- (it would be ignored), a --min-lr given above --lr (a
-- default above --lr becomes --lr / 10), --digits
-- past its bound (the context would be 2*digits+1), --dtype f64, generate.lua's --max-tokens < 1, --temperature < 0
-- and --top-p outside (0, 1] — each a usage error (exit 2) naming the option, with the usage, before anything
-- ran; and a --val token file with a bad header is reported as a bad header.
local tap = require "tap"
local tg = require "tegraph"
local ex = require "run_example"

local SMALL = "--steps 2 --layers 1 --width 16 --heads 2 --batch 2 --microbatches 1 --samples 0 --eval 0 --quiet "
for _, case in ipairs {
  { "gpt.lua", "--schedule zz", "%-%-schedule must be one of gpipe, 1f1b, interleaved, zb_h1, zb_v %(got 'zz'%)" },
  { "gpt.lua", "--schedule zb_v", "%-%-schedule needs %-%-pipeline N %(N > 1%)" },
  { "gpt.lua", "--lr 1e-3 --min-lr 1", "%-%-min%-lr 1 is above %-%-lr 0%.001" },
  { "gpt.lua", "--digits 100000", "%-%-digits must be at most 64 %(got '100000'%)" },
  { "gpt.lua", "--dtype f64", "%-%-dtype must be f32 or bf16 %(got 'f64'%)" },
  { "generate.lua", "--max-tokens -3", "%-%-max%-tokens must be at least 1 %(got '%-3'%)" },
  { "generate.lua", "--max-tokens 0", "%-%-max%-tokens must be at least 1 %(got '0'%)" },
  { "generate.lua", "--temperature -1", "%-%-temperature must be at least 0 %(got '%-1'%)" },
  { "generate.lua", "--top-p 2", "%-%-top%-p must be at most 1 %(got '2'%)" },
  { "generate.lua", "--top-p 0", "%-%-top%-p must be in %(0, 1%] %(got 0%)" },
  { "generate.lua", "--batch 0", "%-%-batch must be at least 1 %(got '0'%)" },
  { "generate.lua", "--dtype f64", "%-%-dtype must be f32 or bf16 %(got 'f64'%)" },
} do
  local script, args, msg = case[1], case[2], case[3]
  local c, so, se = ex.run_cpu(script, (script == "gpt.lua" and SMALL or "") .. args)
  tap.is(c, 2, script .. " " .. args .. " exits 2")
  tap.like(se, "^" .. script:gsub("%p", "%%%0") .. ": " .. msg .. "[^\n]*\nusage: tegraph run examples/" ..
    script:gsub("%p", "%%%0"), "... naming the option, with the usage")
  tap.is(so, "", "... before anything ran")
end

-- an --lr below the --min-lr default, --min-lr not given: the decay goes to a tenth of --lr
local logdir = ex.tmpdir()
local c0 = ex.run_cpu("gpt.lua", SMALL:gsub("%-%-steps 2", "--steps 3") .. "--warmup 1 --lr 1e-4 --log " .. ex.q(logdir .. "/l.jsonl"))
tap.is(c0, 0, "gpt.lua --lr 1e-4 (below the --min-lr default) runs")
local lh = io.open(logdir .. "/l.jsonl")
local last_lr
for line in lh and lh:lines() or function() end do last_lr = tonumber(line:match('"lr":([^,}]+)')) end
if lh then lh:close() end
tap.ok(last_lr and math.abs(last_lr - 1e-5) < 1e-12, "... its cosine decay ending at --lr / 10 = 1e-05 (got " .. tostring(last_lr) .. ")")
os.execute("rm -rf " .. ex.q(logdir))

-- the --digits bound still trains at the bound's end of the scale that tests use
local c = ex.run_cpu("gpt.lua", SMALL .. "--digits 8")
tap.is(c, 0, "gpt.lua --digits 8 runs")

-- --val: a token file with a bad header next to --data with one is a bad header, not a token id
local dir = ex.tmpdir()
local good, bad = dir .. "/task.bin", dir .. "/badmagic.bin"
local toks = {}
for i = 1, 4000 do toks[i] = i % 12 end
tg.data.write(good, toks)
local f = assert(io.open(good, "rb"))
local bytes = f:read("a")
f:close()
ex.write(bad, string.pack("<i4", 12345) .. bytes:sub(5))
local so, se
c, so, se = ex.run_cpu("gpt.lua", SMALL .. "--data " .. ex.q(good) .. " --val " .. ex.q(bad))
tap.isnt(c, 0, "gpt.lua --val with a bad header fails")
tap.like(se, "badmagic%.bin: bad magic 12345 in the header %(expected 20240520", "... saying the header is bad")
tap.ok(not se:find("token id"), "... not that a token id is out of range")
c = ex.run_cpu("gpt.lua", SMALL .. "--data " .. ex.q(good) .. " --val " .. ex.q(good))
tap.is(c, 0, "gpt.lua --val with a good file runs")
os.execute("rm -rf " .. ex.q(dir))

ex.cleanup()
tap.done_testing()
