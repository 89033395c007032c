-- adamw_fixture.lua — the parameters, gradients and state comparison the AdamW tests share.
local tg = require "tegraph"
local nn = require "tegraph.nn"

local M = {}

-- mixed: f32 and bf16 parameters, matrices (decayed) and vectors (not), one fused main_grad
M.SPECS = {
  { "w1", { 16, 8 }, "f32", false }, { "b1", { 8 }, "f32", false }, { "w2", { 8, 5 }, "bf16", false },
  { "g2", { 5 }, "bf16", false }, { "w3", { 3, 7 }, "bf16", true },
}

-- Fresh parameters for specs (default M.SPECS), each seeded from seed + its index: two calls with the same
-- seed give the same values.
function M.make(seed, specs)
  local ps = {}
  for i, s in ipairs(specs or M.SPECS) do
    tg.manual_seed(seed + i)
    ps[i] = nn.Parameter(s[1], tg.randn(s[2], { dtype = s[3] }), { fuse_wgrad_accumulation = s[4] })
  end
  return ps
end

-- Gradients of step `step` (the same for every parameter list made from the same specs), scaled by amp
-- (default 1: clipping on or off); nan = i poisons one element of parameter i (a matrix).
function M.set_grads(ps, step, amp, nan)
  for i, p in ipairs(ps) do
    tg.manual_seed(1000 * step + i)
    local g = tg.randn(p.shape, { dtype = "f32" })
    if amp and amp ~= 1 then g:mul_(amp) end
    if nan == i then
      local t = g:totable()
      t[2][3] = 0 / 0
      g:copy_(t)
    end
    p.wgrad = g
  end
end

-- Every tensor two optimizers own or update (p, lowp, m, v) equal: bit for bit (tol 0), or within tol
-- relative to the larger of 1 and the tensor's largest magnitude. false and the first differing tensor's name.
function M.same_state(oa, ob, tol)
  for i = 1, #oa.params do
    local a, b = oa.state[i], ob.state[i]
    for _, k in ipairs { "p", "lowp", "m", "v" } do
      if a[k] then
        local d = a[k]:max_abs_diff(b[k])
        if not (d <= tol * math.max(1.0, b[k]:max_abs())) then return false, oa.params[i].name .. "." .. k end
      end
    end
  end
  return true
end

return M
