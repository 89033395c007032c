-- tegraph.options: the check of option tables the Lua library makes, so a misspelt option is an error
-- rather than a default silently used, with one message everywhere.
--
--   options.check("data.open", o, { "vocab", "device", "headerless" })
--     -> raises "data.open: unknown option 'vocb' (known: device, headerless, vocab)" at the caller's line
--   options.check("nn.GPT", cfg, known_set, { n_layer = "num_layers" })
--     -> "nn.GPT: unknown option 'n_layer' (use num_layers)" for a name another library uses
--
-- known: a list of names or a set (name -> true); renamed (optional): name -> the name to use instead.
-- Returns o.
local raise = require "tegraph.raise"

local M = {}

function M.check(who, o, known, renamed)
  local set = known
  if known[1] ~= nil then
    set = {}
    for _, k in ipairs(known) do set[k] = true end
  end
  for k in pairs(o) do
    if not set[k] then
      local key = type(k) == "string" and "'" .. k .. "'" or tostring(k)
      if renamed and renamed[k] then raise(string.format("%s: unknown option %s (use %s)", who, key, renamed[k])) end
      local names = {}
      for n in pairs(set) do names[#names + 1] = n end
      table.sort(names)
      raise(string.format("%s: unknown option %s (known: %s)", who, key, table.concat(names, ", ")))
    end
  end
  return o
end

-- options.path(who, what, p): refuses a path holding a NUL byte (the C library, io.open included, would end it
-- there: "a\0.txt" opens "a"): "who: what "a\0..." holds a NUL byte at byte N". Returns p.
function M.path(who, what, p)
  local at = type(p) == "string" and p:find("\0", 1, true)
  if at then
    raise(string.format("%s: %s \"%s\\0...\" holds a NUL byte at byte %d (C would end it there)", who, what,
      p:sub(1, at - 1), at - 1))
  end
  return p
end

return M
