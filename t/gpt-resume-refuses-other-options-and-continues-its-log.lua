-- gpt-resume-refuses-other-options-and-continues-its-log.lua — examples/gpt.lua --resume continues the checkpoint's
-- run or refuses: an option that decides the trajectory (model, data, optimizer, schedule, batches, seed) set
-- otherwise than the checkpoint's is named with both values (exit 2, nothing loaded or trained), a --steps not
-- beyond the checkpoint's step is "nothing to train", while output options (--log, --out, --keep, --save-every,
-- ...) stay free; the resumed run's --log keeps the records up to the checkpoint and appends; --keep never
-- removes the checkpoint just written; an unusable --out or --export-hf, and --init-from a checkpoint, are
-- refused before training; so is a checkpoint whose loader position is not a number.
local tap = require "tap"
local ex = require "run_example"

local base = ex.tmpdir()
local SMALL = "--width 16 --layers 1 --heads 2 --batch 2 --microbatches 1 --warmup 1 --quiet --samples 0 --eval 0 "
local function run(args) return ex.run_cpu("gpt.lua", SMALL .. args) end
local function lines(path)
  local out = {}
  local f = io.open(path, "r")
  if not f then return out end
  for l in f:lines() do out[#out + 1] = l end
  f:close()
  return out
end
local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

local ck, log = base .. "/ck", base .. "/run.jsonl"
local c, so, se = run("--steps 6 --out " .. ex.q(ck) .. " --save-every 3 --log " .. ex.q(log))
tap.is(c, 0, "a 6-step run saving every 3 steps (" .. se:sub(1, 120) .. ")")
local full = lines(log)

-- trajectory options: refused naming each option and both values
for _, case in ipairs {
  { "--steps 6 --lr 0.01", "%-%-lr 0%.01 differs from the checkpoint's 0%.003; resume with the same options" },
  { "--steps 6 --heads 4", "%-%-heads 4 differs from the checkpoint's 2" },
  { "--steps 6 --seed 7 --batch 3", "%-%-batch 3 differs from the checkpoint's 2; %-%-seed 7 differs from the " ..
    "checkpoint's 1234" },
  { "--steps 6 --weight-decay 0.5", "%-%-weight%-decay 0%.5 differs from the checkpoint's %(not given%)" },
  { "--steps 6 --task sort", "%-%-task sort differs from the checkpoint's reverse" },
  { "--steps 6 --microbatches 2", "%-%-microbatches 2 differs from the checkpoint's 1" },
  { "--steps 9", "%-%-steps 9 differs from the checkpoint's 6 %(the learning%-rate schedule runs to %-%-steps%)" },
  { "--steps 2", "%-%-steps 2 is not beyond the checkpoint's step 3: nothing to train" },
} do
  c, so, se = run(case[1] .. " --resume " .. ex.q(ck .. "/step_00000003"))
  tap.is(c, 2, "resume with " .. case[1] .. ": exit 2")
  tap.like(se, "^gpt%.lua: " .. case[2], "... naming the option and both values")
  tap.ok(not so:match("resumed from") and not so:match("trained"), "... before loading or training anything")
end
c, so, se = run("--steps 6 --resume " .. ex.q(ck))
tap.is(c, 2, "resuming a finished run (its latest is the last step) exits 2")
tap.like(se, "%-%-steps 6 is not beyond the checkpoint's step 6: nothing to train", "... saying there is nothing to train")

-- output options are free; the same --log continues: the first part's records stay, later ones are replaced
c, so, se = run("--steps 6 --resume " .. ex.q(ck .. "/step_00000003") .. " --log " .. ex.q(log) ..
  " --out " .. ex.q(ck) .. " --keep 1 --save-every 1 --every 1 --eval-every 2")
tap.is(c, 0, "resume with other output options (--log, --out, --keep, --save-every, --every) runs (" ..
  se:sub(1, 160) .. ")")
local res = lines(log)
tap.is(#res, 6, "the resumed run's --log holds steps 1..6 once each")
local same = #res == #full
for i = 1, 3 do same = same and res[i] == full[i] end
tap.ok(same, "... the records of steps 1..3 are the first run's, kept")
local steps = {}
for i, l in ipairs(res) do steps[i] = l:match('^{"step":(%d+)') end
tap.is(table.concat(steps, ","), "1,2,3,4,5,6", "... and the steps are in order")
local latest = lines(ck .. "/latest")[1]
tap.is(latest, "step_00000006", "--keep 1 on a resume into the same --out: latest names the checkpoint just written")
tap.ok(exists(ck .. "/step_00000006/model.safetensors") and not exists(ck .. "/step_00000005/model.safetensors"),
  "... which is there, the older ones removed")

-- a bad loader position in the checkpoint's state is refused naming it (not read as 0)
-- (a --data run: the built-in task has no loader)
local tg = require "tegraph"
run("--make-data " .. ex.q(base .. "/task.bin") .. " --tokens 2000")
c, so, se = run("--steps 8 --data " .. ex.q(base .. "/task.bin") .. " --vocab 12 --context 13 --out " ..
  ex.q(base .. "/dck") .. " --save-every 4")
os.execute("cp -r " .. ex.q(base .. "/dck/step_00000004") .. " " .. ex.q(base .. "/dpos"))
local rp = base .. "/dpos/rank0.safetensors"
local sf = tg.safetensors.open(rp)
local meta, ts = sf:metadata(), {}
for _, n in ipairs(sf:names()) do ts[n] = sf:read(n) end
sf:close()
meta["state.loader_pos"] = "abc"
tg.save(rp, ts, meta)
c, so, se = run("--steps 8 --data " .. ex.q(base .. "/task.bin") .. " --vocab 12 --context 13 --resume " ..
  ex.q(base .. "/dpos"))
tap.ok(c ~= 0 and not so:match("trained"), "a checkpoint whose loader position is not a number is refused")
tap.like(se, "dpos: bad checkpoint state: loader_pos is 'abc'", "... naming the checkpoint and the field")

-- --out and --export-hf that cannot be written: refused before training
ex.write(base .. "/afile", "x\n")
c, so, se = run("--steps 3 --out " .. ex.q(base .. "/afile"))
tap.ok(c ~= 0 and not so:match("trained"), "an --out that is a file stops the run before training")
tap.like(se, "%-%-out: .*afile: cannot make the directory", "... naming --out and the path")
c, so, se = run("--steps 3 --export-hf " .. ex.q(base .. "/nodir/model.safetensors"))
tap.ok(c ~= 0 and not so:match("trained"), "an --export-hf in a missing directory stops the run before training")
tap.like(se, "%-%-export%-hf: cannot write .*nodir/model%.safetensors", "... naming --export-hf and the path")

-- --init-from a checkpoint (directory or its model file): said so
c, so, se = run("--steps 3 --init-from " .. ex.q(ck))
tap.ok(c ~= 0, "--init-from a checkpoint directory is refused")
tap.like(se, "is a directory holding a tegraph checkpoint, not a GPT%-2 model file", "... saying it is a checkpoint")
c, so, se = run("--steps 3 --init-from " .. ex.q(ck .. "/step_00000006/model.safetensors"))
tap.like(se, "a tegraph checkpoint's model file", "--init-from a checkpoint's model.safetensors says it is one")

os.execute("rm -rf " .. ex.q(base))
ex.cleanup()
tap.done_testing()
