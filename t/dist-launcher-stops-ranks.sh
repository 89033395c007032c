#!/bin/sh
# dist-launcher-stops-ranks.sh — `tegraph run -n N` forking ranks (TG_LAUNCHER=fork, the GPU path, here without a transport): each rank gets
# TG_RANK/TG_WORLD_SIZE/TG_LOCAL_RANK and a "[rank R] " stderr; one failing or killed rank stops the others within seconds, naming it.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
TG_LAUNCHER=fork
TG_DEVICE=cpu
export TG_LAUNCHER TG_DEVICE

cat >"$tmp/ranks.lua" <<'LUA'
local r = tonumber(os.getenv("TG_RANK"))
io.stderr:write(string.format("env %s/%s local %s\n", os.getenv("TG_RANK"), os.getenv("TG_WORLD_SIZE"),
  os.getenv("TG_LOCAL_RANK")))
print("out " .. r)
if arg[1] == "error" and r == 1 then error("rank one gives up") end
if arg[1] == "kill" and r == 2 then os.execute("kill -9 $PPID") end
if arg[1] then -- the others keep working until stopped
  local t0 = os.time()
  while os.time() < t0 + 60 do end
end
LUA

run() { # run NAME ARGS...: rc, secs; output in $tmp/NAME.out
    name=$1
    shift
    t0=$(date +%s)
    bounded 90 "$TEGRAPH" run "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..12"
run ok -n 3 "$tmp/ranks.lua"
ok $rc "three healthy ranks: exit 0"
has "$tmp/ok.out" "[rank 0] env 0/3 local 0" && has "$tmp/ok.out" "[rank 1] env 1/3 local 1" &&
    has "$tmp/ok.out" "[rank 2] env 2/3 local 2"
ok $? "each rank gets TG_RANK, TG_WORLD_SIZE, TG_LOCAL_RANK, and its stderr is prefixed"
has "$tmp/ok.out" "out 0" && has "$tmp/ok.out" "out 2"
ok $? "every rank ran the script"

run error -n 3 "$tmp/ranks.lua" error
ok $((rc != 1)) "a failing rank: the launcher exits with its status (1; got $rc)"
ok $((secs > 15)) "a failing rank: the other ranks are stopped within seconds (took $secs s)"
has "$tmp/error.out" "tegraph: rank 1 (pid " && has "$tmp/error.out" "exited with status 1; stopping the other 2 rank(s)"
ok $? "a failing rank: the launcher names it"
grep -q '^\[rank 1\] .*ranks\.lua:[0-9]*: rank one gives up' "$tmp/error.out"
ok $? "a failing rank: its error comes out prefixed"

run kill -n 3 "$tmp/ranks.lua" kill
ok $((rc == 0)) "a killed rank: the launcher exits non-zero (rc $rc)"
ok $((secs > 15)) "a killed rank: the other ranks are stopped within seconds (took $secs s)"
has "$tmp/kill.out" "tegraph: rank 2 (pid " && has "$tmp/kill.out" "was killed by signal 9"
ok $? "a killed rank: the launcher names it and the signal"

run single -n 1 "$tmp/ranks.lua"
ok $rc "-n 1 runs the script once"
"$TEGRAPH" run -n 0 "$tmp/ranks.lua" >/dev/null 2>&1
r0=$?
"$TEGRAPH" run -n 2 >/dev/null 2>&1
ok $((r0 != 2 || $? != 2)) "-n 0 and a missing script are usage errors (exit 2)"

for f in error kill; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -12
done
finish
