/* debug.c — test-only switches: one table of flags, the environment's TG_DEBUG read once, at the first use of any. */
#include "core/debug.h"
#include "tegraph.h" /* tg_error */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[TG_DEBUG_COUNT] = {
    [TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY] = "skip_hooks_after_replay",
    [TG_DEBUG_GRAPH_SHARE_ANY_ORDER] = "graph_share_any_order",
    [TG_DEBUG_GRAPH_REUSE_EARLY] = "graph_reuse_early",
    [TG_DEBUG_UNFUSED_RESIDUAL] = "unfused_residual",
    [TG_DEBUG_UNFUSED_DGELU] = "unfused_dgelu",
    [TG_DEBUG_FP8_UNFUSED_PRODUCERS] = "fp8_unfused_producers",
    [TG_DEBUG_GEMM_BLOCKED] = "gemm_blocked",
    [TG_DEBUG_EPILOGUE_UNFUSED] = "epilogue_unfused",
    [TG_DEBUG_BGRAD_UNFUSED] = "bgrad_unfused",
    [TG_DEBUG_ALLOC_DIRECT] = "alloc_direct",
    [TG_DEBUG_COMM_CHECK] = "comm_check",
    [TG_DEBUG_ATTENTION_MMA_SYNC] = "attention_mma_sync",
    [TG_DEBUG_ATTENTION_TWO_PASS] = "attention_two_pass",
    [TG_DEBUG_AUTOCAST_GEMM] = "autocast_gemm",
    [TG_DEBUG_ROUND_RESIDUAL] = "round_residual",
    [TG_DEBUG_ROUND_GRADS] = "round_grads",
    [TG_DEBUG_ROUND_PARAMS] = "round_params",
};

static int flags[TG_DEBUG_COUNT];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static void from_env(void);

int tg_debug_get(tg_debug_flag flag)
{
    pthread_once(&env_once, from_env);
    return (unsigned)flag < TG_DEBUG_COUNT && flags[flag];
}

int tg_debug_set(tg_debug_flag flag, int on)
{
    pthread_once(&env_once, from_env);
    if ((unsigned)flag >= TG_DEBUG_COUNT) return 0;
    int old = flags[flag];
    flags[flag] = on != 0;
    return old;
}

const char *tg_debug_name(tg_debug_flag flag) { return (unsigned)flag < TG_DEBUG_COUNT ? names[flag] : NULL; }

int tg_debug_lookup(const char *name)
{
    for (int i = 0; i < TG_DEBUG_COUNT; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* The first unknown name in TG_DEBUG ("" if none), and whether a caller of tg_env_check reports it (then
 * from_env does not print it too). */
static char unknown[64];
static int checked;

/* TG_DEBUG=name[,name...] turns flags on for the whole run (e.g. alloc_direct under compute-sanitizer).
 * An unknown name is an error where the library can return one (tg_env_check: the tegraph program exits 2,
 * loading the Lua library fails), since a misspelt switch would otherwise run the wrong path unnoticed; a
 * program that only reads flags gets it on stderr. */
static void from_env(void)
{
    const char *env = getenv("TG_DEBUG");
    if (!env) return;
    char name[64];
    for (const char *p = env; *p;) {
        size_t n = strcspn(p, ", ");
        if (n > 0) {
            snprintf(name, sizeof name, "%.*s", (int)n, p);
            int f = tg_debug_lookup(name);
            if (f >= 0) {
                flags[f] = 1;
            } else if (!unknown[0]) {
                snprintf(unknown, sizeof unknown, "%s", name);
            }
        }
        p += n;
        if (*p) p++;
    }
    if (unknown[0] && !checked) {
        fprintf(stderr, "tegraph: TG_DEBUG: unknown flag '%s' (known:", unknown);
        for (int i = 0; i < TG_DEBUG_COUNT; i++) fprintf(stderr, " %s", names[i]);
        fprintf(stderr, ")\n");
    }
}

tg_status tg_env_check(void)
{
    checked = 1;
    pthread_once(&env_once, from_env);
    if (!unknown[0]) return TG_OK;
    char known[512] = "";
    size_t len = 0;
    for (int i = 0; i < TG_DEBUG_COUNT && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", names[i]);
    return tg_error(TG_EINVAL, "TG_DEBUG: unknown flag '%s' (known: %s)", unknown, known);
}
