#!/bin/sh
# sched-zero-bubble-example-runs.sh — examples/zero_bubble.lua runs 1F1B, interleaved, ZB-H1 and ZB-V (eager and
# graphed) through the executor, prints idle times, finds identical gradients, writes SVGs and a trace.
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
EX="${TG_TOP_SRCDIR:-.}/examples/zero_bubble.lua"
dir=$(mktemp -d "${TMPDIR:-/tmp}/tg-zb.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
echo "1..13"
n=0
for mode in "" "--graphed"; do
    label=${mode:-eager}
    out=$(cd "$dir" && "$TEGRAPH" --device cpu run "$EX" --layers 4 --stages 2 --microbatches 4 --width 16 --tokens 8 \
        --batch 2 --steps 1 --svg "$dir/s" --trace "$dir/trace$mode.json" $mode 2>&1)
    rc=$?
    n=$((n + 1))
    if [ $rc -eq 0 ]; then echo "ok $n - zero_bubble.lua ($label) exits 0"; else echo "not ok $n - zero_bubble.lua ($label) exited $rc"; fi
    n=$((n + 1))
    case "$out" in
        *"1F1B:"*"stage | idle"*"interleaved:"*"ZB-H1:"*"ZB-V:"*"measured costs:"*"bit-identical: yes"*) echo "ok $n - $label: prints idle times per schedule and identical gradients" ;;
        *) echo "not ok $n - $label: unexpected output" ;;
    esac
    echo "$out" | sed 's/^/# /'
done
n=$((n + 1))
if [ -s "$dir/s-1f1b.svg" ] && [ -s "$dir/s-interleaved.svg" ] && [ -s "$dir/s-zb_h1.svg" ] && [ -s "$dir/s-zb_v.svg" ] && [ -s "$dir/s-zb_v-measured.svg" ]; then
    echo "ok $n - SVGs written for every schedule"
else
    echo "not ok $n - SVGs missing"; ls "$dir" | sed 's/^/# /'
fi
n=$((n + 1))
if [ -s "$dir/trace.json" ] && grep -q '"traceEvents"' "$dir/trace.json"; then
    echo "ok $n - --trace writes a Chrome trace"
else
    echo "not ok $n - no trace"
fi
n=$((n + 1))
# one action event per action: 4 schedules x (computes + transfers); count them from the plans
cat > "$dir/count.lua" <<'LUA'
local S = require "tegraph.schedule"
local n = 0
for _, p in ipairs { S.one_f_one_b { stages = 2, microbatches = 4 },
  S.interleaved { stages = 2, microbatches = 4, chunks_per_stage = 2 }, S.zb_h1 { stages = 2, microbatches = 4 },
  S.zb_v { stages = 2, microbatches = 4 } } do
  for s = 1, p.stages do n = n + #p[s] end
end
print(n)
LUA
want=$("$TEGRAPH" run "$dir/count.lua" 2>&1)
got=$(grep -c '"cat":"action","ph":"X"' "$dir/trace.json")
if [ "$got" = "$want" ]; then echo "ok $n - the trace has one event per action ($got)"; else echo "not ok $n - $got action events, want $want"; fi
n=$((n + 1))
if command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["traceEvents"]' "$dir/trace--graphed.json"; then
        echo "ok $n - the graphed run's trace is JSON (python3)"
    else
        echo "not ok $n - python3 cannot load the graphed trace"
    fi
else
    echo "ok $n # SKIP no python3"
fi
n=$((n + 1))
out=$(cd "$dir" && "$TEGRAPH" --device cpu run "$EX" --layers 4 --stages 2 --microbatches 4 --width 16 --tokens 8 \
    --batch 2 --steps 1 --svg "" --dtype bf16 --sync 2>&1)
rc=$?
case "$out" in
    *"dtype bf16, action times on the device"*"bit-identical: yes"*) r=ok ;;
    *) r="not ok" ;;
esac
[ $rc -eq 0 ] || r="not ok"
echo "$r $n - --dtype bf16 --sync: bf16 layers, device-timed actions, and every schedule's gradients still bit-identical (rc $rc)"
echo "$out" | sed 's/^/# /'
n=$((n + 1))
out=$(cd "$dir" && "$TEGRAPH" --device cpu run "$EX" --layers 4 --stages 2 --svg "" 2>&1)
case "$out" in *"action times on the host"*) echo "ok $n - on the CPU the action times default to host times" ;;
    *) echo "not ok $n - no host-times line: $out" ;; esac
n=$((n + 1))
out=$("$TEGRAPH" --device cpu run "$EX" --dtype f16 2>&1)
rc=$?
case "$out" in
    *"--dtype must be f32 or bf16 (got 'f16')"*) [ $rc -eq 2 ] && r=ok || r="not ok" ;;
    *) r="not ok" ;;
esac
echo "$r $n - --dtype f16 is a usage error (exit 2, got $rc) naming the value: $out"
for bad in "--microbatches 0" "--stages 0"; do
    n=$((n + 1))
    out=$("$TEGRAPH" --device cpu run "$EX" $bad 2>&1)
    rc=$?
    case "$out" in
        *"must be at least 1 (got '0')"*"usage: tegraph run examples/zero_bubble.lua"*) [ $rc -eq 2 ] && r=ok || r="not ok" ;;
        *) r="not ok" ;;
    esac
    echo "$r $n - $bad is a usage error (exit 2, got $rc) naming the bound, with the usage"
done
exit 0
