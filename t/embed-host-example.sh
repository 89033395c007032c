#!/bin/sh
# embed-host-example.sh — the embedding example (examples/embed/host) runs Lua, calls its C functions and reports errors.
HOST="${TG_TOP_BUILDDIR:-.}/examples/embed/host"
echo "1..4"
out=$("$HOST" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "ok 1 - the host exits 0"; else echo "not ok 1 - the host exited $rc"; fi
case "$out" in
    *"lua: scaled "*" -> {2.5, 5, 7.5, 10}"*) echo "ok 2 - Lua saw the tensor made and scaled in C" ;;
    *) echo "not ok 2 - Lua did not report the scaled tensor" ;;
esac
case "$out" in
    *"host: result sums to 25"*) echo "ok 3 - the host read the result tensor back from Lua" ;;
    *) echo "not ok 3 - the host did not read the result back" ;;
esac
case "$out" in
    *"failing script -> lua error: failing-script:2: bad argument #2 to 'host_scale' (number expected, got string)"*)
        echo "ok 4 - a failing script reports FILE:LINE: message" ;;
    *) echo "not ok 4 - the failing script's error was not reported as expected" ;;
esac
echo "$out" | sed 's/^/# /'
exit 0
