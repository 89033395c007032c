-- mode_matrix.lua — the graphed-callables mode matrix used by the graph-mode-matrix tests: two chunks,
-- {eager, graphed} x {delay_wgrad off, on} x {fused accumulation off, on}, two orders (all F then B+W in
-- reverse; 1F1B-like with W deferred; with `schedules`, the orders of one process running both stages of the 1F1B
-- and ZB-H1 schedules, and a "graphed-share" mode: share = true). Graphed sets reuse static buffers across
-- microbatches (the default). Checks identical gradients after every step, identical hook info
-- sequences per delay setting, identical parameters after a plain SGD step. With `partial` (module names), a
-- "partial" mode too: the chunks run eagerly with those modules graphed in place (tg.graph.graph_modules).
-- With `full`, a "full" mode: the whole step (every action and the SGD) captured once with
-- tg.graph.capture_step and replayed per step.
--   require("mode_matrix").run{ t = tap, build = fn(delay, fuse) -> {chunk1, chunk2}, xs = {...}, dys = {...},
--                               sample = {x of chunk 1, x of chunk 2}, steps = 3,
--                               partial = {"mlp", ...}, partial_sample = x of those modules, unfused = true }
-- A module graphed in place takes its parent's residual into its graphs (the adds stay fused, as in eager); with
-- `unfused` the partial mode is compared with an eager run that adds residuals unfused (tg.debug "unfused_residual").
-- With `fp8 = true` (the chunks' Linears built with an FP8 recipe): the FP8 scaling state (amax histories,
-- scales, scale_invs) after the steps is compared too, bit for bit, and the reference run must have moved its
-- scales off 1 (the scale updates ran and were used).
local tg = require "tegraph"
local G = require "grads"
local MM = {}
local grads_of, params_of = G.grads_of, G.params_of

