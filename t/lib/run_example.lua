-- run_example.lua — for tests: runs a script of examples/ through the built tegraph program, and small file helpers.
local M = {}

M.top_src = os.getenv("TG_TOP_SRCDIR") or "."
M.top_build = os.getenv("TG_TOP_BUILDDIR") or "."

-- s quoted for the shell
function M.q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function command(script, args, pre)
  return M.q(M.top_build .. "/tegraph") .. (pre or "") .. " run " .. M.q(M.top_src .. "/examples/" .. script) .. " " .. args
end

-- run(script, args) -> whether it exited 0, its stdout and stderr together
function M.run(script, args)
  local p = assert(io.popen(command(script, args) .. " 2>&1", "r"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

-- capture(cmd) -> exit code, stdout, stderr of a shell command (stderr through a temporary file)
local errfile
function M.capture(cmd)
  errfile = errfile or os.tmpname()
  local p = assert(io.popen(cmd .. " 2>" .. M.q(errfile), "r"))
  local so = p:read("a")
  local _, _, c = p:close()
  local f = io.open(errfile, "r")
  local se = f and f:read("a") or ""
  if f then f:close() end
  return c, so, se
end

-- run_cpu(script, args) -> exit code, stdout, stderr, on the CPU backend
function M.run_cpu(script, args) return M.capture(command(script, args, " --device cpu")) end

-- Removes capture's temporary file.
function M.cleanup()
  if errfile then os.remove(errfile) end
  errfile = nil
end

-- A new empty directory under the temporary directory.
function M.tmpdir()
  local base = os.tmpname()
  os.remove(base)
  os.execute("mkdir -p " .. M.q(base))
  return base
end

function M.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

return M
