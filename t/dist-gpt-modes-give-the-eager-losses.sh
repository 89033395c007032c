#!/bin/sh
# dist-gpt-modes-give-the-eager-losses.sh — examples/gpt.lua (task, 4 layers, f32, fixed seed, 5 steps) gives the loss
# sequence of the single-process eager run with 4 microbatches in every mode: --graph bit for bit (the same sums in the
# same order); on ranks within 1e-6 relative: --pipeline 2 with each schedule, eager and --graph (the two copies of the
# tied token table add their gradients, and the clip norm adds the stages' sums, in another order), -n 2 data parallel
# and -n 4 --pipeline 2 (2 stages x 2 replicas, 2 microbatches each: the ddp average sums the replicas' gradients),
# -n 4 --pipeline 4 (middle stages) and -n 8 --pipeline 4 --graph (4 stages x 2 replicas).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
# the CPU proof: every run on CPU ranks, the single-process reference too (a host with one GPU cannot give two
# ranks a GPU each, and CPU and GPU sums differ)
TG_DEVICE=cpu
export TG_DEVICE
dir=$tmp
GPT="$SRCDIR/examples/gpt.lua"
ARGS="--steps 5 --layers 4 --quiet --samples 0 --eval 0 --seed 1234"

# losses FILE: the 5 losses of a --log file, one per line, as printed (%.17g: equal text is equal bits)
losses() {
    sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"
}
# gpt NAME NP ARGS...: gpt.lua on NP ranks (0: one process without mpirun), its losses in $dir/NAME
gpt() {
    name=$1 np=$2
    shift 2
    if [ "$np" = 0 ]; then
        bounded 120 "$TEGRAPH" run "$GPT" $ARGS --log "$dir/$name.jsonl" "$@" >"$dir/$name.out" 2>&1
    else
        bounded 120 "$TG_MPIRUN" -np "$np" --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --log "$dir/$name.jsonl" "$@" \
            >"$dir/$name.out" 2>&1
    fi
    rc=$?
    [ $rc -eq 0 ] || { echo "# $name exited $rc:"; sed 's/^/#   /' "$dir/$name.out" | tail -20; }
    losses "$dir/$name.jsonl" >"$dir/$name.loss" 2>/dev/null
    return $rc
}
# same NAME: 0 when NAME's losses equal the reference's text (bits)
same() {
    [ "$(wc -l <"$dir/$1.loss")" -eq 5 ] && cmp -s "$dir/ref.loss" "$dir/$1.loss"
}
# close NAME: 0 when each of NAME's 5 losses is within 1e-6 relative of the reference's
close() {
    [ "$(wc -l <"$dir/$1.loss")" -eq 5 ] || return 1
    paste "$dir/ref.loss" "$dir/$1.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad = 1 } END { exit bad }'
}
show() {
    echo "# reference: $(tr '\n' ' ' <"$dir/ref.loss")"
    echo "# $1: $(tr '\n' ' ' <"$dir/$1.loss")"
}

gpt ref 0 --microbatches 4
ok $? "single-process eager run (4 microbatches) finishes"
r=1
[ "$(wc -l <"$dir/ref.loss")" -eq 5 ] && ! grep -q nan "$dir/ref.loss" && r=0
ok $r "it logs 5 finite losses"
falls=1
[ "$(awk 'NR == 1 { a = $1 } NR == 5 { b = $1 } END { print (b < a) }' "$dir/ref.loss")" = 1 ] && falls=0
ok $falls "its loss falls over the 5 steps"

gpt graph 0 --microbatches 4 --graph && same graph
r=$?; show graph
ok $r "--graph (a graphed callable per layer, delayed wgrad, ddp hooks, capturable AdamW): bit for bit"
gpt graph2 0 --microbatches 4 --graph --layers-per-chunk 2 && same graph2
ok $? "--graph --layers-per-chunk 2: bit for bit"

for s in gpipe 1f1b interleaved zb_h1 zb_v; do
    gpt "pp-$s" 2 --microbatches 4 --pipeline 2 --schedule "$s" && close "pp-$s"
    r=$?; show "pp-$s"
    ok $r "-np 2 --pipeline 2 --schedule $s (eager): within 1e-6 relative"
done
for s in 1f1b zb_h1 zb_v; do
    gpt "ppg-$s" 2 --microbatches 4 --pipeline 2 --schedule "$s" --graph && close "ppg-$s"
    r=$?; show "ppg-$s"
    ok $r "-np 2 --pipeline 2 --schedule $s --graph: within 1e-6 relative"
