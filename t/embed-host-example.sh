#!/bin/sh
# embed-host-example.sh — the embedding example (examples/embed/host) runs Lua, calls its C functions, reports errors, and
# its C wgrad hook on a graphed delayed-wgrad model runs once per parameter per microbatch after the W replays, is removed, and fails a backward.
HOST="${TG_TOP_BUILDDIR:-.}/examples/embed/host"
echo "1..7"
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
case "$out" in
    *"host: C hook on 4 parameters x 3 microbatches: once each, after its W replay, main_grad as eager"*)
        echo "ok 5 - the C hook ran once per parameter per microbatch, after its W replay, with the right info" ;;
    *) echo "not ok 5 - the C hook's dispatches were wrong" ;;
esac
case "$out" in
    *"host: removed hooks: silent in the next step, the other hook still fires"*) echo "ok 6 - removed C hooks no longer fire" ;;
    *) echo "not ok 6 - hook removal went wrong" ;;
esac
case "$out" in
    *"host: failing C hook -> the backward fails with its message"*) echo "ok 7 - a failing C hook fails the backward with its message" ;;
    *) echo "not ok 7 - a failing C hook did not fail the backward as expected" ;;
esac
echo "$out" | sed 's/^/# /'
exit 0
