#!/bin/sh
# dist-failing-rank-stops-the-job.sh — a killed, failing or stuck rank ends the whole job quickly, non-zero, naming the rank (under mpirun
# and under `tegraph run -n 2`); every rank's stderr is prefixed with "[rank R] ".
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
LIMIT=30 # seconds any of these jobs may take (the comm timeout below is 3 s)

cat >"$tmp/job.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.init { timeout = 3 }
local r = comm.rank()
io.stderr:write("hello from rank ", r, " (backend ", comm.world():backend(), ")\n")
local t = tg.ones({ 4 })
comm.all_reduce(t) -- every rank gets here
local what = arg[1]
if r == 1 then
  if what == "kill" then os.execute("kill -9 $PPID") end -- the shell's parent: this rank
  if what == "error" then error("boom on purpose") end
  if what == "stuck" then -- alive, but never reaches the next collective
    local t0 = os.time()
    while os.time() < t0 + 60 do end
  end
end
comm.all_reduce(t) -- rank 0 waits here for rank 1
print("rank " .. r .. " survived")
LUA

# stopped FILE: rank 0 did not go on past the collective rank 1 never joined. Over MPI
# collectives block the host, so rank 0 never prints "survived". Over NCCL they are
# stream-ordered (the host goes on, like PyTorch's): the job must still fail at the
# rank's end, when its pending collective is drained (checked by the exit status).
stopped() {
    if has "$1" "nccl)"; then return 0; fi
    ! has "$1" "rank 0 survived"
}

# run CASE COMMAND...: sets rc, secs; output in $tmp/CASE.out (stdout and stderr)
run() {
    case_name=$1
    shift
    t0=$(date +%s)
    bounded 90 "$@" >"$tmp/$case_name.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

echo "1..20"

run ok "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/job.lua" none
ok $rc "a healthy job exits 0"
has "$tmp/ok.out" "[rank 0] hello from rank 0 (" && has "$tmp/ok.out" "[rank 1] hello from rank 1 ("
ok $? "every rank's stderr lines are prefixed with [rank R]"
has "$tmp/ok.out" "rank 1 survived"
ok $? "stdout is not prefixed"

run kill "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/job.lua" kill
ok $((rc == 0)) "a killed rank: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "a killed rank: the survivor stops within $LIMIT s (took $secs s)"
has "$tmp/kill.out" "rank 1" && stopped "$tmp/kill.out"
ok $? "a killed rank: the message names rank 1, and rank 0 did not go on"

run error "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/job.lua" error
ok $((rc == 0)) "a failing rank: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "a failing rank: the survivor stops within $LIMIT s (took $secs s)"
grep -q '^\[rank 1\] .*job\.lua:[0-9]*: boom on purpose' "$tmp/error.out"
ok $? "a failing rank: its error comes out prefixed with its rank"
has "$tmp/error.out" "rank 1" && stopped "$tmp/error.out"
ok $? "a failing rank: the job stops naming rank 1 (MPI_Abort), rank 0 did not go on"

run stuck "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/job.lua" stuck
ok $((rc == 0)) "a stuck rank: the job exits non-zero (rc $rc)"
ok $((secs > LIMIT)) "a stuck rank: the job ends within $LIMIT s (took $secs s)"
has "$tmp/stuck.out" "[rank 0] " && has "$tmp/stuck.out" "did not complete within 3 s"
ok $? "a stuck rank: rank 0's all_reduce times out with a message saying so"

# the same through the launcher (on CPUs it execs mpirun -np 2)
TG_MPIRUN_SAVED=$TG_MPIRUN
run launch_ok env TG_MPIRUN="$TG_MPIRUN_SAVED" "$TEGRAPH" run -n 2 "$tmp/job.lua" none
ok $rc "tegraph run -n 2: a healthy job exits 0"
has "$tmp/launch_ok.out" "rank 0 survived" && has "$tmp/launch_ok.out" "[rank 1] hello from rank 1"
ok $? "tegraph run -n 2: both ranks ran, stderr prefixed"
run launch_kill env TG_MPIRUN="$TG_MPIRUN_SAVED" "$TEGRAPH" run -n 2 "$tmp/job.lua" kill
ok $((rc == 0 || secs > LIMIT)) "tegraph run -n 2: a killed rank stops the job within $LIMIT s, non-zero (rc $rc, $secs s)"
has "$tmp/launch_kill.out" "rank 1"
ok $? "tegraph run -n 2: the message names rank 1"

# a rank's own exit status: passed through when it is the first failure; a rank that exits while the other
# waits for it makes that one fail, and the job exits 1 — as `tegraph run --help` says (it promised the status)
cat >"$tmp/exit5.lua" <<'LUA'
local tg = require "tegraph"
local comm = tg.comm
comm.all_reduce(tg.ones({ 4 }))
if comm.rank() == 1 then os.exit(5) end
if arg[1] == "wait" then comm.all_reduce(tg.ones({ 4 })) end
LUA
run launch_exit5 env TG_MPIRUN="$TG_MPIRUN_SAVED" "$TEGRAPH" run -n 2 "$tmp/exit5.lua" end
ok $((rc != 5)) "tegraph run -n 2: a rank's os.exit(5) at its end is the job's status (rc $rc)"
run launch_exit5w env TG_MPIRUN="$TG_MPIRUN_SAVED" "$TEGRAPH" run -n 2 "$tmp/exit5.lua" wait
ok $((rc != 1)) "tegraph run -n 2: a rank's os.exit(5) while rank 0 waits for it in a collective: rc 1 (rc $rc)"
"$TEGRAPH" run --help | tr '\n' ' ' | grep -q "the status of the first rank that fails, except through mpirun (CPUs) for a rank that exits while others still wait for it in a collective: they fail, and the job exits 1"
ok $? "tegraph run --help says which status the job exits with"

for f in ok kill error stuck launch_ok launch_kill launch_exit5 launch_exit5w; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -20
done
finish
