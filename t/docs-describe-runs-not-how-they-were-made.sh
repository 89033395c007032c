#!/bin/sh
# docs-describe-runs-not-how-they-were-made.sh — the README, docs/ and examples/ (benchmark results included) speak of
# runs of tegraph on a named machine, keyed by date and commit: never of numbered calls, issues or machines lent.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
SRC="${TG_TOP_SRCDIR:-.}"
echo "1..2"
hits=$(cd "$SRC" && grep -rInE -i '\bcalls? [0-9]+|issue [0-9]+|\blent\b|device calls' \
    --include='*.md' --include='*.lua' --include='*.sh' --include='*.py' --include='*.c' --include='*.h' \
    README.md docs examples 2>/dev/null | head -n 5)
ok $([ -z "$hits" ]; echo $?) "no numbered calls or issues, nothing lent (first hits: $(echo $hits | cut -c1-300))"
heads=$(grep -c '^## 20[0-9][0-9]-[0-9][0-9]-[0-9][0-9] .*commit' "$SRC/examples/bench/RESULTS.md")
ok $([ "$heads" -gt 0 ] && ! grep -E '^## 20' "$SRC/examples/bench/RESULTS.md" | grep -v -q 'commit'; echo $?) \
    "every results section is headed by its date and commit ($heads sections)"
[ "$n" -eq 2 ] || echo "# ran $n checks, planned 2"
exit 0
