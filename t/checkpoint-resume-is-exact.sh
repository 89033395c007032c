#!/bin/sh
# checkpoint-resume-is-exact.sh — examples/gpt.lua run for N steps, saved, and resumed gives the same losses bit for
# bit as the uninterrupted run: f32 and bf16, the built-in task and a --data token file, eager and --graph, one
# rank and (under mpirun) two: data parallel (ddp, and zero1 with its shards per rank) and --pipeline 2 (1f1b,
# a model file per stage); SIGTERM saves at the next step boundary and exits 0 saying where, and a resume from it
# continues exactly; a resume on another number of ranks, or on another pipeline layout, is refused.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
unset TG_DEVICE # the one-rank cases on the default device (a GPU where there is one); the ranks below on the CPU
GPT="$SRCDIR/examples/gpt.lua"
SMALL="--width 32 --layers 2 --heads 2 --batch 4 --microbatches 2 --quiet --samples 0 --eval 0 --steps 8 --warmup 2"

# losses FILE [FROM]: "step loss" lines of a --log file, the loss with all its digits, from step FROM on
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1" | awk -v f="${2:-1}" '$1 >= f'; }

PLAN=20
echo "1..$PLAN"
k=0
"$TEGRAPH" run "$GPT" --make-data "$tmp/task.bin" --tokens 4000 >/dev/null 2>&1
for mode in "f32" "bf16" "f32 --data $tmp/task.bin --vocab 12 --context 16" "bf16 --delay-wgrad --fuse-wgrad" "f32 --graph"; do
    set -- $mode
    dt=$1
    shift
    k=$((k + 1))
    name=$dt$k
    "$TEGRAPH" run "$GPT" $SMALL --dtype "$dt" "$@" --log "$tmp/$name.full" >/dev/null 2>"$tmp/err"
    "$TEGRAPH" run "$GPT" $SMALL --dtype "$dt" "$@" --out "$tmp/$name.ck" --save-every 3 >/dev/null 2>>"$tmp/err"
    "$TEGRAPH" run "$GPT" $SMALL --dtype "$dt" "$@" --resume "$tmp/$name.ck/step_00000003" --log "$tmp/$name.res" \
        >"$tmp/out" 2>>"$tmp/err"
    a=$(losses "$tmp/$name.full" 4)
    b=$(losses "$tmp/$name.res")
    ok $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) \
        "$mode: 3 steps, save, resume, 5 more give the losses of 8 uninterrupted steps bit for bit ($(echo $b | head -c 80); $(head -n 1 "$tmp/err"))"
done
"$TEGRAPH" run "$GPT" $SMALL --out "$tmp/keep" --save-every 3 --keep 2 >/dev/null 2>"$tmp/err"
ls "$tmp/keep" >"$tmp/ls"
ok $([ "$(tr '\n' ' ' <"$tmp/ls")" = "latest step_00000006 step_00000008 " ]; echo $?) \
    "--keep 2 leaves the newest two checkpoints and the pointer ($(tr '\n' ' ' <"$tmp/ls"))"
ok $([ "$(cat "$tmp/keep/latest")" = step_00000008 ]; echo $?) "latest names the last checkpoint"

# SIGTERM: the run saves at the next step boundary and exits 0 with a line saying where
"$TEGRAPH" run "$GPT" $SMALL --steps 400 --out "$tmp/sig" --log "$tmp/sig.log" >"$tmp/sig.out" 2>&1 &
pid=$!
i=0
while [ "$i" -lt 600 ] && ! grep -q '"step":3,' "$tmp/sig.log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -TERM "$pid"
wait "$pid"
rc=$?
ok $rc "SIGTERM during training: exit 0 (got $rc: $(tail -n 1 "$tmp/sig.out"))"
ok $(grep -q "^gpt: SIGTERM: saved a checkpoint of step [0-9]* to $tmp/sig/step_[0-9]*; resume with --resume" "$tmp/sig.out"; echo $?) \
    "... and a line names the signal, the step and the checkpoint"
stopped=$(sed -n 's/^gpt: SIGTERM: saved a checkpoint of step \([0-9]*\).*/\1/p' "$tmp/sig.out")
ok $([ -n "$stopped" ] && [ "$stopped" -lt 400 ] && [ "$(cat "$tmp/sig/latest")" = "$(printf 'step_%08d' "$stopped")" ]; echo $?) \
    "... at a step before the end ($stopped), which latest names"
