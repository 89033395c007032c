#!/bin/sh
# cli-progress-on-ranks-without-a-terminal-is-plain-lines.sh — under `tegraph run -n 2` with stdout sent to a
# file, the progress display writes plain lines (no "\r"), although mpirun hands the ranks a pseudo-terminal;
# tg.isatty follows TG_STDOUT_TTY there, which the launcher sets from its own stdout.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi

cat >"$tmp/progress.lua" <<'LUA'
local progress = require "tegraph.progress"
io.stdout:write("isatty ", tostring(tg.isatty(io.stdout)), "\n")
local bar = progress.new { total = 3, tokens_per_step = 10 }
for step = 1, 3 do bar:update(step, { loss = 1 / step }) end
bar:finish()
LUA
cat >"$tmp/isatty.lua" <<'LUA'
print("isatty " .. tostring(tg.isatty(io.stdout)))
LUA

echo "1..5"
bounded 120 "$TEGRAPH" run -n 2 "$tmp/progress.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
ok $rc "run -n 2 of a progress display exits 0 (got $rc: $(head -n 1 "$tmp/err"))"
cr=$(tr -cd '\r' <"$tmp/out" | wc -c)
ok $((cr != 0)) "no carriage return in the file ($cr found)"
ok $(($(grep -c '^step 3/3 | loss 0.3333 |' "$tmp/out") != 2)) "each rank wrote its last step as a plain line"
ok $(($(grep -c '^isatty false$' "$tmp/out") != 2)) "tg.isatty(io.stdout) is false on both ranks"

# mpirun directly: a rank's stdout counts as a terminal only when TG_STDOUT_TTY says the launcher's is one
# (and the rank's own stdout is one: Open MPI gives it a pseudo-terminal, other MPIs a pipe)
raw=$(bounded 60 "$TG_MPIRUN" -np 1 --oversubscribe sh -c 'if [ -t 1 ]; then echo tty; else echo pipe; fi' 2>/dev/null)
got=$(TG_STDOUT_TTY=1 bounded 120 "$TG_MPIRUN" -x TG_STDOUT_TTY -np 2 --oversubscribe "$TEGRAPH" run "$tmp/isatty.lua" 2>"$tmp/err" | sort -u)
if [ "$raw" = tty ]; then want="isatty true"; else want="isatty false"; fi
ok $([ "$got" = "$want" ]; echo $?) "with TG_STDOUT_TTY=1 a rank whose stdout is a $raw reports '$want' (got '$got')"
finish
