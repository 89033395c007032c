/* errors-long-messages-keep-their-cause.c — a message prefixed many times over (deep recursion through
 * modules and callbacks), or one longer than any fixed buffer, keeps its cause whole and its outermost
 * context; a message formatted from the current one keeps it too; a NULL format sets an empty message (no
 * vsnprintf of NULL). */
#include "core/core.h"
#include "tap.h"

#include <string.h>

int main(void)
{
    char cause[3001];
    memset(cause, 'c', sizeof cause - 1);
    cause[sizeof cause - 1] = '\0';
    memcpy(cause, "CAUSE-START", 11);
    memcpy(cause + sizeof cause - 10, "CAUSE-END", 9);

    /* a long cause, then 200 long prefixes: "outer: ... : level 0: cause" */
    tg_error(TG_EINVAL, "%s", cause);
    is_int(strlen(tg_last_error()), 3000, "a 3000-character message is kept whole");
    char pre[601];
    memset(pre, 'p', sizeof pre - 1);
    pre[sizeof pre - 1] = '\0';
    int statuses_kept = 1;
    for (int i = 0; i < 200; i++) statuses_kept &= tg_error_prefix(TG_EINVAL, "level %d %s", i, pre) == TG_EINVAL;
    ok(statuses_kept, "tg_error_prefix returns the status it was given");
    const char *m = tg_last_error();
    ok(strncmp(m, "level 199 ", 10) == 0, "the outermost prefix leads the message");
    ok(strstr(m, "level 0 ") != NULL, "the innermost prefix is still there");
    ok(strstr(m, cause) != NULL, "the cause is there whole, after 200 prefixes of 600 characters");
    size_t n = strlen(m);
    ok(n > 9 && strcmp(m + n - 9, "CAUSE-END") == 0, "and the message ends with it");

    /* a long prefix on a short cause */
    tg_error(TG_EIO, "short cause");
    tg_error_prefix(TG_EIO, "%s", cause);
    m = tg_last_error();
    n = strlen(m);
    ok(n == 3000 + 2 + 11 && strcmp(m + n - 11, "short cause") == 0, "a 3000-character prefix does not push the cause out");

    /* a message formatted from the current one */
    tg_error(TG_EINVAL, "%s", cause);
    tg_error(TG_EINVAL, "wrapped: %s", tg_last_error());
    m = tg_last_error();
    ok(strncmp(m, "wrapped: CAUSE-START", 20) == 0 && strlen(m) == 9 + 3000,
       "a message formatted from the current one reads it before replacing it");

    /* a host's tg_error(st, NULL): an empty message, the status returned (vsnprintf never sees NULL) */
    const char *volatile no_format = NULL; /* volatile: the compiler's format check would see the NULL */
    ok(tg_error(TG_EIO, no_format) == TG_EIO, "tg_error with a NULL format returns its status");
    ok(strcmp(tg_last_error(), "") == 0, "... and sets an empty message (got \"%s\")", tg_last_error());
    return done_testing();
}
