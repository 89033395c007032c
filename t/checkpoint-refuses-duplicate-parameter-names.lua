-- checkpoint-refuses-duplicate-parameter-names.lua — a checkpoint keeps each parameter under its name, so two
-- parameters of one name (two unnamed tg.nn.Linear in a Sequential: weight, bias, weight, bias) would be saved
-- as one tensor and loaded as the same values. checkpoint.save refuses them before writing anything, naming the
-- names and their positions; checkpoint.load refuses such a model before copying anything; the optimizer state
-- (NAME.m, NAME.v) is checked the same way; with distinct names the round trip restores every layer's weights.
local tap = require "tap"
local caller = require "caller"
local here, at, exists = caller.here, caller.at, caller.exists
local tg = require "tegraph"
local ck = require "tegraph.checkpoint"
local ex = require "run_example"

local base = ex.tmpdir()

-- two unnamed Linears: the names repeat
local dup = tg.nn.Sequential { tg.nn.Linear(4, 4), tg.nn.Linear(4, 4) }
local ps = dup:parameters()
tap.is(ps[1].name .. " " .. ps[3].name, "weight weight", "two unnamed Linears have parameters of one name")
local line
local err = tap.error_like(function() line = here(); ck.save(base .. "/dup", { model = dup, step = 1 }) end,
  "checkpoint%.save: parameter names repeat: 'weight' %(parameters 1, 3%), 'bias' %(parameters 2, 4%)",
  "save refuses repeated names, naming them and their positions")
tap.like(err, at(line), "... at the caller's line")
tap.like(err, "give the modules distinct names", "... saying what to do")
tap.ok(not exists(base .. "/dup/latest") and not exists(base .. "/dup/step_00000001/model.safetensors"),
  "... and nothing was written")

-- params = a list with two parameters of one name
local a, b = tg.nn.Linear(4, 2), tg.nn.Linear(4, 2)
tap.error_like(function() ck.save(base .. "/dup2", { params = { a:parameters()[1], b:parameters()[1] }, step = 1 }) end,
  "parameter names repeat: 'weight' %(parameters 1, 2%)", "params = {a.weight, b.weight}: refused too")

-- distinct names: the round trip gives every layer its own weights back
local function named()
  return tg.nn.Sequential { tg.nn.Linear(4, 4, { name = "fc1" }), tg.nn.Linear(4, 4, { name = "fc2" }) }
end
local m = named()
local mp = m:parameters()
mp[1].data:fill_(1)
mp[3].data:fill_(2)
local opt = tg.optim.AdamW(mp)
m:forward(tg.ones { 3, 4 })
m:backward(tg.ones { 3, 4 })
opt:step()
local w1, w3 = mp[1].data:totable(), mp[3].data:totable()
ck.save(base .. "/ok", { model = m, optimizer = opt, step = 1 })
local m2 = named()
local opt2 = tg.optim.AdamW(m2:parameters())
ck.load(base .. "/ok", { model = m2, optimizer = opt2 })
local p2 = m2:parameters()
tap.is_deeply(p2[1].data:totable(), w1, "distinct names: layer 1's weight comes back")
tap.is_deeply(p2[3].data:totable(), w3, "distinct names: layer 2's weight comes back (not layer 1's)")
tap.ok(p2[1].data:sum() ~= p2[3].data:sum(), "... and the two differ")
tap.is_deeply(opt2.state[3].m:totable(), opt.state[3].m:totable(), "layer 2's Adam moment comes back")

-- load into a model whose names repeat: refused before anything is copied
local before = ps[1].data:totable()
err = tap.error_like(function() line = here(); ck.load(base .. "/ok", { model = dup }) end,
  "checkpoint%.load: parameter names repeat: 'weight' %(parameters 1, 3%)", "load refuses a model with repeated names")
tap.like(err, at(line), "... at the caller's line")
tap.is_deeply(ps[1].data:totable(), before, "... and leaves the model as it was")

-- the optimizer's state tensors are named after its parameters: repeated names there are refused too
local c1, c2 = tg.nn.Linear(4, 2), tg.nn.Linear(4, 2)
local c1w = c1:parameters()[1]
local oc = tg.optim.AdamW({ c1w, c2:parameters()[1] })
tap.error_like(function() ck.save(base .. "/optdup", { params = { c1w }, optimizer = oc, step = 1 }) end,
  "checkpoint%.save: optimizer and FP8 state entries 1 and 3 are both named 'weight%.m'",
  "an optimizer whose parameters' names repeat is refused")
tap.ok(not exists(base .. "/optdup/step_00000001/rank0.safetensors"), "... before writing")

os.execute("rm -rf " .. ex.q(base))
tap.done_testing()
