-- graph-bad-use-errors.lua — misuse of graphed callables gives clear errors and corrupts nothing;
-- hooks never fire during warm-up or capture; graph memory is shared between microbatches.
local tg = require "tegraph"
local t = require "tap"

local D, TOK, M = 8, 4, 3

local function chunk(delay, name)
  tg.manual_seed(7)
  return tg.nn.Sequential{
    tg.nn.Linear(D, D, { delay_wgrad = delay, name = name .. ".a" }),
    tg.nn.LayerNormMLP(D, 2 * D, { delay_wgrad = delay, name = name .. ".mlp" }),
    name = name }
end

local x = tg.randn({ TOK, D })
local dy = tg.randn({ TOK, D })

-- Hooks are silent during warm-up and capture; capturing() is true inside module code then.
do
  local fired, seen_capturing = 0, false
  local probe = {
    forward = function(self, xx, mb)
      if tg.graph.capturing() then seen_capturing = true end
      return xx:clone()
    end,
    backward = function(self, d, mb) return d:clone() end,
  }
  local m = tg.nn.Sequential{ chunk(false, "quiet"), probe }
  m:register_wgrad_hook(function() fired = fired + 1 end)
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = M, warmup = 2 })
  t.is(fired, 0, "no hook fired during warm-up and capture")
  t.ok(seen_capturing, "tg.graph.capturing() is true while warming up / capturing")
  t.ok(not tg.graph.capturing(), "and false afterwards")
  tg.step_begin{ microbatches = M }
  for mb = 1, M do g:forward(x, mb) end
  for mb = M, 1, -1 do g:backward(dy, mb) end
  tg.step_end()
  t.is(fired, M * #m:parameters(), "after replays every parameter fired once per microbatch")
end

-- Replays must follow the captured order.
do
  local m = chunk(true, "ord")
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = M })
  t.error_like(function() g:backward(dy, 1) end, "out of order: expected F chunk 1 mb 1 .*got B chunk 1 mb 1",
    "a B before any F names expected and actual actions")
  g:forward(x, 1)
  t.error_like(function() g:forward(x, 3) end, "expected F chunk 1 mb 2 .*got F chunk 1 mb 3",
    "skipping a microbatch is refused")
  t.error_like(function() g:forward(tg.randn({ TOK + 1, D }), 2) end, "input: got %[5,8%] f32, captured with %[4,8%] f32",
    "a wrong input shape names both shapes")
  t.error_like(function() g:forward(tg.randn({ TOK, D }, { dtype = "bf16" }), 2) end, "got %[4,8%] bf16, captured with %[4,8%] f32",
    "a wrong input dtype names both dtypes")
  t.error_like(function() g:forward(x, 9) end, "microbatch 9 of 3", "a microbatch out of range is refused")
  -- the failed calls changed nothing: the order goes on where it was
  t.lives_ok(function()
    g:forward(x, 2); g:forward(x, 3)
    for mb = M, 1, -1 do g:backward(dy, mb); g:backward_dw(mb) end
  end, "after refused calls the captured order still replays to the end")
  g:reset()
  t.lives_ok(function() g:forward(x, 1) end, "reset starts the order again")
end

-- A call that fails part-way through the order (a wgrad hook raising in the W replay of microbatch 2) leaves the
-- set there: in the same step, the next call out of order names the failed action and reset(); the next step starts
-- the order again, as eager modules recover, and computes the eager gradients.
do
  local m = chunk(true, "fails")
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = M })
  local p = m:parameters()[1]
  local _, id = p:register_hook(function(_, info) if info.microbatch == 2 then error("the hook refuses mb 2") end end)
  tg.step_begin{ microbatches = M }
  for mb = 1, M do g:forward(x, mb) end
  g:backward(dy, 3); g:backward_dw(3); g:backward(dy, 2)
  t.error_like(function() g:backward_dw(2) end, "the hook refuses mb 2", "the hook fails the W replay of microbatch 2")
  p:remove_hook(id)
  t.error_like(function() g:forward(x, 1) end,
    "expected B chunk 1 mb 1 .*got F chunk 1 mb 1; the set's W chunk 1 mb 2 failed, leaving its order there: reset%(%) starts it again",
    "within the step, an out-of-order call names the failed action and reset()")
  tg.step_end()
  local ok, err = pcall(function()
    tg.step_begin{ microbatches = M }
    for mb = 1, M do g:forward(x, mb) end
    for mb = M, 1, -1 do g:backward(dy, mb); g:backward_dw(mb) end
    tg.step_end()
  end)
  t.ok(ok, "the next step starts the set's order again and runs whole: " .. tostring(err))
  local ref = chunk(true, "fails")
  tg.step_begin{ microbatches = M }
  for mb = 1, M do ref:forward(x, mb) end
  for mb = M, 1, -1 do ref:backward(dy, mb); ref:backward_dw(mb) end
  tg.step_end()
  local same = true
  for i, q in ipairs(m:parameters()) do same = same and tg.allclose(q.grad, ref:parameters()[i].grad, 1e-6, 1e-7) end
  t.ok(same, "... and its gradients equal an eager step's")
