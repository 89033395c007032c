-- fp8-autocast-and-module-option.lua — which modules run FP8: fp8 = recipe on Linear, LayerNormLinear,
-- LayerNormMLP and TransformerLayer (passed down to every Linear under it), tg.fp8_autocast(recipe, fn) for
-- modules without the option, tg.fp8_autocast({enabled = false}, fn) to turn it off; the setting comes back after
-- fn, also when fn fails. The GPT's LM head stays in its dtype. Bad options fail naming the module and the option.
local tg = require "tegraph"
local t = require "tap"

local D, N = 16, 16 -- multiples of 16: cuBLASLt FP8 GEMMs need them on a GPU
local r = tg.fp8.DelayedScaling{ amax_history_len = 2 }
local x = tg.randn({ N, D })

local function fresh(opts)
  tg.manual_seed(3)
  return tg.nn.Linear(D, D, opts or {})
end

local plain_y = fresh():forward(x)
local fp8_y = fresh({ fp8 = r }):forward(x)
t.ok(fp8_y:max_abs_diff(plain_y) > 1e-4, "fp8 = recipe changes the Linear's output (FP8 rounding)")

local m = fresh()
local y = tg.fp8_autocast(r, function() return m:forward(x) end)
t.is(y:max_abs_diff(fp8_y), 0, "a plain Linear inside fp8_autocast(recipe) computes what fp8 = recipe computes")
t.is(#m:fp8_state(), 1, "and got its FP8 state at that first FP8 forward")
t.is(m:forward(x):max_abs_diff(plain_y), 0, "outside the autocast it computes in f32 again")

local mo = fresh({ fp8 = r })
local yo = tg.fp8_autocast({ enabled = false }, function() return mo:forward(x) end)
t.is(yo:max_abs_diff(plain_y), 0, "fp8_autocast{enabled = false} turns a module's fp8 option off")
local yn = tg.fp8_autocast(r, function()
  return tg.fp8_autocast({ enabled = false }, function() return mo:forward(x) end)
end)
t.is(yn:max_abs_diff(plain_y), 0, "an inner disabled autocast wins over the outer one")

local a0, e0 = tg.fp8.autocast_get()
local ok, err = pcall(tg.fp8_autocast, r, function() error("boom", 0) end)
t.ok(not ok and err == "boom", "an error in fn reaches the caller unchanged")
local a1, e1 = tg.fp8.autocast_get()
t.ok(a1 == a0 and e1 == e0 and a1 == false, "and the autocast setting is back to what it was")
local r1, r2 = tg.fp8_autocast({ enabled = true }, function(p, q) return p + q, "two" end, 1, 2)
t.ok(r1 == 3 and r2 == "two", "fp8_autocast passes fn's arguments and returns its results")

-- fn cannot yield: a coroutine suspended inside it and never resumed would leave FP8 on for good
local co = coroutine.create(function() return tg.fp8_autocast(r, function() coroutine.yield(1) end) end)
local cok, cerr = coroutine.resume(co)
t.ok(not cok and tostring(cerr):find("fp8_autocast: fn yielded", 1, true),
  "a yield inside fp8_autocast's fn is an error: " .. tostring(cerr))
local a2, e2 = tg.fp8.autocast_get()
t.ok(a2 == false and e2 == false, "... and the setting is back")
t.is(fresh():forward(x):max_abs_diff(plain_y), 0, "... so a plain Linear computes in f32 after it")
t.error_like(function() tg.fp8.autocast_set({ enabled = true }) end, "boolean expected",
  "autocast_set takes the booleans autocast_get gives, not an options table")
t.error_like(function() tg.fp8.autocast_set(false, false, r) end, "no recipe unless active and enabled",
  "autocast_set with a recipe while inactive is refused")

-- composites pass the option down to their Linears
local layer = tg.nn.TransformerLayer{ hidden_size = D, ffn_hidden_size = 2 * D, num_attention_heads = 2, fp8 = r, name = "h" }
local names = {}
for _, s in ipairs(layer:fp8_state()) do names[#names + 1] = s.module end
t.is(table.concat(names, " "), "h.attn.qkv h.attn.proj h.mlp.fc1 h.mlp.fc2", "TransformerLayer{fp8 =} puts its four Linears in FP8")
local lnl = tg.nn.LayerNormLinear(D, D, { fp8 = r, name = "lnl" })
t.is(#lnl:fp8_state(), 1, "LayerNormLinear{fp8 =}: its Linear")
t.is(lnl:fp8_state()[1].amax_history:shape()[1], 2, "the history has the recipe's amax_history_len rows")
t.is(lnl:fp8_state()[1].amax_history:shape()[2], 3, "one column per role: input, weight, grad_output")

-- the GPT: layers in FP8, the LM head never (also under autocast)
local gpt = tg.nn.GPT{ vocab_size = 32, max_position_embeddings = 8, hidden_size = D, num_attention_heads = 2, num_layers = 2, fp8 = r }
local gnames = {}
for _, s in ipairs(gpt.body:fp8_state()) do gnames[#gnames + 1] = s.module end
t.is(#gnames, 8, "nn.GPT{fp8 =}: the two layers' eight Linears hold FP8 states")
local idx = tg.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }, { dtype = "i32" })
tg.fp8_autocast(r, function() gpt.head:forward(gpt.body:forward(idx)) end)
t.is(#gpt.head:fp8_state(), 0, "the LM head runs in its dtype under fp8_autocast (no FP8 state)")

-- set_fp8 switches a built module
local sm = fresh()
sm:set_fp8(r)
t.is(sm:forward(x):max_abs_diff(fp8_y), 0, "m:set_fp8(recipe) makes a module run as fp8 = recipe would")
sm:set_fp8(nil)
t.is(#sm:fp8_state(), 0, "m:set_fp8(nil) turns it off and drops the state")

-- bad use
t.error_like(function() tg.nn.Linear(D, D, { fp8 = "delayed" }) end,
  "nn.Linear: option 'fp8' must be an FP8 recipe", "fp8 = a string is refused naming the module and option")
t.error_like(function() tg.nn.Embedding(8, D, { max_position_embeddings = 4, fp8 = r }) end,
  "nn.Embedding: unknown option 'fp8'", "modules without FP8 GEMMs refuse the option")
t.error_like(function() tg.fp8_autocast("HYBRID", function() end) end,
  "first argument must be an FP8 recipe or {enabled =, fp8_recipe =}", "fp8_autocast refuses a string")
t.error_like(function() tg.fp8_autocast(r) end, "second argument must be a function", "fp8_autocast needs a function")
t.error_like(function() tg.fp8_autocast({ enable = true }, function() end) end, "unknown option 'enable'",
  "fp8_autocast refuses a misspelt option")
t.error_like(function() tg.fp8_autocast({ fp8_recipe = { margin = 0 } }, function() end) end,
  "fp8_recipe must be an FP8 recipe", "a plain table is not a recipe")
t.error_like(function() fresh():set_fp8({}) end, "set_fp8: the recipe must be an FP8 recipe", "set_fp8 refuses a plain table")
local cm = fresh()
t.error_like(function()
  tg.fp8_autocast(r, function() tg.stream.capture(function() cm:forward(x) end) end)
end, "FP8 scaling state cannot be made while the device captures", "an FP8 state is never made inside a capture")

local dm = fresh({ fp8 = r })
dm:forward(x)
dm:set_fp8(tg.fp8.CurrentScaling{})
t.error_like(function() dm:backward(x) end, "FP8 state was dropped or replaced between the forward and the backward of microbatch 1",
  "a backward after set_fp8 replaced the state of its forward fails naming the microbatch")

t.done_testing()
