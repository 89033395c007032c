# tap.sh — sourced by the shell tests: TAP counters, ok, has, and run (a tegraph command's status and output).
TEGRAPH="${TG_TOP_BUILDDIR:-.}/tegraph"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-sh.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { # ok STATUS DESCRIPTION: passes when STATUS is 0
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}
has() { # has FILE TEXT: 0 when FILE contains TEXT
    grep -F -q -- "$2" "$1"
}
# run ARGS...: runs tegraph with ARGS; sets rc, out, err and err1 (the first line of err, for messages)
run() {
    "$TEGRAPH" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
    err1=$(head -n 1 "$tmp/err")
}
