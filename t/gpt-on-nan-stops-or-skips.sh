#!/bin/sh
# gpt-on-nan-stops-or-skips.sh — a non-finite loss in examples/gpt.lua: --on-nan stop (the default) fails naming the
# step and the last good checkpoint and saves nothing over it; --on-nan skip leaves the step's update out and goes on.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
GPT="${TG_TOP_SRCDIR:-.}/examples/gpt.lua"
BAD="--width 16 --layers 1 --heads 2 --batch 4 --steps 6 --quiet --samples 0 --eval 0 --lr 1e30 --warmup 0 --clip 0"
echo "1..5"
run run "$GPT" $BAD --out "$tmp/ck" --save-every 1
ok $([ $rc -ne 0 ]; echo $?) "stop: the run fails (status $rc)"
ok $(has "$tmp/err" "gpt.lua: step 2: non-finite loss (loss"; echo $?) "stop: the error names the step and what was not finite ($err1)"
ok $(has "$tmp/err" "stopped (--on-nan stop); the last good checkpoint is $tmp/ck/step_00000001"; echo $?) \
    "stop: ... and the last good checkpoint"
ok $([ "$(ls "$tmp/ck" | tr '\n' ' ')" = "latest step_00000001 " ] && [ "$(cat "$tmp/ck/latest")" = step_00000001 ]; echo $?) \
    "stop: nothing was saved over the last good checkpoint ($(ls "$tmp/ck" | tr '\n' ' '))"
run run "$GPT" $BAD --on-nan skip
ok $([ $rc -eq 0 ] && [ "$(grep -c 'update skipped (--on-nan skip)' "$tmp/out")" -eq 5 ]; echo $?) \
    "skip: steps 2..6 are skipped, each said, and the run ends normally (status $rc)"
finish
