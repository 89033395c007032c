-- lua_safetensors.lua — fuzz driver: the input is a safetensors file; tg.safetensors opens (validates) it,
-- and every tensor it lists is described and read, with its metadata.
local tg = require "tegraph"
local path = (os.getenv("TMPDIR") or "/tmp") .. "/tegraph-fuzz-st-" .. tostring(os.time()) .. "-" ..
  tostring(math.random(1 << 30)) .. ".safetensors"

return function(s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  local ok, st = pcall(tg.safetensors.open, path)
  if ok then
    local okn, names = pcall(st.names, st)
    for _, name in ipairs(okn and names or {}) do
      pcall(st.info, st, name)
      local okr, t = pcall(st.read, st, name)
      if okr and t then pcall(t.totable, t) end
    end
    pcall(st.metadata, st)
    st:close()
  end
  os.remove(path)
end
