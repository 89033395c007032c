/* checked.h — overflow-checked size arithmetic for every size computed from user input. */
#ifndef TG_CORE_CHECKED_H
#define TG_CORE_CHECKED_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Each stores a op b in *out and returns 1, or returns 0 (and leaves *out
 * alone) when the result does not fit. */
static inline int tg_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

static inline int tg_add_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

static inline int tg_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

static inline int tg_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

/* 1 when v fits a C int (the C API's counts: heads, layers, microbatches). */
static inline int tg_fits_int(int64_t v) { return v >= INT_MIN && v <= INT_MAX; }

#endif