function MM.orders(M)
  local function default_order()
    local o = {}
    for m = 1, M do for c = 1, 2 do o[#o + 1] = { op = "F", chunk = c, mb = m } end end
    for m = M, 1, -1 do
      for c = 2, 1, -1 do
        o[#o + 1] = { op = "B", chunk = c, mb = m }
        o[#o + 1] = { op = "W", chunk = c, mb = m }
      end
    end
    return o
  end
  -- 1F1B-like with two microbatches in flight, W deferred to the end (zero-bubble style).
  local function one_f_one_b_order()
    local o, ws = {}, {}
    local function F(m) o[#o + 1] = { op = "F", chunk = 1, mb = m }; o[#o + 1] = { op = "F", chunk = 2, mb = m } end
    local function B(m)
      o[#o + 1] = { op = "B", chunk = 2, mb = m }; o[#o + 1] = { op = "B", chunk = 1, mb = m }
      ws[#ws + 1] = { op = "W", chunk = 2, mb = m }; ws[#ws + 1] = { op = "W", chunk = 1, mb = m }
    end
    F(1); F(2)
    for m = 3, M do B(m - 2); F(m) end
    B(M - 1); B(M)
    for _, w in ipairs(ws) do o[#o + 1] = w end
    return o
  end
  -- The compute orders a process running both stages of a schedule replays (tegraph.schedule), one chunk per stage.
  local schedule = require "tegraph.schedule"
  local function plan_order(gen)
    local o = {}
    for _, a in ipairs(schedule.exec_order(gen{ stages = 2, microbatches = M })) do
      o[#o + 1] = { op = a.op, chunk = a.chunk, mb = a.mb }
    end
    return o
  end
  return default_order(), one_f_one_b_order(), plan_order(schedule.one_f_one_b), plan_order(schedule.zb_h1)
end




local function same(a, b)
  for k, v in pairs(a) do
    local w = b[k]
    if w == nil then return false, "missing " .. k end
    if #v ~= #w then return false, k .. ": sizes differ" end
    for i = 1, #v do
      if v[i] ~= w[i] and not (v[i] ~= v[i] and w[i] ~= w[i]) then
        return false, string.format("%s[%d]: %.9g vs %.9g", k, i, v[i], w[i])
      end
    end
  end
  return true
end

function MM.run(cfg)
  local t, build, xs, dys = cfg.t, cfg.build, cfg.xs, cfg.dys
  local M, STEPS = #xs, cfg.steps or 3
  local NPARAMS = 0
  for _, c in ipairs(build(false, false)) do NPARAMS = NPARAMS + #c:parameters() end

  -- Runs STEPS steps of `order`; returns per-step gradients, the hook log and the final parameters.
  local function run(mode, delay, fuse, order)
    local chunks = build(delay, fuse)
    local log, step0 = {}, nil
    for _, c in ipairs(chunks) do
      c:register_wgrad_hook(function(p, info)
        step0 = step0 or info.step -- steps count across runs: log them relative to this run's first
        log[#log + 1] = string.format("%s mb=%d last=%s chunk=%d step=%d", p.name, info.microbatch,
          tostring(info.last), info.chunk, info.step - step0 + 1)
      end)
    end
    local g, pset
    if mode == "graphed" or mode == "graphed-share" then
      -- graphed-share: microbatches of a chunk whose lifetimes do not overlap replay one set of graphs
      g = tg.graph.make_graphed(chunks, { sample = cfg.sample, microbatches = M, order = order,
        share = mode == "graphed-share" or nil })
      -- every order here overlaps microbatches: one graph set per microbatch, static buffers reused
      t.ok(g[1]:reused() and not g[1]:shared(), "graphed: static buffers reused across microbatches")
    elseif mode == "partial" then
      pset = tg.graph.graph_modules(chunks, cfg.partial, { sample = cfg.partial_sample, microbatches = M, order = order })
      for _, m in ipairs(pset.modules) do
        t.is(m.exec_mode, "graphed", string.format("partial: %s runs graphed", m.name))
      end
    end
    local steps = {}
    local function one_step()
      local acts, dacts = {}, {}
      for _, a in ipairs(order) do
        local c, m = a.chunk, a.mb
        if a.op == "F" then
          local x = c == 1 and xs[m] or acts[m]
          local y = g and g[c]:forward(x, m) or chunks[c]:forward(x, m)
          if c == 1 then acts[m] = y end
        elseif a.op == "B" then
          local dy = c == 2 and dys[m] or dacts[m]
          local dx = g and g[c]:backward(dy, m) or chunks[c]:backward(dy, m)
          if c == 2 then dacts[m] = dx end
        elseif delay then
          if g then g[c]:backward_dw(m) else chunks[c]:backward_dw(m) end
        end
      end
      -- plain SGD on the gradient the mode produced (same arithmetic in every mode); the gradients stay
      for _, c in ipairs(chunks) do
        for _, p in ipairs(c:parameters()) do
          local grad = fuse and p.main_grad or p.grad
          p.data:axpby_(-0.1, grad, 1)
        end
      end
    end
    if mode == "full" then -- the whole step (every F, B, W and the SGD) captured once, then replayed
      local st = tg.graph.capture_step(one_step, { microbatches = M })
      for step = 1, STEPS do
        st:replay()
        steps[step] = grads_of(chunks, fuse)
      end
    else
      for step = 1, STEPS do
        tg.step_begin{ microbatches = M }
        one_step()
        tg.step_end()
        steps[step] = grads_of(chunks, fuse)
      end
    end
    if pset then pset:free() end
    local params = params_of(chunks)
    if cfg.fp8 then -- the scaling state joins the compared values, named by module and field
      local n = 0
      for _, c in ipairs(chunks) do
        for _, st in ipairs(c:fp8_state()) do
          n = n + 1
          for _, f in ipairs{ "amax_history", "scale", "scale_inv" } do
            params["fp8 " .. st.module .. " " .. f] = G.flatten(st[f]:totable())
          end
        end
      end
      t.ok(n > 0, string.format("%s, delay_wgrad=%s, fuse=%s: the chunks hold FP8 scaling states", mode, tostring(delay), tostring(fuse)))
    end
    return steps, log, params, g
  end

  local default_order, one_f_one_b_order, sched_1f1b, sched_zbh1 = MM.orders(M)
  local orders = { { "default", default_order }, { "1f1b", one_f_one_b_order } }
  if cfg.schedules then -- the 1F1B and ZB-H1 schedules' orders (graphed sets reuse static buffers there)
    orders[#orders + 1] = { "schedule 1f1b", sched_1f1b }
    orders[#orders + 1] = { "schedule zb_h1", sched_zbh1 }
  end
  for _, ord in ipairs(orders) do
    local oname, order = ord[1], ord[2]
    local ref_steps, ref_params
    local ref_log = {} -- per delay setting: the firing sequence must match exactly
    local modes = { "eager", "graphed" }
    if cfg.schedules then modes[#modes + 1] = "graphed-share" end
    if cfg.partial and cfg.unfused then
      modes[#modes + 1] = "eager-unfused"
    end
    if cfg.partial then modes[#modes + 1] = "partial" end
    if cfg.full then
      if cfg.unfused then -- back to the first reference (eager with fused residual adds)
        modes[#modes + 1] = "eager-fused"
      end
      modes[#modes + 1] = "full"
    end
    for _, mode in ipairs(modes) do
      if mode == "eager-unfused" or mode == "eager-fused" then -- a new reference: eager with the residual adds
        ref_steps, ref_params, ref_log = nil, nil, {}                -- the modes that follow run
        tg.debug("unfused_residual", mode == "eager-unfused")
      end
      for _, delay in ipairs{ false, true } do
        for _, fuse in ipairs{ false, true } do
          local label = string.format("%s order, %s, delay_wgrad=%s, fuse=%s", oname, mode, tostring(delay), tostring(fuse))
          local steps, log, params = run(mode:match("^eager") and "eager" or mode, delay, fuse, order)
          if mode == "full" then -- the hooks ran while the step was captured; replays count their firings
            t.is(#log, M * NPARAMS, label .. ": every parameter's hooks fired once per microbatch, during the capture")
          else
            t.is(#log, STEPS * M * NPARAMS, label .. ": every parameter's hooks fired once per microbatch per step")
          end
          local rlog = ref_log[delay]
          if not rlog then
            ref_log[delay] = log
          else
            local same_log = #log == #rlog or (mode == "full" and #log <= #rlog)
            for i = 1, #log do same_log = same_log and log[i] == rlog[i] end
            t.ok(same_log, label .. ": hook info sequence identical to eager with the same delay setting")
          end
          if not ref_steps then
            ref_steps, ref_params = steps, params
            local nonzero = false
            for _, v in pairs(steps[1]) do for _, x in ipairs(v) do nonzero = nonzero or x ~= 0 end end
            t.ok(nonzero, label .. ": reference gradients are not all zero")
            if cfg.fp8 then
              local moved = false
              for k, v in pairs(params) do
                if k:match("^fp8 .* scale$") then for _, x in ipairs(v) do moved = moved or x ~= 1 end end
              end
              t.ok(moved, label .. ": FP8 scales were updated from the recorded amaxes (not all 1)")
            end
          else
            for s = 1, STEPS do
              local ok, why = same(ref_steps[s], steps[s])
              t.ok(ok, string.format("%s: gradients after step %d bit-identical to eager/no-delay/unfused", label, s))
              if not ok then t.diag(why) end
            end
            local ok, why = same(ref_params, params)
            t.ok(ok, label .. ": parameters after the optimizer identical")
            if not ok then t.diag(why) end
          end
        end
      end
    end
    tg.debug("unfused_residual", false)
  end
end

-- The small two-chunk model of the mode-matrix tests: chunk 1 = Linear(D, H) -> LayerNormMLP(H, 2H), chunk 2 =
-- LayerNormLinear(H, D) -> Linear(D, D). Returns build(delay, fuse) for MM.run: every leaf gets the mode's
-- delay_wgrad and fuse_wgrad_accumulation, and `fp8` (a recipe, or nil) when given.
function MM.two_chunks(D, H, fp8)
  return function(delay, fuse)
    tg.manual_seed(1234)
    local o = function(extra)
      extra.delay_wgrad, extra.fuse_wgrad_accumulation, extra.fp8 = delay, fuse, fp8
      return extra
    end
    local c1 = tg.nn.Sequential{
      tg.nn.Linear(D, H, o { name = "c1.fc" }),
      tg.nn.LayerNormMLP(H, 2 * H, o { name = "c1.mlp" }),
      name = "c1", chunk = 1 }
    local c2 = tg.nn.Sequential{
      tg.nn.LayerNormLinear(H, D, o { name = "c2.lnl", chunk = 2 }),
      tg.nn.Linear(D, D, o { name = "c2.fc", chunk = 2 }),
      name = "c2", chunk = 2 }
    return { c1, c2 }
  end
end

-- Fixed inputs and output gradients (TOK, D) for M microbatches (fresh random, never zeros).
function MM.inputs(M, TOK, D)
  tg.manual_seed(99)
  local xs, dys = {}, {}
  for m = 1, M do
    xs[m] = tg.randn({ TOK, D })
    dys[m] = tg.randn({ TOK, D })
  end
  return xs, dys
end

return MM
