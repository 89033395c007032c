/* error.c — the per-thread status message and invariant failures. */
#include "core/core.h"

#include <pthread.h>
#include <string.h>

/* The message lives in a per-thread heap buffer that grows to fit it (a deep chain of prefixes keeps
 * its cause); a thread's buffer is freed when the thread ends. When memory runs out, a fixed buffer
 * holds the message's start and its last part, so the cause at the end is still there. */
static _Thread_local char *errbuf;
static _Thread_local size_t errcap;
static _Thread_local char errfixed[1024];
static pthread_key_t errkey;
static pthread_once_t errkey_once = PTHREAD_ONCE_INIT;

static void errbuf_free(void *p) { free(p); }
static void errkey_make(void) { pthread_key_create(&errkey, errbuf_free); }

const char *tg_last_error(void) { return errbuf ? errbuf : errfixed; }

/* Stores msg (n bytes) as the current message. */
static void set_message(const char *msg, size_t n)
{
    if (n + 1 > errcap) {
        size_t cap = errcap ? errcap : 256;
        while (cap < n + 1) cap *= 2;
        char *p = realloc(errbuf, cap);
        if (p) {
            pthread_once(&errkey_once, errkey_make);
            if (!errbuf) pthread_setspecific(errkey, p);
            else if (p != errbuf) pthread_setspecific(errkey, p);
            errbuf = p;
            errcap = cap;
        }
    }
    if (n + 1 <= errcap) {
        memmove(errbuf, msg, n);
        errbuf[n] = 0;
        return;
    }
    /* No memory to grow: keep the beginning and the end, with " ... " between. */
    char *dst = errbuf ? errbuf : errfixed;
    size_t cap = errbuf ? errcap : sizeof errfixed;
    size_t head = cap / 4, tail = cap - head - 6;
    memmove(dst + head + 5, msg + n - tail, tail);
    memmove(dst, msg, head);
    memcpy(dst + head, " ... ", 5);
    dst[cap - 1] = 0;
}

tg_status tg_verror(tg_status st, const char *fmt, va_list ap)
{
    char small[512];
    if (fmt == NULL) { /* no message: a hook's failure is then reported as one "without a message" */
        set_message("", 0);
        return st;
    }
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(ap2);
        set_message("(unformattable error message)", 29);
        return st;
    }
    if ((size_t)n < sizeof small) {
        set_message(small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, ap2);
            set_message(big, (size_t)n);
            free(big);
        } else {
            set_message(small, sizeof small - 1);
        }
    }
    va_end(ap2);
    return st;
}

void tg_error_clear(void) { set_message("", 0); }

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
    const char *old = tg_last_error();
    size_t oldn = strlen(old);
    va_list ap;
    va_start(ap, fmt);
    char pre[512];
    int pn = vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    if (pn < 0) pn = 0;
    char *prefix = pre;
    if ((size_t)pn >= sizeof pre && (prefix = malloc((size_t)pn + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(prefix, (size_t)pn + 1, fmt, ap);
        va_end(ap);
    } else if (!prefix) {
        prefix = pre;
        pn = sizeof pre - 1;
    }
    size_t n = (size_t)pn + 2 + oldn;
    char *joined = malloc(n + 1);
    if (joined) {
        memcpy(joined, prefix, (size_t)pn);
        memcpy(joined + pn, ": ", 2);
        memcpy(joined + pn + 2, old, oldn + 1);
        set_message(joined, n);
        free(joined);
    } else {
        /* Out of memory: the cause stays whole; the prefix is what gets cut. */
        char *dst = errbuf ? errbuf : errfixed;
        size_t cap = errbuf ? errcap : sizeof errfixed;
        if (oldn + 3 < cap) {
            size_t keep = cap - oldn - 3 < (size_t)pn ? cap - oldn - 3 : (size_t)pn;
            memmove(dst + keep + 2, old, oldn + 1);
            memcpy(dst, prefix, keep);
            memcpy(dst + keep, ": ", 2);
        }
    }
    if (prefix != pre) free(prefix);
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
