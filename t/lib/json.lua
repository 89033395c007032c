-- json.lua — a small JSON decoder for the tests (objects, arrays, strings with escapes, numbers, true/false/null): json.decode(s) raises on bad JSON.
local M = {}

local function json_decode(s)
  local pos = 1
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local function fail(what) error(string.format("JSON: %s at byte %d", what, pos), 0) end
  local value
  local function str()
    pos = pos + 1
    local out = {}
    while true do
      local c = s:sub(pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1 break end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        local map = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
        if map[e] then out[#out + 1] = map[e]; pos = pos + 2
        elseif e == "u" and s:sub(pos + 2, pos + 5):match("^%x%x%x%x$") then
          out[#out + 1] = utf8.char(tonumber(s:sub(pos + 2, pos + 5), 16)); pos = pos + 6
        else fail("bad escape") end
      elseif c:byte() < 32 then fail("control character in string")
      else out[#out + 1] = c; pos = pos + 1 end
    end
    return table.concat(out)
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local o = {}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1 return o end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then fail("expected a key") end
        local k = str(); ws()
        if s:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        o[k] = value(); ws()
        local d = s:sub(pos, pos); pos = pos + 1
        if d == "}" then return o elseif d ~= "," then fail("expected ',' or '}'") end
      end
    elseif c == "[" then
      local a = {}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1 return a end
      while true do
        a[#a + 1] = value(); ws()
        local d = s:sub(pos, pos); pos = pos + 1
        if d == "]" then return a elseif d ~= "," then fail("expected ',' or ']'") end
      end
    elseif c == '"' then return str()
    elseif s:sub(pos, pos + 3) == "true" then pos = pos + 4 return true
    elseif s:sub(pos, pos + 4) == "false" then pos = pos + 5 return false
    elseif s:sub(pos, pos + 3) == "null" then pos = pos + 4 return nil
    else
      local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if not num or num == "" or not tonumber(num) then fail("unexpected character") end
      pos = pos + #num
      return tonumber(num)
    end
  end
  local v = value(); ws()
  if pos <= #s then fail("trailing data") end
  return v
end

M.decode = json_decode

-- Reads and decodes a file.
function M.read(path)
  local f = assert(io.open(path, "r"))
  local s = f:read("a")
  f:close()
  return json_decode(s)
end

return M
