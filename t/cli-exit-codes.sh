#!/bin/sh
# cli-exit-codes.sh — the tegraph command exits 0/1/2 for success/script error/usage error and prints FILE:LINE: first.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"

echo "1..39"

run --version
ok $((rc != 0)) "--version exits 0"
case "$out" in "tegraph "[0-9]*.[0-9]*) r=0 ;; *) r=1 ;; esac
ok $r "--version prints 'tegraph X.Y.Z' (got '$out')"

run --help
ok $((rc != 0)) "--help exits 0"
case "$out" in *usage:*run*FILE.lua*) r=0 ;; *) r=1 ;; esac
ok $r "--help prints the usage"

run info
ok $((rc != 0)) "info exits 0"
case "$out" in *"build options:"*cpu*"default device:"*) r=0 ;; *) r=1 ;; esac
ok $r "info lists build options, devices and the default device"

cat >"$tmp/good.lua" <<'LUA'
local t = tg.ones({2, 2}, {device = "cpu"})
print("sum", t:sum(), "args", select("#", ...), arg[0] ~= nil, arg[1], arg[2])
LUA
run run "$tmp/good.lua" a b
ok $((rc != 0)) "run of a good script exits 0"
case "$out" in "sum	4.0	args	2	true	a	b") r=0 ;; *) r=1 ;; esac
ok $r "the script sees its arguments in arg and ... (got '$out')"

run "$tmp/good.lua" x y
case "$out" in *"args	2	true	x	y") r=0 ;; *) r=1 ;; esac
ok $((rc != 0 || r)) "tegraph FILE.lua is a shortcut for run"

cat >"$tmp/bad.lua" <<'LUA'
local a = tg.zeros({2, 3}, {device = "cpu"})
local b = tg.zeros({3, 2}, {device = "cpu"})
local c = a:add(b)
LUA
run run "$tmp/bad.lua"
ok $((rc != 1)) "a script error exits 1 (got $rc)"
first=$(head -n 1 "$tmp/err")
case "$first" in "$tmp/bad.lua:3: add: shapes differ"*"[2,3]"*"[3,2]"*) r=0 ;; *) r=1 ;; esac
ok $r "the first line of the error is FILE:LINE: message (got '$first')"
case "$err" in *"stack traceback:"*) r=0 ;; *) r=1 ;; esac
ok $r "a traceback follows"

printf 'local x = = 1\n' >"$tmp/syntax.lua"
run run "$tmp/syntax.lua"
first=$(head -n 1 "$tmp/err")
case "$first" in "$tmp/syntax.lua:1: "*) r=0 ;; *) r=1 ;; esac
ok $((rc != 1 || r)) "a syntax error exits 1 with FILE:LINE: (got $rc, '$first')"

run run "$tmp/missing.lua"
ok $((rc != 1)) "a missing script exits 1 (got $rc)"

run -e 'print(tg.zeros({3}, {device = "cpu"}):numel())'
ok $((rc != 0)) "-e runs code"
ok $([ "$out" = "3" ]; echo $?) "-e output (got '$out')"

run -e 'error("nope")'
case "$err" in "(command line):1: nope"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 1 || r)) "-e error exits 1 with (command line):1: (got $rc)"

run frobnicate
ok $((rc != 2)) "an unknown command exits 2 (got $rc)"
case "$err" in *"unknown command 'frobnicate'"*usage:*) r=0 ;; *) r=1 ;; esac
ok $r "and says so, with the usage"

run run
ok $((rc != 2)) "run without a file exits 2 (got $rc)"

run --device tpu info
ok $((rc != 2)) "a bad --device exits 2 (got $rc)"
(TG_DEVICE=tpu; export TG_DEVICE; "$TEGRAPH" -e 'print(1)' >"$tmp/out" 2>"$tmp/err")
rc=$?
err=$(cat "$tmp/err")
ok $((rc != 2)) "a bad TG_DEVICE exits 2 too, not a run on another device (got $rc)"
case "$err" in *"bad TG_DEVICE: bad device 'tpu'"*) r=0 ;; *) r=1 ;; esac
ok $r "and names it (got '$(echo "$err" | head -n 1)')"