"$TEGRAPH" run "$GPT" $SMALL --steps 400 --resume "$tmp/sig" --log "$tmp/sig.res" >/dev/null 2>"$tmp/err"
"$TEGRAPH" run "$GPT" $SMALL --steps 400 --log "$tmp/sig.full" >/dev/null 2>>"$tmp/err"
a=$(losses "$tmp/sig.full" $((stopped + 1)))
b=$(losses "$tmp/sig.res")
ok $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "the run resumed after SIGTERM gives the uninterrupted losses bit for bit"

"$TEGRAPH" run "$GPT" $SMALL --resume "$tmp/f321.ck/step_00000003" --width 64 >"$tmp/out" 2>&1
ok $(grep -q "^gpt.lua: --width 64 differs from the checkpoint's 32; resume with the same options" "$tmp/out"; echo $?) \
    "a checkpoint of another model size is refused naming the option and both values"

# two ranks (mpirun on CPU ranks)
if [ -z "${TG_MPIRUN:-}" ] || { [ "$(id -u)" = 0 ] && [ -z "${OMPI_ALLOW_RUN_AS_ROOT:-}" ]; }; then
    while [ "$n" -lt "$PLAN" ]; do n=$((n + 1)); echo "ok $n # SKIP no usable mpirun"; done
    exit $((fails != 0))
fi
# CPU ranks whatever the machine has: a host with one GPU cannot give two ranks a GPU each
TG_DEVICE=cpu
export TG_DEVICE
MPI="$TG_MPIRUN -np 2 --oversubscribe"
# save_resume_exact TAG WHAT FILES ARGS...: under $MPI, the run with ARGS uninterrupted, then saved every 3 steps
# into $tmp/TAG.ck (whose step 3 must hold FILES, unless FILES is -), then resumed from step 3: the resumed run's
# losses are the uninterrupted run's from step 4 on, bit for bit
save_resume_exact() {
    tag=$1 what=$2 files=$3
    shift 3
    bounded 300 $MPI "$TEGRAPH" run "$GPT" $SMALL "$@" --log "$tmp/$tag.full" >/dev/null 2>"$tmp/err"
    bounded 300 $MPI "$TEGRAPH" run "$GPT" $SMALL "$@" --out "$tmp/$tag.ck" --save-every 3 >/dev/null 2>>"$tmp/err"
    if [ "$files" != - ]; then
        missing=
        for f in $files; do [ -f "$tmp/$tag.ck/step_00000003/$f" ] || missing="$missing $f"; done
        ok $([ -z "$missing" ]; echo $?) "$what: step 3 holds $files${missing:+ (missing:$missing)}"
    fi
    bounded 300 $MPI "$TEGRAPH" run "$GPT" $SMALL "$@" --resume "$tmp/$tag.ck/step_00000003" --log "$tmp/$tag.res" \
        >/dev/null 2>>"$tmp/err"
    a=$(losses "$tmp/$tag.full" 4)
    b=$(losses "$tmp/$tag.res")
    e=$(head -n 1 "$tmp/err")
    ok $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) \
        "$what: save at 3, resume, 5 more give the uninterrupted losses bit for bit${e:+ ($e)}"
}
save_resume_exact r2 "two ranks (each rank saves its optimizer state)" "rank0.safetensors rank1.safetensors"
"$TEGRAPH" run "$GPT" $SMALL --resume "$tmp/r2.ck/step_00000003" >"$tmp/out" 2>&1
rc=$?
ok $([ $rc -ne 0 ] && grep -q "written by 2 ranks; resume it on 2 ranks (this run has 1)" "$tmp/out"; echo $?) \
    "a 2-rank checkpoint resumed on 1 rank is refused, saying why ($(grep -m1 ranks "$tmp/out"))"

# zero1: each rank saves and restores its own shards of the f32 parameters, m and v
save_resume_exact z "two ranks --zero1" - --zero1

# --pipeline 2 (1f1b): each stage's weights in its own model file, each rank's optimizer state
save_resume_exact p "--pipeline 2 (a model file per stage, an optimizer file per rank)" \
    "model.stage1.safetensors model.stage2.safetensors rank1.safetensors" --pipeline 2 --schedule 1f1b
bounded 300 $MPI "$TEGRAPH" run "$GPT" $SMALL --resume "$tmp/p.ck/step_00000003" >"$tmp/out" 2>&1
rc=$?
ok $([ $rc -ne 0 ] && grep -q "gpt.lua: --pipeline 1 differs from the checkpoint's 2; resume with the same options" \
    "$tmp/out"; echo $?) "a --pipeline 2 checkpoint resumed without a pipeline is refused, naming the option and both values"

# --pipeline 2 --zero1: zero1's shards, and the split token table's own AdamW on both stages
save_resume_exact pz "--pipeline 2 --zero1" - --pipeline 2 --schedule 1f1b --zero1
finish
