-- dist_tap.lua — TAP for scripts run on every rank: each check must hold on all ranks (agreed over the world), rank 0 prints.
local tg = require "tegraph"
local tap = require "tap"

local c = tg.comm.world()
local M = { comm = c, rank = c:rank(), size = c:size() }

local function agree(cond)
  local t = tg.tensor({ cond and 1 or 0 }, { dtype = "i32", device = tg.default_device() })
  c:all_reduce(t, { op = "min" })
  return t:totable()[1] == 1
end

-- Passes when cond holds on every rank; a rank where it fails says so on stderr.
function M.ok(cond, msg)
  if not cond then
    local here, where = debug.getinfo(1, "S").source, "?"
    for level = 2, 10 do
      local info = debug.getinfo(level, "Sl")
      if not info then break end
      if info.source ~= here then
        where = string.format("%s:%d", info.short_src, info.currentline or 0)
        break
      end
    end
    io.stderr:write(string.format("not ok on rank %d: %s (at %s)\n", M.rank, msg, where))
  end
  local all = agree(cond)
  if M.rank == 0 then tap.ok(all, msg) end
  return all
end

-- Passes when every element of got and want (tensors or nested tables) are
-- within tol (0: identical) on every rank; rank-local diagnostics on failure.
function M.close(got, want, tol, msg)
  local okc, maxdiff = tg.allclose(got, want, 0, tol)
  if not okc then io.stderr:write(string.format("rank %d: %s: max |diff| = %.9g (tol %g)\n", M.rank, msg, maxdiff, tol)) end
  return M.ok(okc, msg)
end

-- Records n (default 1) tests as skipped, for a reason that holds on every rank.
function M.skip(why, n) if M.rank == 0 then tap.skip(why, n) end end

function M.plan(n) if M.rank == 0 then tap.plan(n) end end
function M.diag(...) if M.rank == 0 then tap.diag(...) end end

-- Skips the whole test on every rank (call it on all of them).
function M.skip_all(why)
  if M.rank == 0 then tap.skip_all(why) end
  os.exit(0, true)
end

function M.done_testing()
  c:barrier()
  if M.rank == 0 then tap.done_testing() end
end

return M
