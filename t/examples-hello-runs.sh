#!/bin/sh
# examples-hello-runs.sh — examples/hello.lua runs on the CPU and its replayed product checks out.
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
echo "1..2"
out=$("$TEGRAPH" --device cpu run "${TG_TOP_SRCDIR:-.}/examples/hello.lua" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "ok 1 - hello.lua exits 0"; else echo "not ok 1 - hello.lua exited $rc"; fi
case "$out" in
    *"a @ b ="*"{4, 5, 10, 11}"*"step 3:"*"check: sum(y) ="*) echo "ok 2 - hello.lua prints the product and the replay check" ;;
    *) echo "not ok 2 - unexpected output" ;;
esac
echo "$out" | sed 's/^/# /'
exit 0
