/* tap.c — TAP output for the C tests. */
#include "tap.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int planned = NO_PLAN, count, failed;

void plan(int n)
{
    planned = n;
    if (n >= 0) printf("1..%d\n", n);
    fflush(stdout);
}

void skip_all(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("1..0 # SKIP ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    exit(0);
}

static int vok(int cond, const char *fmt, va_list ap)
{
    count++;
    if (!cond) failed++;
    printf("%sok %d - ", cond ? "" : "not ", count);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vok(cond, fmt, ap);
    va_end(ap);
    return cond;
}

int is_near(double got, double want, double tol, const char *fmt, ...)
{
    int cond = fabs(got - want) <= tol || (isnan(got) && isnan(want));
    va_list ap;
    va_start(ap, fmt);
    vok(cond, fmt, ap);
    va_end(ap);
    if (!cond) diag("got %.9g, want %.9g (tolerance %.3g)", got, want, tol);
    return cond;
}

int is_int(long long got, long long want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vok(got == want, fmt, ap);
    va_end(ap);
    if (got != want) diag("got %lld, want %lld", got, want);
    return got == want;
}

int like(const char *got, const char *want, const char *fmt, ...)
{
    int cond = got && want && strstr(got, want) != NULL;
    va_list ap;
    va_start(ap, fmt);
    vok(cond, fmt, ap);
    va_end(ap);
    if (!cond) diag("got '%s', want it to contain '%s'", got ? got : "(null)", want ? want : "(null)");
    return cond;
}

void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

void bail_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    exit(1);
}

int done_testing(void)
{
    if (planned == NO_PLAN) printf("1..%d\n", count);
    else if (planned != count) {
        diag("planned %d tests but ran %d", planned, count);
        return 1;
    }
    fflush(stdout);
    return failed ? 1 : 0;
}