run --device cpu -e 'io.write(tg.default_device())'
ok $((rc != 0)) "--device cpu before the command (got $rc, '$out' '$err')"
ok $([ "$out" = "cpu" ]; echo $?) "--device cpu makes cpu the default device (got '$out')"
run run --device cpu -e 'io.write(tg.default_device())'
ok $((rc != 0)) "run --device cpu (the option after run, as the README writes it) runs (got $rc, '$err')"
ok $([ "$out" = "cpu" ]; echo $?) "... with cpu the default device (got '$out')"
run run --device=cpu "$tmp/good.lua" a
ok $([ "$rc" = 0 ] && [ "$out" = "sum	4.0	args	1	true	a	nil" ]; echo $?) "run --device=cpu FILE ARGS: the script gets ARGS only (got $rc, '$out')"
run run --device tpu -e 'print(1)'
ok $((rc != 2)) "run with a bad --device exits 2 (got $rc)"

# A script's usage error (tegraph.cli's exit 2) is the command's exit status.
GPT="${TG_TOP_SRCDIR:-.}/examples/gpt.lua"
run --device cpu run "$GPT" --steps x
ok $((rc != 2)) "an example's bad flag value exits 2 (got $rc)"
first=$(head -n 1 "$tmp/err")
case "$first" in "gpt.lua: --steps needs a number (got 'x')") r=0 ;; *) r=1 ;; esac
ok $r "and names the flag (got '$first')"
case "$err" in *"usage: tegraph run examples/gpt.lua"*"--steps"*) r=0 ;; *) r=1 ;; esac
ok $r "and prints the usage on stderr"
run --device cpu run "$GPT" --steps 3 --help
case "$out" in "usage: tegraph run examples/gpt.lua"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 0 || r)) "an example's --help prints the usage and exits 0 (got $rc)"

# Precompiled chunks are refused (Lua does not verify bytecode: a damaged one crashed the process), naming the file.
TG_LUAC="$tmp/chunk.luac" "$TEGRAPH" -e 'local f = assert(io.open(os.getenv("TG_LUAC"), "wb")); f:write(string.dump(function() print("ran") end)); f:close()'
run run "$tmp/chunk.luac"
ok $((rc != 1)) "run of a precompiled chunk exits 1 (got $rc)"
case "$err1" in "$tmp/chunk.luac is a precompiled (binary) Lua chunk: tegraph loads Lua source only"*) r=0 ;; *) r=1 ;; esac
ok $((r)) "and says the file is a precompiled chunk, which tegraph does not load (got '$err1')"
ok $([ -z "$out" ]; echo $?) "nothing of it ran (got '$out')"
# the same chunk with bytes past its header damaged: refused alike, never run (it segfaulted)
head -c 40 "$tmp/chunk.luac" >"$tmp/bad.luac"
printf '\377\377\377\377\377\377\377\377' >>"$tmp/bad.luac"
tail -c +49 "$tmp/chunk.luac" >>"$tmp/bad.luac"
run run "$tmp/bad.luac"
ok $((rc != 1)) "run of a damaged precompiled chunk exits 1, no crash (got $rc)"
case "$err1" in "$tmp/bad.luac is a precompiled (binary) Lua chunk"*) r=0 ;; *) r=1 ;; esac
ok $((r)) "and names it (got '$err1')"
run -e "$(printf '\033Lua')"
case "$err1" in "(command line) is a precompiled (binary) Lua chunk"*) r=0 ;; *) r=1 ;; esac
ok $((rc != 1 || r)) "-e code that starts as a precompiled chunk is refused (got $rc, '$err1')"

[ "$n" -eq 39 ] || echo "# ran $n checks, planned 39"
exit 0