end

-- backward_dw on a chunk without W graph.
do
  local m = chunk(false, "now")
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = 1 })
  t.ok(not g:has_w(), "a chunk without delayed wgrad has no W graph")
  g:forward(x, 1); g:backward(dy, 1)
  t.error_like(function() g:backward_dw(1) end, "chunk 1 has no W graph", "backward_dw on it is refused clearly")
end

-- An order that breaks F before B before W is refused before anything is captured.
do
  local m = chunk(true, "bad")
  t.error_like(function()
    tg.graph.make_graphed(m, { sample = x, microbatches = 1,
      order = { { op = "F", chunk = 1, mb = 1 }, { op = "W", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 1 } } })
  end, "order action 2 %(W chunk 1 mb 1%): W before B", "W before B in the order names the action")
  t.error_like(function()
    tg.graph.make_graphed(m, { sample = x, microbatches = 2, order = { { op = "F", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 1 } } })
  end, "order has no F for chunk 1 mb 2", "a missing microbatch is named")
end

-- A chunk that delays wgrad needs a W in the order for every microbatch, or its hooks never fire.
do
  local m = chunk(true, "now")
  t.error_like(function()
    tg.graph.make_graphed(m, { sample = x, microbatches = 1,
      order = { { op = "F", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 1 } } })
  end, "order has no W for chunk 1 mb 1, but the chunk delays wgrad", "an order without W for a delaying chunk is refused")
  t.lives_ok(function() tg.graph.make_graphed(m, { sample = x, microbatches = 1 }) end,
    "and the module is left clean for the next make_graphed")
end

-- A module that reads a tensor to the host while being captured: a clear error, then eager still works.
do
  local reads = {
    forward = function(self, xx, mb)
      local s = xx:sum() -- host read: not capturable
      return xx:clone()
    end,
    backward = function(self, d, mb) return d:clone() end,
  }
  local m = tg.nn.Sequential{ chunk(false, "host"), reads }
  t.error_like(function() tg.graph.make_graphed(m, { sample = x, microbatches = 1 }) end,
    "capturing F chunk 1 mb 1.*not capturable", "a host read during capture fails, naming the action")
  t.ok(not tg.graph.capturing() and not tg.stream.capturing(), "nothing is left capturing")
  local y = m:forward(x, 1)
  t.ok(y ~= nil and m:backward(dy, 1) ~= nil, "the module still runs eagerly")
end

-- Graph memory: saved activations of earlier microbatches are reused by later captures.
do
  local m = chunk(false, "mem")
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = 4,
    order = (function()
      local o = {}
      for mb = 1, 4 do o[#o + 1] = { op = "F", chunk = 1, mb = mb }; o[#o + 1] = { op = "B", chunk = 1, mb = mb } end
      return o
    end)() })
  local peak, naive = g:memory()
  t.ok(peak > 0 and naive > 0, string.format("graph memory reported (peak %d B, naive %d B)", peak, naive))
  t.ok(peak < naive, "microbatches whose buffers do not overlap share graph memory (peak below the naive sum)")
end

