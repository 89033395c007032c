#!/bin/sh
# dist-zero-bubble-on-ranks.sh — examples/zero_bubble.lua on 2 ranks (one stage each) measures the 1F1B, interleaved, ZB-H1 and ZB-V
# step times and prints them beside the simulator's prediction for the measured F/B/W times, and draws each as SVG.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
EX="$SRCDIR/examples/zero_bubble.lua"
(cd "$tmp" && bounded 300 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$EX" --layers 4 --width 16 --tokens 8 \
    --batch 2 --microbatches 4 --steps 1 --svg "$tmp/s") >"$tmp/zb.out" 2>&1
ok $? "zero_bubble.lua on 2 ranks exits 0"
has "$tmp/zb.out" "2 stages on 2 ranks"
ok $? "it runs one stage per rank"
r=0
for s in 1F1B interleaved ZB-H1 ZB-V; do
    # a row: name | measured ms | simulated ms | bubble % | ratio, the times positive numbers
    awk -v s="$s" -F'|' '$1 ~ "^"s" " && $2 + 0 > 0 && $3 + 0 > 0 && $4 ~ /%/ && $7 + 0 > 0 && $8 + 0 > 0 { f = 1 } END { exit !f }' "$tmp/zb.out" || r=1
done
ok $r "the table has measured and simulated step times (with the ZB-H1 run's costs and with its own) for 1F1B, interleaved, ZB-H1 and ZB-V"
grep -Eq "measured per chunk .*F [0-9.]+ ms, B [0-9.]+ ms, W [0-9.]+ ms" "$tmp/zb.out"
ok $? "it prints the measured F, B and W times the simulation uses"
r=1
[ -s "$tmp/s-1f1b-ranks.svg" ] && [ -s "$tmp/s-interleaved-ranks.svg" ] && [ -s "$tmp/s-zb_h1-ranks.svg" ] && [ -s "$tmp/s-zb_v-ranks.svg" ] && has "$tmp/s-zb_v-ranks.svg" "<svg" && r=0
ok $r "an SVG per schedule"
sed 's/^/# /' "$tmp/zb.out"
echo "1..$n"
finish
