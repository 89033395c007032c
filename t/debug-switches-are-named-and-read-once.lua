-- debug-switches-are-named-and-read-once.lua — tg.debug(name [, on]) reads and sets the test-only switches
-- (returning the previous setting), refuses unknown names listing the known ones, and TG_DEBUG turns switches
-- on for a whole run, read when the library loads.
local tap = require "tap"
local tg = require "tegraph"

tap.is(tg.debug("gemm_blocked"), false, "a switch is off by default")
tap.is(tg.debug("gemm_blocked", true), false, "setting a switch returns its previous setting (off)")
tap.is(tg.debug("gemm_blocked"), true, "and the switch is now on")
tap.is(tg.debug("gemm_blocked", false), true, "turning it off returns the previous setting (on)")
tap.is(tg.debug("gemm_blocked"), false, "and the switch is off again")

-- the CPU GEMM under the switch (its blocked loops where CBLAS would run) gives the default path's product
local a, b = tg.randn({ 33, 20 }), tg.randn({ 20, 17 })
local ref = a:matmul(b):totable()
tg.debug("gemm_blocked", true)
local blocked = a:matmul(b):totable()
tg.debug("gemm_blocked", false)
local worst = 0
for i = 1, #ref do
  for j = 1, #ref[i] do worst = math.max(worst, math.abs(ref[i][j] - blocked[i][j])) end
end
tap.ok(worst < 1e-4, string.format("a GEMM under gemm_blocked matches the default path (max diff %g)", worst))

tap.error_like(function() tg.debug("no_such_switch", true) end,
  "debug%-switches%-are%-named%-and%-read%-once%.lua:%d+: .*no debug flag 'no_such_switch' %(flags: .*alloc_direct",
  "an unknown name is refused at the caller's line, listing the known switches")
tap.error_like(function() tg.debug("gemm_blocked", 1) end, "boolean expected",
  "the setting must be a boolean")
tap.error_like(function() tg.debug() end, "bad argument #1", "the name is required")

-- TG_DEBUG=name,name for a whole run: read once when the library loads; an unknown name is an error at startup
-- (the program exits 2 naming it and the known switches; loading the library fails), not a run on the wrong path
local ex = require "run_example"
local top_build, q = ex.top_build, ex.q
local script = os.tmpname()
local f = assert(io.open(script, "w"))
f:write('local tg = require "tegraph"\n',
  'print(tg.debug("unfused_dgelu"), tg.debug("alloc_direct"), tg.debug("gemm_blocked"))\n')
f:close()
-- runs the program with env and args; its stdout, stderr and exit status
local function run(env, args)
  local code, out, err = ex.capture(env .. " " .. q(top_build .. "/tegraph") .. " --device cpu " .. args)
  return out, err, code
end
local out, err, code = run("TG_DEBUG=unfused_dgelu,alloc_direct", "run " .. q(script))
tap.is(code, 0, "a run with TG_DEBUG set succeeds")
tap.is(out, "true\ttrue\tfalse\n", "TG_DEBUG turns on the switches it names, and only those")
out, err, code = run("TG_DEBUG=unfused_dgelu,bogus,alloc_direct", "run " .. q(script))
tap.is(code, 2, "an unknown name in TG_DEBUG is a usage error: the program exits 2")
tap.is(out, "", "... before running the script")
tap.like(err, "TG_DEBUG: unknown flag 'bogus' %(known: skip_hooks_after_replay, .*comm_check", "... naming it and the known ones")
out, err, code = run("TG_DEBUG=bogus_switch", "-e " .. q('print("ran")'))
tap.is(code, 2, "a chunk that reads no switch is refused too (the name is checked at startup, not at first use)")
tap.like(err, "unknown flag 'bogus_switch'", "... naming it")
out, err, code = run("TG_DEBUG=comm_chek", "-e " .. q('print("ran")'))
tap.ok(code == 2 and err:match("unknown flag 'comm_chek'"), "a misspelt real switch (comm_chek) is refused as well")
-- a host embedding the library (examples/embed/host): tg_runtime_new fails, the message in tg_last_error
do
  local p = assert(io.popen("TG_DEBUG=comm_chek " .. q(top_build .. "/examples/embed/host") .. " 2>&1", "r"))
  local hout = p:read("a")
  local _, _, hcode = p:close()
  tap.ok(hcode ~= 0 and hout:match("cannot create a runtime: .*TG_DEBUG: unknown flag 'comm_chek' %(known: "),
    "an embedding host cannot create a runtime under an unknown TG_DEBUG name, and is told why")
end
os.remove(script)
ex.cleanup()

tap.done_testing()
