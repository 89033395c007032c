#!/bin/sh
# dist-gpt-launchers-give-the-same-losses.sh — examples/gpt.lua data parallel (ddp) through `mpirun -np N` and
# through `tegraph run -n N` gives the same losses bit for bit, on 2 and 4 CPU ranks, eager and --graph.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
GPT="$SRCDIR/examples/gpt.lua"
SMALL="--width 16 --layers 1 --heads 2 --batch 4 --microbatches 2 --quiet --samples 0 --eval 0 --warmup 2 --steps 4"

# losses FILE: "step loss" lines of a --log file, the loss with all its digits
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

echo "1..4"
for c in "2" "2 --graph" "4" "4 --graph"; do
    set -- $c
    np=$1
    shift
    name="$np$*"
    bounded 300 "$TG_MPIRUN" -np "$np" --oversubscribe "$TEGRAPH" run "$GPT" $SMALL "$@" --log "$tmp/m$name" \
        >"$tmp/m$name.out" 2>&1
    bounded 300 "$TEGRAPH" run -n "$np" "$GPT" $SMALL "$@" --log "$tmp/r$name" >"$tmp/r$name.out" 2>&1
    a=$(losses "$tmp/m$name")
    b=$(losses "$tmp/r$name")
    ok $([ "$(echo "$a" | wc -l)" -eq 4 ] && [ "$a" = "$b" ]; echo $?) \
        "$np ranks $*: mpirun -np $np and tegraph run -n $np give the same 4 losses bit for bit ($(echo $b | head -c 90))"
done
finish
