-- grads.lua — parameters' gradients and values as flat tables by name, for tests that compare runs.
local G = {}

-- v (a number or nested tables of them, as Tensor:totable gives) as one flat list, appended to out.
function G.flatten(v, out)
  out = out or {}
  if type(v) == "table" then for _, x in ipairs(v) do G.flatten(x, out) end else out[#out + 1] = v end
  return out
end

-- name -> the flat gradient of every parameter of chunks (main_grad when fuse, else grad).
function G.grads_of(chunks, fuse)
  local g = {}
  for _, c in ipairs(chunks) do
    for _, p in ipairs(c:parameters()) do g[p.name] = G.flatten((fuse and p.main_grad or p.grad):totable()) end
  end
  return g
end

-- name -> the flat values of every parameter of chunks.
function G.params_of(chunks)
  local g = {}
  for _, c in ipairs(chunks) do
    for _, p in ipairs(c:parameters()) do g[p.name] = G.flatten(p.data:totable()) end
  end
  return g
end

return G
