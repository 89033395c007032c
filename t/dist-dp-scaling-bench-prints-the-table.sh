#!/bin/sh
# dist-dp-scaling-bench-prints-the-table.sh — examples/bench/dp_scaling.sh on 1 and 2 CPU ranks (a tiny gpt.lua): a row per
# rank count and reduce policy with steady tokens/s, the scaling against one rank (1.00x there), and for 2 ranks the
# reduce time per step from the traced run with its exposed part (no larger than the reduce); bad settings exit 2.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
B="$SRCDIR/examples/bench/dp_scaling.sh"
TINY="--layers 1 --width 16 --heads 2 --context 16 --vocab 64 --batch 2 --steps 5 --dtype f32"
echo "1..7"
RANKS="1 2" GRAPHS=eager MODES="ddp zero1" TEGRAPH="$TEGRAPH" bounded 300 sh "$B" "$tmp/o" $TINY >"$tmp/out" 2>&1
ok $? "dp_scaling.sh exits 0"
# the table's rows: ranks reduce mode bucket tokens/s scaling reduce exposed
row() { awk -v n="$1" -v m="$2" '$1 == n && $2 == m && $3 == "eager" && NF == 8' "$tmp/out" | tail -1; }
r1=$(row 1 ddp); r2=$(row 2 ddp); z2=$(row 2 zero1)
echo "$r1" | awk '$5 ~ /^[0-9]+$/ && $5 > 0 && $6 == "1.00x" && $7 == "-" { f = 1 } END { exit !f }'
ok $? "one rank: tokens/s, scaling 1.00x, no reduce ($r1)"
for r in "$r2" "$z2"; do
    echo "$r" | awk '$5 ~ /^[0-9]+$/ && $5 > 0 && $6 ~ /^[0-9.]+x$/ && $7 + 0 > 0 && $8 != "" && $8 + 0 <= $7 + 0 { f = 1 } END { exit !f }'
    ok $? "two ranks: tokens/s, a scaling, the reduce per step and its exposed part, exposed <= reduce ($r)"
done
[ -s "$tmp/o/n2-ddp-eager-b25.trace.json.rank0" ] && [ -s "$tmp/o/n2-ddp-eager-b25.log" ]
ok $? "each run's log and the traced run's trace are kept in OUT"
RANKS=2 GRAPHS=eager MODES=ddp BUCKETS="0.01 25" TRACE=0 TEGRAPH="$TEGRAPH" bounded 300 sh "$B" "$tmp/o" $TINY >"$tmp/sweep" 2>&1
f=$(awk '$1 == 2 && $2 == "ddp" && $3 == "eager" && NF == 8 { print $4, $5 }' "$tmp/sweep" | sort -k2,2n | tail -1)
grep -q "^  2 ranks, ddp, eager: ${f% *} MiB (${f#* } tokens/s)" "$tmp/sweep"
ok $? "a sweep of two bucket sizes names the faster one ($f)"
MODES=fsdp TEGRAPH="$TEGRAPH" sh "$B" "$tmp/bad" >"$tmp/bad.out" 2>&1
rc=$?
ok $([ $rc -eq 2 ] && grep -q "MODES: ddp or zero1, not 'fsdp'" "$tmp/bad.out"; echo $?) "an unknown reduce policy exits 2 naming it (rc $rc)"
sed 's/^/# /' "$tmp/out"
finish
