-- graph-mode-matrix.lua — {eager, graphed, partial (c1's MLP and c2's LayerNormLinear graphed in place)} x {delay_wgrad off, on} x {fused accumulation off, on}, two orders:
-- identical gradients after every step, identical hook info sequences, identical parameters after the optimizer.
local tg = require "tegraph"
local t = require "tap"

tg.hook_check(true)
local D, H, TOK, M, STEPS = 8, 16, 6, 4, 3

local MM = require "mode_matrix" -- t/lib/mode_matrix.lua
-- two chunks of a small model, every leaf with the mode's options; fixed inputs and output gradients
local build = MM.two_chunks(D, H)
local xs, dys = MM.inputs(M, TOK, D)
MM.run{ t = t, build = build, xs = xs, dys = dys, sample = { xs[1], tg.zeros({ TOK, H }) }, steps = STEPS,
  partial = { "mlp", "lnl" }, partial_sample = tg.zeros({ TOK, H }), full = true, schedules = true }

-- TransformerEngine's bug on purpose: no hook dispatch after W replays -> the step check names the parameters.
-- The graphed set reads the switch when it is made.
do
  local chunks = build(true, true)
  for _, c in ipairs(chunks) do c:register_wgrad_hook(function() end) end
  local order = MM.orders(M)
  tg.debug("skip_hooks_after_replay", true)
  local g = tg.graph.make_graphed(chunks, { sample = { xs[1], tg.zeros({ TOK, H }) }, microbatches = M, order = order })
  tg.debug("skip_hooks_after_replay", false)
  tg.step_begin{ microbatches = M }
  local acts, dacts = {}, {}
  for _, a in ipairs(order) do
    local c, m = a.chunk, a.mb
    if a.op == "F" then
      local y = g[c]:forward(c == 1 and xs[m] or acts[m], m); if c == 1 then acts[m] = y end
    elseif a.op == "B" then
      local dx = g[c]:backward(c == 2 and dys[m] or dacts[m], m); if c == 2 then dacts[m] = dx end
    else
      g[c]:backward_dw(m)
    end
  end
  local ok, err = pcall(tg.step_end)
  t.ok(not ok, "skipping hooks after W replay makes the step check fail")
  t.like(tostring(err), "hook check failed", "the error says the hook check failed")
  t.like(tostring(err), "c1%.fc%.weight", "the error names a skipped parameter")
  t.like(tostring(err), "graphed, delayed wgrad", "the error names the execution mode")
end

t.done_testing()
