#!/bin/sh
# cli-run-help-and-e-on-ranks.sh — `tegraph run --help` prints run's usage and exits 0; `run -e CODE` runs a
# chunk, on N ranks too (`run -n N -e CODE`); bad options under run and run -n are usage errors (2) naming them.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
# run -n 2 starts CPU ranks whatever the machine has (a host with one GPU cannot give two ranks one each)
TG_DEVICE=cpu
export TG_DEVICE

echo "1..16"

for h in --help -h; do
    run run "$h"
    ok $((rc != 0)) "run $h exits 0 (got $rc)"
    case "$out" in "usage: tegraph run [-n N] FILE.lua"*"-e CODE"*"-n N"*) r=0 ;; *) r=1 ;; esac
    ok $((r || ${#err})) "run $h prints run's usage (-e, -n) on stdout and nothing on stderr (got '$err1')"
done

run run --bogus
case "$err" in "tegraph run: unknown option '--bogus'"*"usage: tegraph run"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run --bogus is a usage error naming the option (got $rc: '$err1')"

run run -e 'print(6 * 7, select("#", ...))'
ok $((rc != 0)) "run -e CODE exits 0 (got $rc: '$err1')"
ok $([ "$out" = "42	0" ]; echo $?) "run -e runs the chunk like tegraph -e (got '$out')"

run run -e
case "$err" in *"-e needs a chunk of Lua code"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run -e without code is a usage error (got $rc: '$err1')"
run run -e 'print(1)' extra
case "$err" in *"-e takes one argument (unexpected 'extra')"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run -e with more arguments is a usage error, as tegraph -e (got $rc: '$err1')"

run run -e 'error("from the chunk")'
case "$err" in "(command line):1: from the chunk"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 1 || r)) "an error in a run -e chunk exits 1 and names the chunk's line (got $rc: '$err1')"

# N ranks of a chunk: forked here (no communicator needed to read the rank from the environment)
TG_LAUNCHER=fork run run -n 2 -e 'print("rank " .. os.getenv("TG_RANK") .. " of " .. os.getenv("TG_WORLD_SIZE"))'
ok $((rc != 0)) "run -n 2 -e CODE exits 0 (got $rc: '$err1')"
sorted=$(printf '%s\n' "$out" | sort | tr '\n' ';')
ok $([ "$sorted" = "rank 0 of 2;rank 1 of 2;" ]; echo $?) "each rank runs the chunk (got '$sorted')"
TG_LAUNCHER=fork run run -n 2 -e 'error("rank " .. os.getenv("TG_RANK") .. " fails")'
case "$err" in *"[rank "[01]"] (command line):1: rank "[01]" fails"*) r=0 ;; *) r=1 ;; esac
ok $((rc == 0 || r)) "a failing chunk on a rank fails the job, its error prefixed with the rank (got $rc)"

run run -n 2 -e
case "$err" in "tegraph run -n: -e needs a chunk of Lua code"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run -n 2 -e without code is a usage error before any rank starts (got $rc: '$err1')"
run run -n 2 -e 'print(1)' extra
case "$err" in *"-e takes one argument (unexpected 'extra')"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run -n 2 -e with more arguments is a usage error (got $rc: '$err1')"
run run -n 2 --bogus x.lua
case "$err" in *"unknown option '--bogus'"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 2 || r)) "run -n 2 --bogus is a usage error naming the option (got $rc: '$err1')"

[ "$n" -eq 16 ] || echo "# ran $n checks, planned 16"
[ "$fails" -eq 0 ]
