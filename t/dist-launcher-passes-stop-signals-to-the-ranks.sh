#!/bin/sh
# dist-launcher-passes-stop-signals-to-the-ranks.sh — SIGTERM or SIGINT to `tegraph run -n N` reaches every rank as
# that signal: examples/gpt.lua --out saves at the next step boundary, names the signal, and the launcher exits 0
# when every rank did (CPU ranks under mpirun: mpirun itself, given the signal, would abort the job with exit 1
# and SIGTERM every rank; -n 1 forks its rank and passes the signal on without counting it a failure).
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
export TG_MPIRUN
GPT="$SRCDIR/examples/gpt.lua"
SMALL="--width 32 --layers 2 --heads 2 --batch 4 --microbatches 2 --quiet --samples 0 --eval 0 --steps 1000000 --warmup 2" # stopped by the signal long before

# stop NAME SIG N: `tegraph run -n N` gpt.lua, SIG to the launcher once step 3 is logged; rc and output in $tmp/NAME.out
stop() {
    name=$1 sig=$2 np=$3
    "$TEGRAPH" run -n "$np" "$GPT" $SMALL --out "$tmp/$name" --log "$tmp/$name.log" >"$tmp/$name.out" 2>&1 &
    pid=$!
    i=0
    while [ "$i" -lt 1200 ] && ! grep -q '"step":3,' "$tmp/$name.log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    kill -"$sig" "$pid"
    ( sleep 120; kill -KILL "$pid" 2>/dev/null ) &
    watchdog=$!
    wait "$pid"
    rc=$?
    kill "$watchdog" 2>/dev/null
}

echo "1..8"
for sig in TERM INT; do
    stop "mpi$sig" "$sig" 2
    ok $rc "-n 2 (mpirun), SIG$sig: the launcher exits 0 once every rank saved (rc $rc: $(grep -v '^\[rank\|^ ' "$tmp/mpi$sig.out" | tail -n 1))"
    stopped=$(sed -n "s/^gpt: SIG$sig: saved a checkpoint of step \([0-9]*\) to .*/\1/p" "$tmp/mpi$sig.out")
    ok $([ -n "$stopped" ]; echo $?) "... and the line names SIG$sig (not another signal) and the step ($(grep -m1 '^gpt: SIG' "$tmp/mpi$sig.out"))"
    d="$tmp/mpi$sig/$(printf 'step_%08d' "${stopped:-0}")"
    ok $([ "$(cat "$tmp/mpi$sig/latest" 2>/dev/null)" = "$(basename "$d")" ] && [ -f "$d/rank0.safetensors" ] &&
        [ -f "$d/rank1.safetensors" ]; echo $?) "... at a step boundary: latest names it, both ranks' files are there"
done
stop one INT 1
ok $rc "-n 1 (a forked rank), SIGINT: the launcher exits 0 once the rank saved (rc $rc)"
ok $(grep -q "^gpt: SIGINT: saved a checkpoint of step" "$tmp/one.out"; echo $?) "... and the line names SIGINT"
finish