-- Two graphed sets sharing one pool (replayed in the order they were captured, as with
-- TransformerEngine / PyTorch graph pools) compute what separate sets compute.
do
  local pool = tg.pool()
  local a, b = chunk(false, "pa"), chunk(false, "pb") -- same seed: same weights
  local ga = tg.graph.make_graphed(a, { sample = x, microbatches = 1, pool = pool })
  local gb = tg.graph.make_graphed(b, { sample = x, microbatches = 1, pool = pool })
  tg.step_begin{ microbatches = 1 }
  local ya = ga:forward(x, 1):clone(); ga:backward(dy, 1)
  local yb = gb:forward(x, 1):clone(); gb:backward(dy, 1)
  tg.step_end()
  t.is(ya:max_abs_diff(yb), 0, "sets sharing a pool: same outputs")
  local same = true
  local pa, pb = a:parameters(), b:parameters()
  for i = 1, #pa do same = same and pa[i].grad:max_abs_diff(pb[i].grad) == 0 end
  t.ok(same, "sets sharing a pool: same gradients")
  t.is(select(1, ga:memory()), select(1, gb:memory()), "both sets report the one pool they share")
  -- interleaved (A:F, B:F, B:B, A:B), B's graphs would overwrite memory A's F saved for A's B: refused, naming both
  tg.step_begin{ microbatches = 1 }
  ga:forward(x, 1)
  t.error_like(function() gb:forward(x, 1) end,
    "graphed replay of F chunk 1 mb 1 %(the set of Sequential 'pb'%) while the set of Sequential 'pa', which shares its " ..
    "graph pool, is part%-way through its order %(next: B chunk 1 mb 1",
    "sets sharing a pool: a replay while the other set is part-way through its order is refused, naming both")
  ga:backward(dy, 1)
  local ok = pcall(function() gb:forward(x, 1); gb:backward(dy, 1) end)
  t.ok(ok, "sets sharing a pool: once the first set's order is whole, the second set replays")
  tg.step_end()
  ga:reset(); gb:reset()
end

-- A schedule's per-stage sets are captured whole one after another but replayed interleaved: one pool for them is
-- refused at make_graphed (it gave gradients off by up to 4 for GPipe).
do
  local S = require "tegraph.schedule"
  local plan = S.gpipe { stages = 2, microbatches = 2 }
  t.error_like(function()
    S.make_graphed(plan, { chunk(false, "s1"), chunk(false, "s2") }, { samples = { x, x }, per_stage = true, warmup = 1,
      pool = tg.pool() })
  end, "schedule%.make_graphed: 2 per%-stage sets cannot share one pool %(opts%.pool%)",
    "per-stage sets with one pool are refused at make_graphed")
  local ok, err = pcall(S.make_graphed, plan, { chunk(false, "t1"), chunk(false, "t2") },
    { samples = { x, x }, warmup = 1, pool = tg.pool() })
  t.ok(ok, "one set for the whole plan may take a pool: " .. tostring(ok or err))
end

-- One Lua-table module is one chunk (not a list of chunks), and the set keeps it alive.
do
  local lua_mod = {
    forward = function(self, xx, mb) return xx:clone() end,
    backward = function(self, d, mb) return d:clone() end,
  }
  local g = tg.graph.make_graphed(lua_mod, { sample = x, microbatches = 1, warmup = 1 })
  collectgarbage(); collectgarbage()
  local y = g:forward(x, 1)
  t.is(y:max_abs_diff(x), 0, "a single Lua-table module is graphed as one chunk and replays")
  g:backward(dy, 1)
end

-- Warm-up runs the order 3 times unless told otherwise (the engine's default, for C and Lua
-- alike), after one forward per chunk that probes whether its backward takes no dy; then each F is
-- captured once; a negative count is refused.
do
  local calls = 0
  local counter = {
    forward = function(self, xx, mb) calls = calls + 1; return xx:clone() end,
    backward = function(self, d, mb) return d:clone() end,
  }
  tg.graph.make_graphed(counter, { sample = x, microbatches = 2 })
  t.is(calls, 1 + 3 * 2 + 2, "by default the dy probe, warm-up's 3 iterations of 2 microbatches, then 2 captured forwards")
  calls = 0
  tg.graph.make_graphed(counter, { sample = x, microbatches = 2, warmup = 1 })
  t.is(calls, 1 + 1 * 2 + 2, "warmup = 1: one iteration")
  t.error_like(function() tg.graph.make_graphed(counter, { sample = x, microbatches = 1, warmup = -1 }) end,
    "make_graphed: warmup must be >= 1 %(got %-1%)", "a negative warmup is refused")
end

-- Gradients before make_graphed survive its warm-up.
do
  local m = chunk(false, "keep")
  for _, p in ipairs(m:parameters()) do p.grad:fill_(0.25) end
  tg.graph.make_graphed(m, { sample = x, microbatches = 2 })
  local ok = true
  for _, p in ipairs(m:parameters()) do ok = ok and p.grad:max_abs_diff(tg.full(p.grad:shape(), 0.25)) == 0 end
  t.ok(ok, "warm-up leaves parameters' gradients as they were")
end

