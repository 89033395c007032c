#!/bin/sh
# dp_scaling.sh — data-parallel scaling of examples/gpt.lua in one command: steady tokens/s on each rank count, eager
# and --graph, ddp and zero1, each bucket size; the scaling against the same mode on one rank; and, from a short
# traced run of each, the reduce time per step and the part of it that compute did not hide (exposed).
#
#   examples/bench/dp_scaling.sh [OUT] [gpt.lua options]
#
# Default model: GPT-2 124M (12 layers, width 768, 12 heads, vocabulary 50257 padded to 50304, context 1024), bf16,
# 2 microbatches x 8 sequences per rank and step, 40 steps, on the built-in task's tokens (OUT/tokens.bin). The
# options after OUT are added to every run (later ones win: --steps 20, --layers 2 --width 64 --context 64 ...).
#
# Environment:
#   RANKS    rank counts (default: 1 and the powers of two up to the GPUs nvidia-smi lists; without a GPU: "1 2")
#   MODES    reduce policies (default "ddp zero1")
#   GRAPHS   eager and/or graph (default "eager graph"; graph = --graph: graphed layers, delayed wgrad)
#   BUCKETS  bucket sizes in MiB (default 25)
#   TRACE    0: skip the traced runs (default 1)
#   TEGRAPH  the program (default: tegraph on PATH, else the build tree's ./tegraph)
set -eu
out=bench_dp_scaling
case ${1:-} in
  -*|"") ;;
  *) out=$1; shift ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/dp_common.sh"
if [ -z "${RANKS:-}" ]; then
  if [ "$gpus" -gt 0 ]; then RANKS=$(powers 1); else RANKS="1 2"; fi
fi
MODES=${MODES:-ddp zero1}
GRAPHS=${GRAPHS:-eager graph}
BUCKETS=${BUCKETS:-25}
TRACE=${TRACE:-1}
for m in $MODES; do
  case $m in ddp|zero1) ;; *) echo "$0: MODES: ddp or zero1, not '$m'" >&2; exit 2 ;; esac
done
for g in $GRAPHS; do
  case $g in eager|graph) ;; *) echo "$0: GRAPHS: eager or graph, not '$g'" >&2; exit 2 ;; esac
done
for r in $RANKS; do
  case $r in ''|*[!0-9]*|0) echo "$0: RANKS: positive integers, not '$r'" >&2; exit 2 ;; esac
done
mkdir -p "$out"
gpt2_tokens "$out"
G="$G --steps 40"

results=$out/results.txt
: >"$results"
echo "rank counts: $RANKS; modes: $MODES; $GRAPHS; buckets (MiB): $BUCKETS; logs in $out/"
for b in $BUCKETS; do
  for g in $GRAPHS; do
    gflag=""; [ "$g" = graph ] && gflag="--graph"
    for m in $MODES; do
      mflag=""; [ "$m" = zero1 ] && mflag="--zero1"
      for n in $RANKS; do
        name="n$n-$m-$g-b$b"
        # shellcheck disable=SC2086
        if ! "$TEGRAPH" run -n "$n" "$top/examples/gpt.lua" $G $gflag $mflag --bucket-mb "$b" "$@" >"$out/$name.log" 2>&1; then
          tail -5 "$out/$name.log" >&2
          echo "$0: $name failed (log: $out/$name.log)" >&2
          echo "$n $m $g $b failed - -" >>"$results"
          continue
        fi
        tps=$(sed -n 's/^steady throughput ([^)]*): \([0-9]*\) tokens\/s.*/\1/p' "$out/$name.log" | tail -1)
        red=-; exp=-
        if [ "$TRACE" != 0 ] && [ "$n" -gt 1 ]; then
          # shellcheck disable=SC2086
          if "$TEGRAPH" run -n "$n" "$top/examples/gpt.lua" $G $gflag $mflag --bucket-mb "$b" "$@" --steps 8 \
              --trace-steps 4:7 --trace "$out/$name.trace.json" >"$out/$name.trace.log" 2>&1; then
            line=$(grep '^rank 0: per step' "$out/$name.trace.log" | tail -1)
            red=$(echo "$line" | sed -n 's/.*reduce \([0-9.]*\) ms, .*/\1/p')
            exp=$(echo "$line" | sed -n 's/.*, \([0-9.]*\) ms exposed.*/\1/p')
          fi
        fi
        echo "$n $m $g $b ${tps:-?} ${red:-?} ${exp:-?}" | tee -a "$results"
      done
    done
  done
done
# the table: scaling against one rank of the same mode, graph and bucket size
awk '
  { key = $2 " " $3 " " $4; if ($1 == 1 && $5 ~ /^[0-9]+$/) one[key] = $5; row[NR] = $0 }
  END {
    printf "\n%5s %6s %6s %10s %12s %8s %16s %16s\n", "ranks", "reduce", "mode", "bucket MiB", "tokens/s", "scaling",
      "reduce ms/step", "exposed ms/step"
    for (i = 1; i <= NR; i++) {
      split(row[i], f, " "); key = f[2] " " f[3] " " f[4]
      sc = (key in one) && f[5] ~ /^[0-9]+$/ ? sprintf("%.2fx", f[5] / one[key]) : "-"
      printf "%5s %6s %6s %10s %12s %8s %16s %16s\n", f[1], f[2], f[3], f[4], f[5], sc, f[6], f[7]
    }
  }' "$results"
# with several bucket sizes: the fastest for each rank count, policy and mode (the size to train with there)
if [ "$(echo $BUCKETS | wc -w)" -gt 1 ]; then
  awk '
    $5 ~ /^[0-9]+$/ { key = $1 " " $2 " " $3; if (!(key in best) || $5 > best[key]) { best[key] = $5; at[key] = $4 }
      if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
    END {
      printf "\nfastest bucket size:\n"
      for (i = 1; i <= n; i++) { split(order[i], f, " "); printf "  %s ranks, %s, %s: %s MiB (%s tokens/s)\n", f[1], f[2], f[3], at[order[i]], best[order[i]] }
    }' "$results"
fi
