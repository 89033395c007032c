#!/bin/sh
# examples-hello-runs.sh — examples/hello.lua runs on the CPU and its replayed product checks out; it and
# examples/custom_reduce.lua take a tegraph.cli option table: --help prints the usage and exits 0, an unknown
# option is a usage error (exit 2) instead of being ignored.
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
EX="${TG_TOP_SRCDIR:-.}/examples"
echo "1..6"
out=$("$TEGRAPH" --device cpu run "$EX/hello.lua" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "ok 1 - hello.lua exits 0"; else echo "not ok 1 - hello.lua exited $rc"; fi
case "$out" in
    *"a @ b ="*"{4, 5, 10, 11}"*"step 3:"*"check: sum(y) ="*) echo "ok 2 - hello.lua prints the product and the replay check" ;;
    *) echo "not ok 2 - unexpected output" ;;
esac
echo "$out" | sed 's/^/# /'
n=2
for script in hello.lua custom_reduce.lua; do
    out=$("$TEGRAPH" --device cpu run "$EX/$script" --help 2>&1)
    rc=$?
    n=$((n + 1))
    case "$rc:$out" in
        "0:usage: tegraph run examples/$script"*) echo "ok $n - $script --help prints the usage and exits 0" ;;
        *) echo "not ok $n - $script --help: exit $rc: $(echo "$out" | head -n 1)" ;;
    esac
    out=$("$TEGRAPH" --device cpu run "$EX/$script" --bogus 3 2>&1)
    rc=$?
    n=$((n + 1))
    case "$rc:$out" in
        "2:$script: unknown argument '--bogus'"*) echo "ok $n - $script --bogus 3 is a usage error (exit 2), naming it" ;;
        *) echo "not ok $n - $script --bogus 3: exit $rc: $(echo "$out" | head -n 1)" ;;
    esac
done
exit 0
