#!/bin/sh
# dp_faults.sh — a rank lost in the middle of data-parallel training. For each rank count, launcher and reduce policy
# it trains examples/gpt.lua (GPT-2 124M by default) with a checkpoint every SAVE_EVERY steps, SIGKILLs rank 1 once
# step KILL_AT is logged, and reports how long the job took to stop after the kill, its exit status, whether its
# error names rank 1, and whether the last checkpoint is complete (`latest` names it; model, config and one
# optimizer file per rank are there).
#
#   examples/bench/dp_faults.sh [OUT] [gpt.lua options]
#
# Environment:
#   RANKS       rank counts (default: the powers of two from 2 up to the GPUs nvidia-smi lists; without a GPU: 2)
#   LAUNCHERS   run (tegraph run -n N) and/or mpirun (default both)
#   MODES       ddp and/or zero1 (default both)
#   KILL_AT     the step after which rank 1 is killed (default 8); SAVE_EVERY (default 5); LIMIT: seconds the
#               job may take to stop (default 60)
#   TEGRAPH, MPIRUN  the programs (default: tegraph on PATH or the build tree's ./tegraph; mpirun, which may carry
#               options: MPIRUN="mpirun --oversubscribe")
# Exits 1 when a run breaks a rule: exit 0, no stop within LIMIT, no error naming rank 1, or an incomplete checkpoint;
# 2 on a host with one GPU (unless TG_DEVICE=cpu: CPU ranks) or for bad settings.
set -u
out=bench_dp_faults
case ${1:-} in
  -*|"") ;;
  *) out=$1; shift ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/dp_common.sh"
MPIRUN=${MPIRUN:-mpirun}
if [ "$gpus" -eq 1 ] && [ "${TG_DEVICE:-}" != cpu ]; then
  echo "$0: one GPU here: a rank kill needs 2 ranks with a GPU each (TG_DEVICE=cpu runs CPU ranks)" >&2
  exit 2
fi
RANKS=${RANKS:-$(powers 2)}
LAUNCHERS=${LAUNCHERS:-run mpirun}
MODES=${MODES:-ddp zero1}
KILL_AT=${KILL_AT:-8}
SAVE_EVERY=${SAVE_EVERY:-5}
LIMIT=${LIMIT:-60}
for l in $LAUNCHERS; do case $l in run|mpirun) ;; *) echo "$0: LAUNCHERS: run or mpirun, not '$l'" >&2; exit 2 ;; esac; done
for m in $MODES; do case $m in ddp|zero1) ;; *) echo "$0: MODES: ddp or zero1, not '$m'" >&2; exit 2 ;; esac; done
for r in $RANKS; do
  case $r in ''|*[!0-9]*|0|1) echo "$0: RANKS: integers of at least 2 (rank 1 is killed), not '$r'" >&2; exit 2 ;; esac
done
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
gpt2_tokens "$out" || exit 1

# rank1 DIR: the pid of rank 1 of the job tagged DIR (the rank itself, not a child it started: that child carries the
# same environment)
rank1() {
  for p in $(ps -eo pid=); do
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ") || continue
    echo "$env" | grep -qx "TG_FAULT_TAG=$1" || continue
    echo "$env" | grep -qxE "(TG_RANK|OMPI_COMM_WORLD_RANK)=1" || continue
    pp=$(ps -o ppid= -p "$p" | tr -d ' ')
    penv=$(tr '\0' '\n' 2>/dev/null <"/proc/$pp/environ")
    if echo "$penv" | grep -qx "TG_FAULT_TAG=$1" && echo "$penv" | grep -qxE "(TG_RANK|OMPI_COMM_WORLD_RANK)=1"; then continue; fi
    echo "$p"
    return 0
  done
  return 1
}

# intact DIR N: the checkpoint `latest` names has its model, config and N optimizer files
intact() {
  s=$(cat "$1/latest" 2>/dev/null) || return 1
  [ -f "$1/$s/config.json" ] && [ -s "$1/$s/model.safetensors" ] || return 1
  r=0
  while [ "$r" -lt "$2" ]; do [ -s "$1/$s/rank$r.safetensors" ] || return 1; r=$((r + 1)); done
}

bad=0
results=$out/results.txt
: >"$results"
for n in $RANKS; do
  for l in $LAUNCHERS; do
    for m in $MODES; do
      name="n$n-$l-$m"
      d=$out/$name
      rm -rf "$d"
      mkdir -p "$d"
      mflag=""; [ "$m" = zero1 ] && mflag="--zero1"
      TG_FAULT_TAG=$d
      export TG_FAULT_TAG
      # shellcheck disable=SC2086
      if [ "$l" = mpirun ]; then
        timeout 900 $MPIRUN -np "$n" "$TEGRAPH" run "$top/examples/gpt.lua" $G $mflag "$@" --steps 100000 --out "$d/ck" \
          --save-every "$SAVE_EVERY" --log "$d/log" >"$d/out" 2>&1 &
      else
        timeout 900 "$TEGRAPH" run -n "$n" "$top/examples/gpt.lua" $G $mflag "$@" --steps 100000 --out "$d/ck" \
          --save-every "$SAVE_EVERY" --log "$d/log" >"$d/out" 2>&1 &
      fi
      job=$!
      i=0
      while [ "$i" -lt 3000 ] && ! grep -q "\"step\":$KILL_AT," "$d/log" 2>/dev/null && kill -0 "$job" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
      done
      victim=$(rank1 "$d")
      t0=$(date +%s.%N)
      if [ -n "$victim" ]; then kill -KILL "$victim"; else kill -TERM "$job" 2>/dev/null; fi
      wait "$job"
      rc=$?
      secs=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
      names=no
      grep -v '^\[rank 1\]' "$d/out" | grep -Eiq "rank 1([^0-9]|$)" && names=yes
      ck=incomplete
      intact "$d/ck" "$n" && ck="complete ($(cat "$d/ck/latest"))"
      verdict=ok
      if [ -z "$victim" ]; then verdict="no rank 1 found"
      elif [ "$rc" -eq 0 ] || [ "$names" = no ] || [ "$ck" = incomplete ] || awk -v s="$secs" -v l="$LIMIT" 'BEGIN { exit !(s > l) }'; then
        verdict=FAIL
      fi
      [ "$verdict" = ok ] || bad=1
      printf "%5s %7s %6s %10s %4s %12s   %-28s %s\n" "$n" "$l" "$m" "$secs" "$rc" "$names" "$ck" "$verdict" | tee -a "$results"
    done
  done
done
printf "\n%5s %7s %6s %10s %4s %12s   %-28s %s\n" ranks launcher reduce "stopped s" rc "names rank 1" "last checkpoint" verdict
cat "$results"
echo "logs: $out/*/out"
exit $bad
