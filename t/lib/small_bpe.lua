-- A small GPT-2-style byte-level BPE vocabulary written by hand for the tests: the 256 byte tokens in GPT-2's
-- byte-to-unicode form, a few merges, <|endoftext|>. write(dir, {style = "hf" | "openai"}) writes
-- vocab.json + merges.txt (or encoder.json + vocab.bpe) and returns the token -> id map (tokens as bytes).
local M = {}

-- GPT-2's byte-to-unicode map: printable bytes map to themselves, the other 68 to U+0100.. in byte order.
function M.byte_to_unicode()
  local map, n = {}, 0
  for b = 0, 255 do
    local printable = (b >= 33 and b <= 126) or (b >= 0xA1 and b <= 0xAC) or (b >= 0xAE and b <= 0xFF)
    if printable then map[b] = utf8.char(b) else map[b] = utf8.char(256 + n); n = n + 1 end
  end
  return map
end

function M.mapped(bytes)
  local map = M.byte_to_unicode()
  return (bytes:gsub(".", function(c) return map[c:byte()] end))
end

-- The merges, in rank order, as pairs of byte strings.
M.MERGES = {
  { " ", "t" }, { "h", "e" }, { " t", "he" }, { "i", "n" }, { " ", "a" }, { "a", "b" }, { "b", "c" }, { "a", "a" },
  { "in", "g" }, { " ", "w" }, { "o", "r" }, { " w", "or" }, { "l", "d" }, { " wor", "ld" }, { "\n", "\n" },
}

local function json_str(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

function M.write(dir, o)
  o = o or {}
  os.execute("mkdir -p '" .. dir .. "'")
  local ids, order = {}, {}
  local function add(tok)
    if not ids[tok] then
      order[#order + 1] = tok
      ids[tok] = #order - 1
    end
  end
  for b = 0, 255 do add(string.char(b)) end
  for _, m in ipairs(M.MERGES) do add(m[1] .. m[2]) end
  local parts = {}
  for i, tok in ipairs(order) do parts[i] = json_str(M.mapped(tok)) .. ": " .. (i - 1) end
  parts[#parts + 1] = json_str("<|endoftext|>") .. ": " .. #order
  ids["<|endoftext|>"] = #order
  local vname, mname = "vocab.json", "merges.txt"
  if o.style == "openai" then vname, mname = "encoder.json", "vocab.bpe" end
  local f = assert(io.open(dir .. "/" .. vname, "wb"))
  f:write("{", table.concat(parts, ", "), "}\n")
  f:close()
  f = assert(io.open(dir .. "/" .. mname, "wb"))
  f:write("#version: 0.2\n")
  for _, m in ipairs(M.MERGES) do f:write(M.mapped(m[1]), " ", M.mapped(m[2]), "\n") end
  f:close()
  return ids
end

return M
