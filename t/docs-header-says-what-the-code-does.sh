#!/bin/sh
# docs-header-says-what-the-code-does.sh — tegraph.h's comment on a call says what the code does where an audit found
# it did not: tg_copy into an integer dtype refuses a value that does not fit (it said truncate and saturate; the code
# is tested in elementwise-ops.c), and tg_param_add_hook names its refusals (the same (fn, ud) twice, a hook adding
# one from p's own hooks: nn-hooks-fire-once-after-wgrad.c).
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
H="${TG_TOP_SRCDIR:-.}/src/tegraph.h"
echo "1..5"

# comment_of NAME: the comment lines right above NAME's declaration
comment_of() {
    awk -v fn="$1(" '
        /^\/\*/ || /^ \*/ { c = c $0 "\n"; next }
        /^TG_API/ && index($0, fn) { printf "%s", c; exit }
        { c = "" }' "$H"
}

copy=$(comment_of tg_copy)
case "$copy" in *truncates*|*"saturates at the integer"*|*"NaN becomes 0"*) r=1 ;; *) r=0 ;; esac
ok $r "tg_copy's comment no longer says a cast into an integer dtype truncates or saturates"
case "$copy" in *"into i32 or u16 refuses"*TG_EINVAL*) r=0 ;; *) r=1 ;; esac
ok $r "tg_copy's comment says a value that does not fit i32 or u16 is refused (TG_EINVAL)"

hook=$(comment_of tg_param_add_hook)
case "$hook" in *"already a hook of p (TG_EINVAL"*) r=0 ;; *) r=1 ;; esac
ok $r "tg_param_add_hook's comment says the same (fn, ud) twice is TG_EINVAL"
case "$hook" in *"*id = 0"*) r=0 ;; *) r=1 ;; esac
ok $r "... and that a refused call sets *id to 0"
case "$hook" in *"hooks are running"*TG_ESTATE*) r=0 ;; *) r=1 ;; esac
ok $r "... and that adding from one of p's own hooks is TG_ESTATE"

[ "$n" -eq 5 ] || echo "# ran $n checks, planned 5"
exit 0
