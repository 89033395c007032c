-- tap.lua — TAP output for the Lua tests: plan, ok, is, near, like, error_like, skip, skip_all, done_testing.
local M = {}

local planned, count, failed = nil, 0, 0

local function out(s)
  io.stdout:write(s, "\n")
  io.stdout:flush()
end

local function diag_lines(s)
  for line in (tostring(s) .. "\n"):gmatch("(.-)\n") do out("# " .. line) end
end

function M.diag(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
  diag_lines(table.concat(parts))
end

function M.plan(n)
  planned = n
  out("1.." .. n)
end

-- Prints "1..0 # SKIP why" and ends the script successfully.
function M.skip_all(why)
  out("1..0 # SKIP " .. (why or ""))
  os.exit(0, true)
end

-- Records n (default 1) tests as skipped: "ok N # SKIP why".
function M.skip(why, n)
  for _ = 1, n or 1 do
    count = count + 1
    out(string.format("ok %d # SKIP %s", count, why or ""))
  end
end

-- Records one test; returns cond.
function M.ok(cond, msg)
  count = count + 1
  if not cond then failed = failed + 1 end
  out(string.format("%sok %d - %s", cond and "" or "not ", count, msg or ""))
  if not cond then
    local here = debug.getinfo(1, "S").source
    for level = 2, 10 do
      local info = debug.getinfo(level, "Sl")
      if not info then break end
      if info.source ~= here then
        M.diag(string.format("  failed at %s:%d", info.short_src, info.currentline or 0))
        break
      end
    end
  end
  return cond and true or false
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

function M.is(got, want, msg)
  local r = M.ok(got == want, msg)
  if not r then M.diag("       got: " .. show(got), "\n  expected: " .. show(want)) end
  return r
end

function M.isnt(got, unwanted, msg)
  local r = M.ok(got ~= unwanted, msg)
  if not r then M.diag("       got: " .. show(got) .. " (expected anything else)") end
  return r
end

-- |got - want| <= tol
function M.near(got, want, tol, msg)
  local r = type(got) == "number" and math.abs(got - want) <= tol
  M.ok(r, msg)
  if not r then M.diag("       got: " .. show(got), "\n  expected: " .. show(want) .. " +/- " .. tostring(tol)) end
  return r
end

-- got (a string) matches the Lua pattern
function M.like(got, pattern, msg)
  local r = type(got) == "string" and got:find(pattern) ~= nil
  M.ok(r, msg)
  if not r then M.diag("       got: " .. show(got), "\n  expected to match: " .. show(pattern)) end
  return r
end

-- fn() raises an error whose message matches pattern; returns the message.
function M.error_like(fn, pattern, msg)
  local okc, err = pcall(fn)
  if okc then
    M.ok(false, msg)
    M.diag("  expected an error matching " .. show(pattern) .. ", got none")
    return nil
  end
  err = tostring(err)
  local r = err:find(pattern) ~= nil
  M.ok(r, msg)
  if not r then M.diag("     error: " .. show(err), "\n  expected to match: " .. show(pattern)) end
  return err
end

-- fn() runs without error.
function M.lives_ok(fn, msg)
  local okc, err = pcall(fn)
  M.ok(okc, msg)
  if not okc then M.diag("  died: " .. tostring(err)) end
  return okc
end

-- Deep comparison of nested tables of numbers/strings, with optional tolerance.
local function deep_eq(a, b, tol, path)
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false, path .. ": length " .. #a .. " vs " .. #b end
    for i = 1, #a do
      local okc, where = deep_eq(a[i], b[i], tol, path .. "[" .. i .. "]")
      if not okc then return false, where end
    end
    return true
  end
  if type(a) == "number" and type(b) == "number" and tol then
    if math.abs(a - b) <= tol then return true end
  elseif a == b then
    return true
  end
  return false, path .. ": " .. show(a) .. " vs " .. show(b)
end

function M.is_deeply(got, want, msg, tol)
  local r, where = deep_eq(got, want, tol, "")
  M.ok(r, msg)
  if not r then M.diag("  differs at " .. (where ~= "" and where or "top")) end
  return r
end

-- Prints the plan if none was given; raises an error when a test failed
-- (so the runner exits non-zero).
function M.done_testing()
  if planned == nil then out("1.." .. count) end
  if planned and planned ~= count then
    M.diag(string.format("planned %d tests but ran %d", planned, count))
  end
  if failed > 0 then
    io.stderr:write(string.format("%d of %d tests failed\n", failed, count))
    os.exit(1, true)
  end
  return true
end

return M
