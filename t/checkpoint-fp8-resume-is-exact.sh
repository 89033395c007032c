#!/bin/sh
# checkpoint-fp8-resume-is-exact.sh — an FP8 run of examples/gpt.lua (delayed scaling, eager and --graph; current
# scaling) saved and resumed gives the losses of the uninterrupted run bit for bit: the checkpoint's rank file holds
# every FP8 Linear's amax history, scale and scale_inv, and the resume restores them. A checkpoint without FP8
# state (a bf16 run) resumes with --fp8 from fresh scaling state, and an FP8 checkpoint resumes without --fp8. Two
# CPU ranks (data parallel, two pipeline stages) resume exactly too.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
unset TG_DEVICE # the one-rank cases on the default device (a GPU where there is one); the ranks below on the CPU
GPT="$SRCDIR/examples/gpt.lua"
# a token file with a context of 16: 32 tokens a microbatch, as FP8 GEMMs on a GPU need (multiples of 16)
"$TEGRAPH" run "$GPT" --make-data "$tmp/task.bin" --tokens 4000 >/dev/null 2>&1
SMALL="--data $tmp/task.bin --vocab 12 --context 16 --width 32 --layers 2 --heads 2 --batch 4 --microbatches 2 --quiet"
SMALL="$SMALL --samples 0 --eval 0 --steps 8 --warmup 2 --dtype bf16"

# losses FILE [FROM]: "step loss" lines of a --log file, the loss with all its digits, from step FROM on
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1" | awk -v f="${2:-1}" '$1 >= f'; }

echo "1..9"
k=0
for mode in "--fp8 delayed" "--fp8 delayed --graph" "--fp8 current"; do
    k=$((k + 1))
    "$TEGRAPH" run "$GPT" $SMALL $mode --log "$tmp/$k.full" >/dev/null 2>"$tmp/err"
    "$TEGRAPH" run "$GPT" $SMALL $mode --out "$tmp/$k.ck" --save-every 3 >/dev/null 2>>"$tmp/err"
    "$TEGRAPH" run "$GPT" $SMALL $mode --resume "$tmp/$k.ck/step_00000003" --log "$tmp/$k.res" >/dev/null 2>>"$tmp/err"
    a=$(losses "$tmp/$k.full" 4)
    b=$(losses "$tmp/$k.res")
    ok $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) \
        "$mode: 3 steps, save, resume, 5 more give the losses of 8 uninterrupted steps bit for bit ($(echo $b | head -c 60); $(head -n 1 "$tmp/err"))"
done
# the rank file's header names the FP8 states of every FP8 Linear (2 layers x qkv, proj, fc1, fc2), three tensors each
hdr=$(head -c 65536 "$tmp/1.ck/step_00000003/rank0.safetensors" | tr -c '[:print:]' ' ')
nst=$(printf '%s' "$hdr" | grep -o '"fp8\.[^"]*\.amax_history"' | wc -l)
nsc=$(printf '%s' "$hdr" | grep -o '"fp8\.[^"]*\.scale_inv"' | wc -l)
ok $([ "$nst" -eq 8 ] && [ "$nsc" -eq 8 ]; echo $?) \
    "the rank file holds 8 FP8 states (amax_history $nst, scale_inv $nsc)"

"$TEGRAPH" run "$GPT" $SMALL --out "$tmp/b.ck" --save-every 3 >/dev/null 2>"$tmp/err"
run run "$GPT" $SMALL --fp8 delayed --resume "$tmp/b.ck/step_00000003" --log "$tmp/b.res"
ok $([ "$rc" -eq 0 ] && [ "$(losses "$tmp/b.res" | wc -l)" -eq 5 ]; echo $?) \
    "a bf16 checkpoint resumes with --fp8 delayed from fresh scaling state (rc $rc; $err1)"
run run "$GPT" $SMALL --resume "$tmp/1.ck/step_00000003" --log "$tmp/n.res"
ok $([ "$rc" -eq 0 ] && [ "$(losses "$tmp/n.res" | wc -l)" -eq 5 ]; echo $?) \
    "an FP8 checkpoint resumes without --fp8 (its FP8 state unused; rc $rc; $err1)"
"$TEGRAPH" run "$GPT" $SMALL --fp8 delayed --resume "$tmp/3.ck/step_00000003" >"$tmp/out" 2>&1
rc=$?
ok $([ "$rc" -ne 0 ] && grep -q "fp8\." "$tmp/out"; echo $?) \
    "a current-scaling checkpoint's states resumed under delayed scaling: restored or refused by name, never silently mixed (rc $rc: $(grep -m1 -i "fp8\|error" "$tmp/out" | head -c 160))"
# two CPU ranks (mpirun): data parallel (the amaxes reduced over the ranks) and two pipeline stages
if [ -z "${TG_MPIRUN:-}" ] || { [ "$(id -u)" = 0 ] && [ -z "${OMPI_ALLOW_RUN_AS_ROOT:-}" ]; } ||
    ! "$TEGRAPH" info 2>/dev/null | grep -q "mpi=yes"; then
    for i in 1 2; do echo "ok $((n + i)) # SKIP no usable mpirun"; done
    exit $((fails != 0))
fi
for mode in "" "--pipeline 2"; do
    k=$((k + 1))
    for a in "--log $tmp/$k.full" "--out $tmp/$k.ck --save-every 3" "--resume $tmp/$k.ck/step_00000003 --log $tmp/$k.res"; do
        TG_DEVICE=cpu bounded 300 $TG_MPIRUN -np 2 --oversubscribe "$TEGRAPH" run "$GPT" $SMALL --fp8 delayed $mode $a \
            >/dev/null 2>>"$tmp/err.$k"
    done
    a=$(losses "$tmp/$k.full" 4)
    b=$(losses "$tmp/$k.res")
    ok $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) \
        "two ranks ${mode:-(data parallel)}, --fp8 delayed: save at 3, resume, 5 more give the uninterrupted losses bit for bit ($(head -n 1 "$tmp/err.$k" 2>/dev/null))"
done
exit $((fails != 0))
