#!/bin/sh
# docs-c-api-names-are-in-the-header.sh — where the README or docs/ARCHITECTURE.md offer a C function as the C side of
# a call ("C: `tg_x`", "(C: tg_x / tg_y)"), that function is declared in src/tegraph.h; internal functions are named
# "internal:" instead, never as C API.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
SRC="${TG_TOP_SRCDIR:-.}"
H="$SRC/src/tegraph.h"
echo "1..2"
for doc in README.md docs/ARCHITECTURE.md; do
    # every tg_ name inside a "C: ..." aside up to its closing parenthesis, semicolon or sentence end
    missing=$(grep -o 'C: [^);.]*' "$SRC/$doc" | grep -o 'tg_[a-z0-9_]*[a-z0-9]' | sort -u | while read -r f; do
        case "$f" in tg_fp8 | tg_tokenizer) continue ;; esac # the prefixes of "tg_fp8_*" and "tg_tokenizer_*"
        grep -q "\\b$f\\b" "$H" || echo "$f"
    done)
    ok $([ -z "$missing" ]; echo $?) "$doc offers as C API only functions of tegraph.h (not: $(echo $missing))"
done
[ "$n" -eq 2 ] || echo "# ran $n checks, planned 2"
exit 0
