-- torch-check.lua — saves every module's input, weights, output, input gradient and weight gradients (raw f32 + manifest.json) for t/torch_check.py.
--   tegraph run t/torch-check.lua OUTDIR [device]      (device: default device, e.g. cuda:0 where a GPU exists)
local tg = require "tegraph"

local dir = assert(arg and arg[1], "usage: tegraph run t/torch-check.lua OUTDIR [device]")
local device = arg[2] or tg.default_device()
local B, T, C, NH, H, V = 2, 40, 64, 2, 128, 97

local nfiles = 0
-- Writes t's values as little-endian f32 to a new file; returns its name.
local function save(t)
  nfiles = nfiles + 1
  local name = string.format("t%04d.f32", nfiles)
  local vals = t:view({ -1 }):totable()
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  local parts = {}
  for i = 1, #vals do
    parts[#parts + 1] = string.pack("<f", vals[i])
    if #parts == 4096 then
      f:write(table.concat(parts))
      parts = {}
    end
  end
  f:write(table.concat(parts))
  f:close()
  return name
end

local function json(v)
  if type(v) == "table" then
    if #v > 0 or next(v) == nil then
      local out = {}
      for i = 1, #v do out[i] = json(v[i]) end
      return "[" .. table.concat(out, ",") .. "]"
    end
    local keys, out = {}, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do out[#out + 1] = string.format("%q:%s", k, json(v[k])) end
    return "{" .. table.concat(out, ",") .. "}"
  elseif type(v) == "string" then
    return string.format("%q", v)
  else
    return tostring(v)
  end
end

local specs = {
  { kind = "Linear", make = function(o) return tg.nn.Linear(C, 96, o) end },
  { kind = "LayerNorm", make = function(o) return tg.nn.LayerNorm(C, o) end },
  { kind = "RMSNorm", make = function(o) return tg.nn.RMSNorm(C, o) end },
  { kind = "LayerNormLinear", make = function(o) o.normalization = "LayerNorm"; return tg.nn.LayerNormLinear(C, 96, o) end },
  { kind = "LayerNormMLP", norm = "layernorm", activation = "gelu",
    make = function(o) o.normalization, o.activation = "LayerNorm", "gelu"; return tg.nn.LayerNormMLP(C, H, o) end },
  { kind = "LayerNormMLP", norm = "rmsnorm", activation = "swiglu",
    make = function(o) o.normalization, o.activation = "RMSNorm", "swiglu"; return tg.nn.LayerNormMLP(C, H, o) end },
  { kind = "CausalSelfAttention", make = function(o) return tg.nn.CausalSelfAttention(C, NH, o) end },
  -- head dims 64 and 128 (in bf16 on Hopper: the wgmma kernels, the one-pass backward at 64), lengths off the
  -- 64- and 128-row tiles; weights small enough that the scores stay O(1)-O(10), as in a trained model
  { kind = "CausalSelfAttention", C = 128, NH = 2, T = 200, init_std = 0.1,
    make = function(o) return tg.nn.CausalSelfAttention(128, 2, o) end },
  { kind = "CausalSelfAttention", C = 256, NH = 2, T = 131, init_std = 0.1,
    make = function(o) return tg.nn.CausalSelfAttention(256, 2, o) end },
  { kind = "TransformerLayer", norm = "layernorm", activation = "gelu",
    make = function(o) return tg.nn.TransformerLayer(C, H, NH, o) end },
  { kind = "Embedding", make = function(o) o.max_position_embeddings = T; return tg.nn.Embedding(V, C, o) end },
  { kind = "LMHead", make = function(o) o.hidden_size, o.vocab_size, o.normalization = C, V, "LayerNorm"; return tg.nn.LMHead(o) end },
}

local ids, tgt = {}, {}
for i = 1, B * T do
  ids[i] = (i * 37 + 11) % V
  tgt[i] = (i * 53 + 5) % V
end
tgt[3] = -1 -- ignored by the loss
local entries = {}
for _, dtype in ipairs { "f32", "bf16" } do
  for _, s in ipairs(specs) do
    local C, NH, T = s.C or C, s.NH or NH, s.T or T -- a spec may set its own width, heads and length
    tg.manual_seed(11)
    local o = { dtype = dtype, device = device, name = "m" }
    if s.kind ~= "LayerNorm" and s.kind ~= "RMSNorm" then o.init_std = s.init_std or 0.2 end -- norms draw nothing
    local m = s.make(o)
    local e = { kind = s.kind, dtype = dtype, B = B, T = T, C = C, NH = NH, H = H, V = V, eps = 1e-5,
      norm = s.norm or "layernorm", activation = s.activation or "gelu" }
    local x
    if s.kind == "Embedding" then
      local rows = {}
      for b = 1, B do
        rows[b] = {}
        for t = 1, T do rows[b][t] = ids[(b - 1) * T + t] end
      end
      x = tg.tensor(rows, { dtype = "i32", device = device })
    else
      x = tg.randn({ B, T, C }, { dtype = dtype, device = device })
    end
    e.x = save(x)
    local y, dx
    if s.kind == "LMHead" then
      local targets = tg.tensor(tgt, { dtype = "i32", device = device })
      e.targets = save(targets)
      y = m:loss(x:view({ B * T, C }), targets, 1, -1)
      dx = m:backward(1.0, 1)
    else
      y = m:forward(x, 1)
      local dy = tg.randn(y:shape(), { dtype = dtype, device = device })
      e.dy = save(dy)
      dx = m:backward(dy, 1)
    end
    e.y = save(y)
    if dx then e.dx = save(dx) end
    e.params = {}
    for _, p in ipairs(m:parameters()) do
      e.params[#e.params + 1] = { name = p.name, shape = p.data:shape(), data = save(p.data), grad = save(p.wgrad) }
    end
    entries[#entries + 1] = e
  end
end
local f = assert(io.open(dir .. "/manifest.json", "w"))
f:write(json { device = tostring(device), modules = entries })
f:close()
print(string.format("torch-check: %d modules, %d files in %s (device %s)", #entries, nfiles, dir, tostring(device)))
