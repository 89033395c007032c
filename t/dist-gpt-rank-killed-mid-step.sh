#!/bin/sh
# dist-gpt-rank-killed-mid-step.sh — examples/gpt.lua data parallel (ddp, zero1) on 2 and 4 CPU ranks, through
# `mpirun -np N` and `tegraph run -n N`: a rank killed (SIGKILL) in the middle of training makes the job exit
# non-zero within 60 s with an error naming the lost rank, and the last checkpoint stays intact: `latest` names
# it, its files are complete (one optimizer file per rank) and a run resumes from it.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
GPT="$SRCDIR/examples/gpt.lua"
SMALL="--width 16 --layers 1 --heads 2 --batch 4 --microbatches 2 --quiet --samples 0 --eval 0 --warmup 2"
LIMIT=60

# kill_run NAME LAUNCHER N MODE: trains until step 7 is logged, SIGKILLs rank 1; rc, secs (from the kill on)
kill_run() {
    name=$1 launcher=$2 np=$3 mode=$4
    d="$tmp/$name"
    mkdir -p "$d"
    if [ "$launcher" = mpirun ]; then
        bounded 300 "$TG_MPIRUN" -np "$np" --oversubscribe "$TEGRAPH" run "$GPT" $SMALL $mode --steps 100000 \
            --out "$d/ck" --save-every 3 --log "$d/log" >"$d/out" 2>&1 &
    else
        bounded 300 "$TEGRAPH" run -n "$np" "$GPT" $SMALL $mode --steps 100000 \
            --out "$d/ck" --save-every 3 --log "$d/log" >"$d/out" 2>&1 &
    fi
    pid=$!
    i=0
    while [ "$i" -lt 1200 ] && ! grep -q '"step":7,' "$d/log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    victim=
    # the rank itself, a child of mpirun (each rank has a child of its own that prefixes its stderr)
    for p in $(pgrep -f "run $GPT"); do
        [ "$(ps -o comm= -p "$(ps -o ppid= -p "$p" | tr -d ' ')" 2>/dev/null)" = mpirun ] || continue
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
        echo "$env" | grep -q "^TG_FAULT_TMP=$d\$" || continue
        [ "$(echo "$env" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = 1 ] && victim=$p
    done
    t0=$(date +%s)
    [ -n "$victim" ] && kill -KILL "$victim"
    wait "$pid"
    rc=$?
    secs=$(($(date +%s) - t0))
}

# intact NAME N: the checkpoint `latest` names exists with its model, config and every rank's optimizer file
intact() {
    d="$tmp/$1/ck"
    s=$(cat "$d/latest" 2>/dev/null) || return 1
    [ -f "$d/$s/config.json" ] && [ -s "$d/$s/model.safetensors" ] || return 1
    r=0
    while [ "$r" -lt "$2" ]; do [ -s "$d/$s/rank$r.safetensors" ] || return 1; r=$((r + 1)); done
}

echo "1..20"
for c in "mpirun 2 ddp" "run 2 zero1" "mpirun 4 zero1" "run 4 ddp"; do
    set -- $c
    mode=
    [ "$3" = zero1 ] && mode=--zero1
    name="$1-$2-$3"
    TG_FAULT_TMP="$tmp/$name"
    export TG_FAULT_TMP
    kill_run "$name" "$1" "$2" "$mode"
    ok $([ -n "$victim" ] && [ "$rc" -ne 0 ]; echo $?) "$c: rank 1 killed mid-run: the job exits non-zero (rc $rc)"
    ok $((secs > LIMIT)) "$c: ... within $LIMIT s of the kill ($secs s)"
    grep -q "process rank 1 .*exited on signal 9" "$tmp/$name/out"
    ok $? "$c: ... with an error naming rank 1 ($(grep -m1 'exited on signal' "$tmp/$name/out"))"
    intact "$name" "$2"
    ok $? "$c: the last checkpoint is complete and latest names it ($(cat "$tmp/$name/ck/latest" 2>/dev/null))"
    s=$(sed 's/step_0*//' "$tmp/$name/ck/latest" 2>/dev/null)
    # with the same options (a resume refuses another --steps: the schedule runs to it), stopped 2 steps on
    "$TG_MPIRUN" -np "$2" --oversubscribe "$TEGRAPH" run "$GPT" $SMALL $mode --steps 100000 \
        --resume "$tmp/$name/ck" --log "$tmp/$name/res" >"$tmp/$name/res.out" 2>&1 &
    pid=$!
    i=0
    while [ "$i" -lt 1200 ] && ! grep -q "\"step\":$((s + 2))," "$tmp/$name/res" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    kill -TERM "$pid"
    wait "$pid"
    first=$(sed -n '1s/^{"step":\([0-9]*\),.*/\1/p' "$tmp/$name/res" 2>/dev/null)
    ok $([ "$first" = $((s + 1)) ] && grep -q "\"step\":$((s + 2))," "$tmp/$name/res" &&
        grep -q "^resumed from $tmp/$name/ck/step_0*$s (step $s)" "$tmp/$name/res.out"; echo $?) \
        "$c: a run resumes from it (step $s on: steps $first.. logged)"
    echo "# $c: detected in $secs s"
done
for c in mpirun-2-ddp run-2-zero1 mpirun-4-zero1 run-4-ddp; do
    echo "# --- $c:"
    grep -v '^\[rank [0-9]*\] *$' "$tmp/$c/out" | sed 's/^/#   /' | tail -8
done
finish
