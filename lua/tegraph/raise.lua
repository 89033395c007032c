-- tegraph.raise: errors of the Lua library point at the user's line.
-- raise(msg) raises msg positioned at the innermost Lua function on the stack that is not part of
-- this library, so a bad argument passed to tg.optim.AdamW or tg.data.open names the script's
-- file:line however deep inside the library the check sits. With no such function on the stack
-- (the library's own command-line tools), the position is the line that raised.
local here = debug.getinfo(1, "S").source
local libdir = here:match("^@(.*[/\\])[^/\\]*$")

-- The C bindings name the same user line for errors of C calls the library makes.
if libdir then debug.getregistry()["tegraph.libdir"] = libdir end

local function in_library(source)
  return libdir ~= nil and source:sub(1, 1) == "@" and source:sub(2, #libdir + 1) == libdir
end

local function raise(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info then level = 2; break end
    if info.what ~= "C" and not in_library(info.source) then break end
    level = level + 1
  end
  error(msg, level)
end

return raise
