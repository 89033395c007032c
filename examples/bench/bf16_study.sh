#!/bin/sh
# bf16_study.sh — the bf16 quality study in one command: tegraph bf16 (before: bf16 weight gradients;
# after: f32 main_grad), tegraph f32 and the PyTorch twin (bf16 autocast and f32) on the same initial weights and
# the same windows of a byte-level text file, with GPT-2's recipe (examples/bench/bf16_study.lua). Prints the
# last-50-step mean loss of each run, the gaps to the twin and tokens/s; the loss curves go to OUT/*.csv.
#
#   examples/bench/bf16_study.sh CORPUS.txt [OUT] [bf16_study.lua options, e.g. --steps 200]
#
# TEGRAPH (default: tegraph on PATH, else the build tree's ./tegraph) and PYTHON (default python3, with torch)
# name the programs. The extra options go to both tegraph and the twin (they share the option names).
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 CORPUS.txt [OUT] [options]" >&2
  exit 2
fi
corpus=$1
case ${2:-} in
  -*) echo "$0: OUT comes before the options: $0 CORPUS.txt OUT [options]" >&2; exit 2 ;;
esac
out=${2:-bf16_study_out}
[ $# -ge 2 ] && shift 2 || shift 1
if [ ! -r "$corpus" ]; then
  echo "$0: cannot read the corpus $corpus" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
if [ -z "${TEGRAPH:-}" ]; then
  if command -v tegraph >/dev/null 2>&1; then TEGRAPH=tegraph; else TEGRAPH=$top/tegraph; fi
fi
PYTHON=${PYTHON:-python3}
mkdir -p "$out"

run() { # name, command...: runs it, keeps its output in OUT/name.log
  name=$1
  shift
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; echo "$0: $name failed (log: $out/$name.log)" >&2; exit 1; }
  tail -1 "$out/$name.log"
}

study="$TEGRAPH run $top/examples/bench/bf16_study.lua --text $corpus --quiet"
run tegraph_bf16 $study --dtype bf16 --csv "$out/tegraph_bf16.csv" --save-init "$out/init.safetensors" \
  --windows "$out/windows.txt" "$@"
run tegraph_bf16_before $study --dtype bf16 --bf16-grads --csv "$out/tegraph_bf16_before.csv" "$@"
run tegraph_f32 $study --dtype f32 --csv "$out/tegraph_f32.csv" "$@"
twin="$PYTHON $top/examples/bench/peers/gpt_twin.py --text $corpus --init $out/init.safetensors --windows $out/windows.txt"
run twin_bf16 $twin --dtype bf16 --csv "$out/twin_bf16.csv" "$@"
run twin_f32 $twin --dtype f32 --csv "$out/twin_f32.csv" "$@"

# the summary: last-N mean loss and tokens/s of each run, gaps to the twin of the same dtype and to the same
# framework's f32 run, and the
# largest per-step difference of the f32 curves over their first 200 steps
awk '
  FNR == 1 { name = FILENAME; sub(/.*\//, "", name); sub(/\.log$/, "", name) }
  /^last-[0-9]+-step mean loss/ { loss[name] = $4; tps[name] = $6; tail = $1 }
  END {
    printf "\n%-22s %14s %12s %14s %14s\n", "run", tail " loss", "tokens/s", "vs twin", "vs own f32"
    n = split("tegraph_bf16_before tegraph_bf16 twin_bf16 tegraph_f32 twin_f32", r, " ")
    for (i = 1; i <= n; i++) {
      k = r[i]; ref = (k ~ /f32/) ? "twin_f32" : "twin_bf16"; own = (k ~ /^twin/) ? "twin_f32" : "tegraph_f32"
      printf "%-22s %14.5f %12.0f %13.2f%% %13.2f%%\n", k, loss[k], tps[k], 100 * (loss[k] - loss[ref]) / loss[ref],
        100 * (loss[k] - loss[own]) / loss[own]
    }
  }' "$out"/tegraph_bf16_before.log "$out"/tegraph_bf16.log "$out"/twin_bf16.log "$out"/tegraph_f32.log "$out"/twin_f32.log
awk -F, 'FNR == 1 { f++; next } f == 1 { a[$1] = $2 } f == 2 && ($1 in a) && $1 <= 200 {
    d = $2 - a[$1]; if (d < 0) d = -d; if (d > m) { m = d; at = $1 } }
  END { printf "f32 curves, tegraph vs twin: largest per-step loss difference over steps 1..200: %.2e (step %d)\n", m, at }' \
  "$out/tegraph_f32.csv" "$out/twin_f32.csv"
echo "curves: $out/*.csv"
