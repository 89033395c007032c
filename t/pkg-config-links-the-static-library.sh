#!/bin/sh
# pkg-config-links-the-static-library.sh — a host builds against the build tree through pkg-config
# (PKG_CONFIG_PATH=BUILDDIR picks tegraph-uninstalled.pc): with --static, tegraph.pc's Requires.private and
# Libs.private name everything libtegraph.a needs (OpenMP, BLAS, MPI, CUDA, the system libraries), so a program
# links the static library and runs, needing no libtegraph.so; without --static it links the shared library. Skips
# when the static library was not built (--disable-static) or there is no pkg-config.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
B=$(cd "${TG_TOP_BUILDDIR:-.}" && pwd)
CC=${TG_CC:-cc}
PKG=${TG_PKG_CONFIG:-pkg-config}
if [ ! -f "$B/.libs/libtegraph.a" ]; then echo "1..0 # SKIP the static library was not built"; exit 0; fi
if ! command -v "$PKG" >/dev/null 2>&1; then echo "1..0 # SKIP no pkg-config"; exit 0; fi
echo "1..7"
PKG_CONFIG_PATH="$B${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH

top=$("$PKG" --variable=abs_top_builddir tegraph 2>"$tmp/err")
ok $([ "$top" = "$B" ]; echo $?) "pkg-config finds the build tree's tegraph (tegraph-uninstalled.pc: '$top', $(cat "$tmp/err"))"
cflags=$("$PKG" --cflags tegraph)
static=$("$PKG" --static --libs tegraph)
case "$static" in *-ltegraph*) r=0 ;; *) r=1 ;; esac
ok $r "pkg-config --static --libs tegraph gives the library's flags (got '$static')"

cat >"$tmp/host.c" <<'C'
#include <tegraph.h>
#include <stdio.h>
int main(void)
{
    tg_device cpu = {TG_CPU, 0};
    tg_tensor *a = NULL, *c = NULL;
    double sum = 0;
    if (tg_tensor_new(TG_F32, 2, (int64_t[]){4, 4}, cpu, &a) || tg_tensor_new(TG_F32, 2, (int64_t[]){4, 4}, cpu, &c) ||
        tg_fill(a, 1) || tg_gemm(c, a, 0, a, 1, 1, 0) || tg_sum(c, &sum)) {
        printf("failed: %s\n", tg_last_error());
        return 1;
    }
    tg_runtime *rt = tg_runtime_new();
    if (!rt || tg_runtime_dostring(rt, "assert(tg.version)", "=host")) {
        printf("no runtime: %s\n", rt ? tg_runtime_error(rt) : tg_last_error());
        return 1;
    }
    tg_runtime_free(rt);
    printf("tegraph %s sum %g\n", tg_version(), sum);
    tg_tensor_free(a), tg_tensor_free(c);
    return 0;
}
C
# the static library in place of -ltegraph (both are in .libs, where the linker would prefer the shared one)
libs=$(echo "$static" | sed "s|-ltegraph\\b|$B/.libs/libtegraph.a|")
$CC $cflags "$tmp/host.c" -o "$tmp/host-static" $libs >"$tmp/out" 2>&1
rc=$?
ok $rc "a program links libtegraph.a with the flags pkg-config --static gives$( [ $rc = 0 ] || echo ": $(grep -m 3 -i 'undefined\|error' "$tmp/out" | tr '\n' ' ')")"
out=$("$tmp/host-static" 2>&1)
case "$out" in "tegraph "*" sum 64") r=0 ;; *) r=1 ;; esac
ok $r "and runs (got '$out')"
if command -v ldd >/dev/null 2>&1; then
    ldd "$tmp/host-static" 2>/dev/null | grep -q libtegraph
    ok $((! $?)) "needing no libtegraph.so"
else
    ok 0 "# skip no ldd"
fi

$CC $cflags "$tmp/host.c" -o "$tmp/host-shared" $("$PKG" --libs tegraph) >"$tmp/out" 2>&1
ok $? "without --static it links the shared library ($(head -n 2 "$tmp/out" | tr '\n' ' '))"
# a sanitizer build's libtegraph.so needs the sanitizer runtimes loaded first into a host built without them
san=$(ldd "${TG_TOP_BUILDDIR:-.}/.libs/libtegraph.so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
if [ -n "$san" ]; then
    out=$(LD_PRELOAD="$san" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$tmp/host-shared" 2>&1)
else
    out=$("$tmp/host-shared" 2>&1)
fi
case "$out" in "tegraph "*" sum 64") r=0 ;; *) r=1 ;; esac
ok $r "and runs from the build tree (got '$out')"
[ "$n" -eq 7 ] || echo "# ran $n checks, planned 7"
exit 0
