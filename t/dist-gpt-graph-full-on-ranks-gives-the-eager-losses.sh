#!/bin/sh
# dist-gpt-graph-full-on-ranks-gives-the-eager-losses.sh — examples/gpt.lua --graph full on 2 data-parallel ranks (the
# whole step captured once after an eager first step, the ddp bucket all-reduces inside the graph, replayed each
# step) logs the losses of the eager run on 2 ranks bit for bit over 6 steps (with clipping, 2 microbatches; and with
# --fp8 delayed, whose amax all-reduce is captured too); zero1 stays refused with --graph full, naming why.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
TG_DEVICE=cpu
export TG_DEVICE
dir=$tmp
GPT="$SRCDIR/examples/gpt.lua"
ARGS="--steps 6 --layers 4 --quiet --samples 0 --eval 0 --seed 1234 --microbatches 2 --clip 0.5"

losses() {
    sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"
}
gpt() { # gpt NAME ARGS...: gpt.lua on 2 ranks, its losses in $dir/NAME.loss
    name=$1
    shift
    bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --log "$dir/$name.jsonl" "$@" \
        >"$dir/$name.out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { echo "# $name exited $rc:"; sed 's/^/#   /' "$dir/$name.out" | tail -20; }
    losses "$dir/$name.jsonl" >"$dir/$name.loss" 2>/dev/null
    return $rc
}
show() { echo "# $1: $(tr '\n' ' ' <"$dir/$1.loss")"; }

echo "1..7"
gpt eager
ok $? "-np 2 eager (ddp) finishes"
show eager
r=1
[ "$(wc -l <"$dir/eager.loss")" -eq 6 ] && [ "$(sed -n 1p "$dir/eager.loss")" != "$(sed -n 6p "$dir/eager.loss")" ] && r=0
ok $r "it logs 6 losses that change over the run"

gpt full --graph full
ok $? "-np 2 --graph full finishes"
show full
has "$dir/full.out" "full-iteration capture"
ok $? "it says it captures the whole step"
cmp -s "$dir/eager.loss" "$dir/full.loss"
ok $? "-np 2 --graph full: the 6 losses equal the eager run's bit for bit"

gpt fp8e --fp8 delayed && gpt fp8f --fp8 delayed --graph full && cmp -s "$dir/fp8e.loss" "$dir/fp8f.loss"
r=$?; show fp8e; show fp8f
ok $r "-np 2 --fp8 delayed --graph full (the amax all-reduce captured too) equals -np 2 --fp8 delayed eager, bit for bit"

bounded 60 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --graph full --zero1 >"$dir/z.out" 2>&1
r=1; has "$dir/z.out" "with zero1 is not supported" && r=0
ok $r "--graph full --zero1 is refused naming zero1"
finish
