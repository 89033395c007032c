#!/bin/sh
# kprof-diff.sh — two kprof tables side by side (before and after a change), per group and per kernel:
#
#   examples/bench/gpu/kprof-diff.sh BEFORE.txt AFTER.txt [ROWS]
#
# Rows are matched by kernel name (groups by group name), sorted by the larger of the two times; ROWS kernels
# are shown (default 30). Times are as the tables give them (per step when both were made with KPROF_STEPS).
[ $# -ge 2 ] || { echo "usage: $0 BEFORE.txt AFTER.txt [ROWS]" >&2; exit 2; }
for f in "$1" "$2"; do
  grep -q '^ *total ms *% *calls  *mean us' "$f" 2>/dev/null || { echo "kprof-diff: $f is not a kprof table" >&2; exit 2; }
done
awk -v rows="${3:-30}" '
  FNR == 1 { file++; part = 0 }
  /^GPU time/ { span[file] = $0 }
  /^ *total ms *% *calls *mean us/ { part = 1; next }
  /^ *total ms *% *calls *group$/ { part = 2; next }
  part == 1 && NF >= 6 && $1 ~ /^[0-9.-]+$/ {
    name = $6; for (i = 7; i <= NF; i++) name = name " " $i
    k[name] = 1; ms[file, name] = $1; calls[file, name] = $3; grp[name] = $5
  }
  part == 2 && NF == 4 { g[$4] = 1; gms[file, $4] = $1; gcalls[file, $4] = $3 }
  # key[1..n] ("time" SUBSEP name) by time, largest first: an insertion sort (a few hundred rows)
  function order(n,    i, j, v) { for (i = 2; i <= n; i++) { v = key[i]; for (j = i - 1; j >= 1 && key[j] < v; j--) key[j + 1] = key[j]; key[j + 1] = v } }
  function show(a, b) { return sprintf("%9.3f %9.3f %+9.3f", a, b, b - a) }
  END {
    print "before: " span[1]; print "after:  " span[2]; print ""
    printf "%9s %9s %9s %8s %8s  %s\n", "before ms", "after ms", "delta", "calls", "calls", "group"
    n = 0
    for (x in g) { m = gms[1, x] > gms[2, x] ? gms[1, x] : gms[2, x]; key[++n] = sprintf("%012.3f", m) SUBSEP x }
    order(n)
    for (i = 1; i <= n; i++) {
      split(key[i], p, SUBSEP); x = p[2]
      printf "%s %8s %8s  %s\n", show(gms[1, x], gms[2, x]), ((1, x) in gcalls) ? gcalls[1, x] : "-", ((2, x) in gcalls) ? gcalls[2, x] : "-", x
    }
    print ""
    printf "%9s %9s %9s %8s %8s  %-13s %s\n", "before ms", "after ms", "delta", "calls", "calls", "group", "kernel"
    n = 0
    for (x in k) { m = ms[1, x] > ms[2, x] ? ms[1, x] : ms[2, x]; key[++n] = sprintf("%012.3f", m) SUBSEP x }
    order(n)
    for (i = 1; i <= n && i <= rows; i++) {
      split(key[i], p, SUBSEP); x = p[2]
      printf "%s %8s %8s  %-13s %s\n", show(ms[1, x], ms[2, x]), ((1, x) in calls) ? calls[1, x] : "-", ((2, x) in calls) ? calls[2, x] : "-", grp[x], x
    }
  }' "$1" "$2"
