/* error.c — the per-thread status message and invariant failures. */
#include "core/core.h"

#include <string.h>

static _Thread_local char tg_errbuf[1024];

const char *tg_last_error(void) { return tg_errbuf; }

tg_status tg_verror(tg_status st, const char *fmt, va_list ap)
{
    vsnprintf(tg_errbuf, sizeof tg_errbuf, fmt, ap);
    return st;
}

tg_status tg_error(tg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tg_verror(st, fmt, ap);
    va_end(ap);
    return st;
}

tg_status tg_error_prefix(tg_status st, const char *fmt, ...)
{
    char prefix[512], old[sizeof tg_errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tg_errbuf, sizeof old);
    snprintf(tg_errbuf, sizeof tg_errbuf, "%.500s: %.500s", prefix, old);
    return st;
}

const char *tg_status_name(tg_status st)
{
    switch (st) {
    case TG_OK: return "ok";
    case TG_EINVAL: return "invalid argument";
    case TG_ENOMEM: return "out of memory";
    case TG_ESTATE: return "invalid state";
    case TG_ECAPTURE: return "not allowed while capturing";
    case TG_EIO: return "i/o error";
    case TG_EDEVICE: return "device error";
    case TG_ENOTSUP: return "not supported";
    case TG_ELUA: return "lua error";
    }
    return "unknown status";
}

void tg_assert_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "tegraph: %s:%d: internal error: assertion '%s' failed\n", file, line, expr);
    abort();
}

const char *tg_version(void) { return PACKAGE_VERSION; }
const char *tg_build_options(void) { return TG_BUILD_OPTIONS; }