done
gpt dp 2 --microbatches 2 && close dp
r=$?; show dp
ok $r "-np 2 data parallel (2 microbatches each, ddp): within 1e-6 relative"
gpt dpg 2 --microbatches 2 --graph && close dpg
ok $? "-np 2 data parallel --graph: within 1e-6 relative"
gpt pp2dp2 4 --microbatches 2 --pipeline 2 --schedule 1f1b && close pp2dp2
r=$?; show pp2dp2
ok $r "-np 4 --pipeline 2 (2 stages x 2 replicas, reduce on the stage's dp communicator): within 1e-6 relative"
gpt pp2dp2g 4 --microbatches 2 --pipeline 2 --schedule zb_h1 --graph && close pp2dp2g
ok $? "-np 4 --pipeline 2 --schedule zb_h1 --graph: within 1e-6 relative"
# zero1 on a pipeline, clipping with the norm over every stage (zb_v keeps the token table whole on stage 1)
gpt pp2dp2z 4 --microbatches 2 --pipeline 2 --schedule zb_v --zero1 && close pp2dp2z
r=$?; show pp2dp2z
ok $r "-np 4 --pipeline 2 --schedule zb_v --zero1 (clip 1: the shards' sums of squares added over the stages): within 1e-6 relative"
gpt pp2dp2zg 4 --microbatches 2 --pipeline 2 --schedule zb_v --zero1 --graph && close pp2dp2zg
ok $? "-np 4 --pipeline 2 --schedule zb_v --zero1 --graph: within 1e-6 relative"
# zero1 with the token table split over the first and last stage (its own all-reduce and AdamW)
gpt pp2dp2z1 4 --microbatches 2 --pipeline 2 --schedule 1f1b --zero1 && close pp2dp2z1
r=$?; show pp2dp2z1
ok $r "-np 4 --pipeline 2 --schedule 1f1b --zero1 (the split token table outside the shards): within 1e-6 relative"
gpt pp4dp2zg 8 --microbatches 2 --pipeline 4 --schedule zb_h1 --graph --zero1 && close pp4dp2zg
ok $? "-np 8 --pipeline 4 --schedule zb_h1 --graph --zero1 (middle stages without the table): within 1e-6 relative"
# stages between the first and the last (which hold neither copy of the tied token table)
gpt pp4 4 --microbatches 4 --pipeline 4 --schedule 1f1b && close pp4
r=$?; show pp4
ok $r "-np 4 --pipeline 4 --schedule 1f1b (two middle stages): within 1e-6 relative"
gpt pp4dp2g 8 --microbatches 2 --pipeline 4 --schedule zb_h1 --graph && close pp4dp2g
r=$?; show pp4dp2g
ok $r "-np 8 --pipeline 4 --schedule zb_h1 --graph (4 stages x 2 replicas, graphed, delayed wgrad): within 1e-6 relative"

# a different seed gives other losses: the comparisons above are not vacuous
gpt other 0 --microbatches 4 --seed 99
cmp -s "$dir/ref.loss" "$dir/other.loss"
[ $? -ne 0 ]
ok $? "another seed gives another loss sequence"

# bad combinations fail naming the problem
bounded 60 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --layers 3 --pipeline 2 >"$dir/bad.out" 2>&1
rc=$?
r=1; [ $rc -ne 0 ] && has "$dir/bad.out" "3 layers do not split into the 2 chunks of 1f1b on 2 stages" && r=0
ok $r "3 layers on 2 stages fail naming the split"
bounded 60 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --pipeline 2 --schedule zb >"$dir/bad2.out" 2>&1
r=1; has "$dir/bad2.out" "--schedule must be one of gpipe, 1f1b, interleaved, zb_h1, zb_v (got 'zb')" && r=0
ok $r "an unknown --schedule fails naming the known ones"
bounded 60 "$TG_MPIRUN" -np 3 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --pipeline 2 >"$dir/bad3.out" 2>&1
r=1; has "$dir/bad3.out" "--pipeline 2 does not divide the 3 ranks" && r=0
ok $r "--pipeline 2 on 3 ranks fails"
# a schedule that cannot run the microbatches: a usage error like the others (it was a traceback, exit 1)
bounded 60 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $ARGS --pipeline 2 --schedule interleaved \
    --microbatches 3 >"$dir/bad4.out" 2>&1
rc=$?
r=1; [ $rc -eq 2 ] && has "$dir/bad4.out" "gpt.lua: train: schedule interleaved on 2 stages with 3 microbatches: schedule.interleaved: microbatches (3) must be a multiple of stages (2)" &&
    has "$dir/bad4.out" "usage: tegraph run examples/gpt.lua" && ! has "$dir/bad4.out" "stack traceback" && r=0
ok $r "--schedule interleaved with 3 microbatches on 2 stages is a usage error naming them, exit 2 (rc $rc)"
echo "1..$n"
finish
