#!/bin/sh
# cuda-kprof-counts-kernels.sh — examples/bench/gpu/kprof.c, loaded with CUDA_INJECTION64_PATH, counts every kernel
# launch, eager and replayed from a CUDA graph, names and groups it; KPROF_BASELINE and KPROF_STEPS give the
# calls per step of the work that differs between two runs; KPROF_SKIP_FIRST drops the first kernels.
# Skips without a CUDA device or without CUPTI.
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
SRC="${TG_TOP_SRCDIR:-.}"
n=$("$TEGRAPH" run -e 'print(tg.device_count("cuda"))' 2>/dev/null | tail -1)
if [ "${n:-0}" = 0 ]; then
    echo "1..0 # SKIP no CUDA device"
    exit 0
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/tg-kprof.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
nvcc=$(sed -n 's/^NVCC = //p' "${TG_TOP_BUILDDIR:-.}/Makefile" 2>/dev/null)
out=$(sh "$SRC/examples/bench/gpu/kprof-build.sh" "$dir/kprof.so" "$nvcc" 2>&1)
case $? in
0) ;;
1) echo "1..0 # SKIP $(echo "$out" | tail -1)"; exit 0 ;;
*) echo "1..1"; echo "not ok 1 - kprof.so builds"; echo "$out" | sed 's/^/# /'; exit 0 ;;
esac
# N eager gelu_forward launches, then one captured and replayed R times; the result read back (a sync)
cat > "$dir/work.lua" <<'LUA'
local tg = require "tegraph"
local n, r = tonumber(arg[1]), tonumber(arg[2])
local x = tg.randn({ 64, 64 }, { device = "cuda:0" })
local y
for _ = 1, n do y = tg.ops.gelu_forward(x) end
local g = tg.stream.capture(function() y = tg.ops.gelu_forward(x) end, { device = "cuda:0", pool = tg.pool("cuda:0") })
for _ = 1, r do g:replay() end
print(#y:totable())
LUA
echo "1..9"
t=0
ok() { t=$((t + 1)); if [ "$1" = "$2" ]; then echo "ok $t - $3"; else echo "not ok $t - $3"; echo "#   got '$1', expected '$2'"; fi; }
prof() { CUDA_INJECTION64_PATH="$dir/kprof.so" "$@" "$TEGRAPH" run "$dir/work.lua" $ARGS > "$dir/stdout" 2> "$dir/stderr"; }
# calls of the gelu_forward rows; the kept kernels and the graph kernels of the header line
gelu_calls() { awk '$6 ~ /gelu_forward/ { c += $3 } END { print c + 0 }' "$1"; }
gelu_group() { awk '$6 ~ /gelu_forward/ { print $5; exit }' "$1"; }
kept() { sed -n 's/^kprof: .* kept (\([0-9]*\) kernels, \([0-9]*\) of them in CUDA graphs.*/\1 \2/p' "$1"; }

ARGS="5 3" prof env KPROF_OUT="$dir/p1.txt" KPROF_RAW="$dir/p1.raw"
ok "$(gelu_calls "$dir/p1.txt")" 8 "5 eager launches and 3 graph replays of gelu_forward: 8 calls"
set -- $(kept "$dir/p1.txt")
ok "${2:-none}" 3 "3 of the kernels ran in CUDA graphs"
ok "$(gelu_group "$dir/p1.txt")" elementwise "gelu_forward is in the elementwise group"
ok "$(sed -n 's/^ *[0-9.]* *[0-9.]* *[0-9]*  elementwise$/x/p' "$dir/p1.txt" | head -1)" x "the groups table has an elementwise row"
ok "$(head -1 "$dir/p1.raw")" "# kprof raw 1" "KPROF_RAW writes the raw totals"
total=${1:-0}

ARGS="9 3" prof env KPROF_OUT="$dir/p2.txt" KPROF_BASELINE="$dir/p1.raw" KPROF_STEPS=4
ok "$(gelu_calls "$dir/p2.txt")" 1 "9 minus 5 eager launches over 4 steps: 1 call per step"
ok "$(grep -c 'minus the baseline run' "$dir/p2.txt")" 1 "the table says it subtracted the baseline"
ok "$(awk '$6 ~ /rand/ { print "left" }' "$dir/p2.txt")" "" "the randn kernel of both runs cancels"

ARGS="5 3" prof env KPROF_OUT="$dir/p3.txt" KPROF_SKIP_FIRST=$((total - 2))
set -- $(kept "$dir/p3.txt")
ok "${1:-none}" 2 "KPROF_SKIP_FIRST=$((total - 2)) of $total kernels keeps the last 2"