-- Partial capture (graph_modules): bad names, sample counts, a set over a model whose modules another set replays.
do
  local inner = tg.nn.Linear(4, 4, { name = "pm.fc" })
  local model = tg.nn.Sequential{ tg.nn.Linear(4, 4, { name = "pm.in" }), inner, name = "pm" }
  local x4 = tg.randn({ 3, 4 })
  t.error_like(function() tg.graph.graph_modules(model, { "attn" }, { sample = x4 }) end,
    "graph_modules: no module under the model is named attn", "a name no module has is refused, naming it")
  t.error_like(function() tg.graph.graph_modules(model, { "fc", "in" }, { sample = { x4 } }) end,
    "graph_modules: 1 sample inputs for 2 modules %(pm%.in, pm%.fc%)", "a wrong number of samples names the modules")
  local set = tg.graph.graph_modules(model, { "fc" }, { sample = x4 })
  t.is(inner.exec_mode, "graphed", "the named module runs graphed")
  t.error_like(function() tg.graph.make_graphed(model, { sample = x4 }) end,
    "chunk 1 holds Linear 'pm%.fc', whose calls another graphed set replays", "graphing a model around a module graphed in place is refused")
  set:free()
  t.is(inner.exec_mode, "eager", "after free the module runs eagerly again")
  t.error_like(function() tg.graph.make_graphed({ model, inner }, { sample = { x4, x4 }, in_place = true }) end,
    "chunks graphed in place must not contain each other", "in place, a chunk inside another chunk is refused")
end

-- backward(nil) replays only for chunks whose backward takes no dy (a chunk ending in its loss), as eagerly; on an
-- ordinary chunk it is refused like eager's "dy is missing" instead of replaying the last call's gradient.
do
  local m = chunk(false, "nody")
  local g = tg.graph.make_graphed(m, { sample = x, microbatches = 1 })
  tg.step_begin{ microbatches = 1 }
  g:forward(x, 1); g:backward(dy, 1)
  tg.step_end()
  local before = m:parameters()[1].grad:clone()
  tg.step_begin{ microbatches = 1 }
  g:forward(x, 1)
  t.error_like(function() g:backward(nil, 1) end, "Sequential 'nody' backward %(microbatch 1%): dy is missing, expected %[4,8%] f32",
    "a graphed backward without dy on a chunk that needs one is refused, naming the module and the expected gradient")
  t.ok(m:parameters()[1].grad:max_abs_diff(before) == 0, "the refused backward replayed nothing")
  tg.hook_check(false); m:drop_saved(); tg.step_end(); tg.hook_check(true)
  -- a chunk whose last part is its loss (d loss / d y = 2 y, no dy): backward(nil) replays and matches eager
  local function loss_chunk()
    local c = chunk(false, "lossc")
    local half = tg.full({ TOK, D }, 0.5)
    return tg.nn.Sequential{ c, {
      forward = function(self, xx, mb) return xx * 1.0 end,
      backward = function(self, d, mb) return half * 1.0 end,
    }, name = "withloss" }
  end
  local e = loss_chunk()
  tg.step_begin{ microbatches = 1 }
  e:forward(x, 1); local edx = e:backward(nil, 1)
  tg.step_end()
  local lc = loss_chunk()
  local gl = tg.graph.make_graphed(lc, { sample = x, microbatches = 1 })
  tg.step_begin{ microbatches = 1 }
  gl:forward(x, 1)
  local ok, gdx = pcall(function() return gl:backward(nil, 1) end)
  tg.step_end()
  t.ok(ok, "a graphed chunk whose backward takes no dy (its loss inside) replays backward(nil): " .. tostring(ok or gdx))
  t.ok(ok and gdx:max_abs_diff(edx) == 0 and lc:parameters()[1].grad:max_abs_diff(e:parameters()[1].grad) == 0,
    "and gives eager's input gradient and wgrads")
end

-- share = true with chain = true: the sharing across overlapping microbatches cannot be done for chained chunks;
-- refused at the call instead of silently not shared
do
  local c1, c2 = chunk(false, "sc1"), chunk(false, "sc2")
  t.error_like(function()
    tg.graph.make_graphed({ c1, c2 }, { sample = { x, x }, microbatches = 2, chain = true, share = true })
  end, "make_graphed: share = true cannot be used with chain = true", "chain = true with share = true is refused")
  local g = tg.graph.make_graphed({ c1, c2 }, { sample = { x, x }, microbatches = 2, chain = true, share = false })
  t.ok(g ~= nil, "chain = true with share = false is taken")
  g:free()
end

