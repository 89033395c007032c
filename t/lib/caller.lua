-- caller.lua — for tests of where errors point: the pattern of a "FILE:LINE: " prefix in the calling test file,
-- the caller's current line, a check that an error names the line its function is defined on, and whether a
-- file exists.
local tap = require "tap"

local M = {}

local function prefix(file, line) return "^" .. file:gsub("%p", "%%%0") .. ":" .. line .. ": " end

-- "^FILE:LINE: " (a Lua pattern) of the calling file at line
function M.at(line) return prefix(debug.getinfo(2, "S").short_src, line) end

-- the line the caller is on
function M.here() return debug.getinfo(2, "l").currentline end

-- fn calls the library on the line it is defined on: its error must match pattern and name that line
function M.refused(fn, pattern, what)
  local err = tap.error_like(fn, pattern, what)
  local info = debug.getinfo(fn, "S")
  if err then
    tap.like(err, prefix(info.short_src, info.linedefined), "... at the caller's line " .. info.linedefined)
  else
    tap.ok(false, "... at the caller's line")
  end
end

function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

return M
