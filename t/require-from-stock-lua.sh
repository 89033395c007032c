#!/bin/sh
# require-from-stock-lua.sh — the stock lua5.4 interpreter can require "tegraph" (module + Lua library) and use it,
# also with only LUA_CPATH naming the build's C module (the module then finds the Lua files beside it).
if [ -z "$TG_LUA" ]; then
    echo "1..0 # SKIP no stock Lua 5.4 interpreter (configure found none)"
    exit 0
fi
# A sanitizer build's module needs the sanitizer runtimes loaded first into the (uninstrumented) interpreter.
san=$(ldd "${TG_TOP_BUILDDIR:-.}/lua/.libs/tegraph.so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
if [ -n "$san" ]; then
    LD_PRELOAD="$san"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export LD_PRELOAD ASAN_OPTIONS
fi
echo "1..4"
out=$("$TG_LUA" -e '
local tg = require "tegraph"
local a = tg.tensor({{1, 2}, {3, 4}}, {device = "cpu"})
local b = a:matmul(a)
local t = b:totable()
io.write(string.format("%s %g %g %g %g %s", tg.version, t[1][1], t[1][2], t[2][1], t[2][2], tostring(tg.is_tensor(b))))
collectgarbage()
' 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "ok 1 - lua5.4 -e require \"tegraph\" exits 0"; else echo "not ok 1 - lua5.4 exited $rc"; fi
case "$out" in
    [0-9]*" 7 10 15 22 true") echo "ok 2 - the stock interpreter computes a matmul through tegraph ($out)" ;;
    *) echo "not ok 2 - unexpected output"; echo "$out" | sed 's/^/# /' ;;
esac
# An error raised by tegraph reaches the stock interpreter as a normal Lua error.
out=$("$TG_LUA" -e '
local tg = require "tegraph"
local okc, err = pcall(function() return tg.zeros({2, 3}, {device = "cpu"}):add(tg.zeros({3, 2}, {device = "cpu"})) end)
io.write(tostring(okc), " ", err)
' 2>&1)
case "$out" in
    "false "*":3: add: shapes differ"*"[2,3]"*"[3,2]"*) echo "ok 3 - tegraph errors are Lua errors in the stock interpreter" ;;
    *) echo "not ok 3 - unexpected output"; echo "$out" | sed 's/^/# /' ;;
esac
B="${TG_TOP_BUILDDIR:-.}"
if [ -f "$B/lua/tegraph/init.lua" ]; then
    out=$(env -u LUA_PATH -u LUA_PATH_5_4 LUA_CPATH="$B/lua/.libs/?.so" "$TG_LUA" -e '
local tg = require "tegraph"
io.write(tostring(package.loaded.tegraph == tg), " ", tostring(tg.nn ~= nil), " ", tg.zeros({2}, {device = "cpu"}):sum())
' 2>&1)
    case "$out" in
        "true true 0"*) echo "ok 4 - require \"tegraph\" with only LUA_CPATH set loads the whole library" ;;
        *) echo "not ok 4 - with only LUA_CPATH: unexpected output"; echo "$out" | sed 's/^/# /' ;;
    esac
else
    echo "ok 4 # SKIP a build outside the source tree: its lua/ holds the module, not the Lua files"
fi
exit 0