-- warmup = 0 is refused (the C struct's 0 meant the default, silently 3)
t.error_like(function() tg.graph.make_graphed(chunk(false, "w0"), { sample = x, warmup = 0 }) end,
  "warmup must be >= 1 %(got 0; leave it out for the default, 3%)", "make_graphed{warmup = 0} is refused")

t.error_like(function() tg.graph.make_graphed(chunk(false, "w3"), { sample = x, warmup = "3" }) end,
  "opts.warmup must be an integer %(got 3%)", "make_graphed{warmup = \"3\"} is refused, not converted")
t.error_like(function() tg.schedule.make_graphed(tg.schedule.gpipe { stages = 1, microbatches = 1 }, { chunk(false, "s0") },
  { samples = { x }, warmup = 0 }) end, "graph%-bad%-use%-errors%.lua:%d+: schedule%.make_graphed: warmup must be an integer >= 1",
  "schedule.make_graphed{warmup = 0} is refused at the caller's line")
t.error_like(function() tg.graph.graph_modules(chunk(false, "gm"), { "mlp" }, { sample = x, warmup = 0 }) end,
  "graph_modules: warmup must be an integer >= 1, got 0", "graph_modules{warmup = 0} is refused by name")

-- chunk numbers that are no plan's are named, not renumbered
for _, bad in ipairs { { 0, "order%[1%]%.chunk is 0 %(chunks are numbered from 1%)" }, { -1, "order%[1%]%.chunk is %-1" },
  { "1", "order%[1%]%.chunk is not an integer" } } do
  t.error_like(function()
    tg.graph.make_graphed({ chunk(false, "o1"), chunk(false, "o2") }, { sample = { x, x }, order = {
      { op = "F", chunk = bad[1], mb = 1 }, { op = "F", chunk = 1, mb = 1 }, { op = "B", chunk = 1, mb = 1 },
      { op = "B", chunk = bad[1], mb = 1 } } })
  end, bad[2], "make_graphed refuses order chunk " .. tostring(bad[1]))
end

-- schedule.to_order(plan, s) is an order make_graphed takes: fused B + W (1f1b) and a stage's plan chunk numbers
do
  local S = tg.schedule
  for _, case in ipairs {
    { "1f1b stage 1", S.one_f_one_b { stages = 2, microbatches = 2 }, 1 },
    { "zb_h1 stage 2", S.zb_h1 { stages = 2, microbatches = 2 }, 2 },
    { "interleaved stage 2", S.interleaved { stages = 2, chunks_per_stage = 2, microbatches = 2 }, 2 },
  } do
    local name, plan, s = case[1], case[2], case[3]
    local order = S.to_order(plan, s)
    local mine = {}
    for c = 1, plan.stages * plan.chunks do if plan.owner[c] == s then mine[#mine + 1] = c end end
    local function make() local ms = {} for k in ipairs(mine) do ms[k] = chunk(true, "p" .. k) end return ms end
    local graphed_ms, eager_ms = make(), make()
    local samples = {}
    for k in ipairs(mine) do samples[k] = x end
    local g = tg.graph.make_graphed(graphed_ms, { sample = samples, microbatches = 2, order = order })
    local local_of = {}
    for k, c in ipairs(mine) do local_of[c] = k end
    local function run(call)
      tg.step_begin { microbatches = 2 }
      for _, a in ipairs(order) do
        local k = local_of[a.chunk]
        if a.op == "F" then call(k, "forward", x, a.mb)
        elseif a.op == "B" then
          call(k, "backward", dy, a.mb)
          if a.w then call(k, "backward_dw", nil, a.mb) end
        else call(k, "backward_dw", nil, a.mb) end
      end
      tg.step_end()
    end
    local ok, err = pcall(run, function(k, what, arg, mb)
      if what == "backward_dw" then return g[k]:backward_dw(mb) end
      return g[k][what](g[k], arg, mb)
    end)
    t.ok(ok, name .. ": make_graphed(stage chunks, {order = to_order(plan, s)}) captures and replays (" .. tostring(err) .. ")")
    run(function(k, what, arg, mb)
      local m = eager_ms[k]
      if what == "backward_dw" then return m:backward_dw(mb) end
      return m[what](m, arg, mb)
    end)
    local same = true
    for k in ipairs(mine) do
      local pg, pe = graphed_ms[k]:parameters(), eager_ms[k]:parameters()
      for i = 1, #pg do same = same and pg[i].grad:max_abs_diff(pe[i].grad) == 0 end
    end
    t.ok(same, name .. ": the replayed stage's gradients equal eager's")
    g[1]:free()
  end
end

t.done_testing()
