/* cpu_kernels.c — CPU reference kernels: fill, cast, binary, axpby, reductions, Philox RNG; bf16 rounds through f32. */
#include "backend/cpu_impl.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ element access */
static inline float ld_f32(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_BF16 ? tg_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void st_f32(void *p, tg_dtype dt, int64_t i, float v)
{
    if (dt == TG_BF16) ((uint16_t *)p)[i] = tg_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* Any storable dtype, as double (integers exactly). */
static inline double ld_any(const void *p, tg_dtype dt, int64_t i)
{
    switch (dt) {
    case TG_F32: return ((const float *)p)[i];
    case TG_BF16: return tg_bf16_to_f32(((const uint16_t *)p)[i]);
    case TG_I32: return ((const int32_t *)p)[i];
    case TG_U16: return ((const uint16_t *)p)[i];
    case TG_E4M3:
    case TG_E5M2: return tg_fp8_to_f32(dt, ((const uint8_t *)p)[i]);
    default: TG_ASSERT(!"dtype checked before submission"); return 0;
    }
}

/* Floats go through f32 (as the GPU stores them); integers truncate toward
 * zero and saturate, NaN becomes 0 (a last guard: the op layer refuses such
 * values, tg_value_fits and the casts' check). */
static inline void st_any(void *p, tg_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case TG_F32: ((float *)p)[i] = (float)v; break;
    case TG_BF16: ((uint16_t *)p)[i] = tg_f32_to_bf16((float)v); break;
    case TG_I32:
        ((int32_t *)p)[i] = isnan(v) ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
        break;
    case TG_U16: ((uint16_t *)p)[i] = isnan(v) ? 0 : v >= 65535.0 ? 65535 : v <= 0 ? 0 : (uint16_t)v; break;
    case TG_E4M3:
    case TG_E5M2: ((uint8_t *)p)[i] = tg_fp8_from_f32(dt, (float)v); break; /* unscaled, saturating */
    default: TG_ASSERT(!"dtype checked before submission");
    }
}

static tg_status check_dtype(const char *what, tg_dtype dt, int ints_ok)
{
    if (dt == TG_F32 || dt == TG_BF16 || (ints_ok && (dt == TG_I32 || dt == TG_U16 || tg_dtype_is_fp8(dt)))) return TG_OK;
    return tg_error(TG_ENOTSUP, "cpu %s: dtype %s is not supported", what,
                    (unsigned)dt < TG_DTYPE_COUNT ? tg_dtype_name(dt) : "(invalid)");
}

/* ------------------------------------------------------------------ fill */
static void fill_run(const void *p)
{
    const struct tg_fill_args *a = p;
    int64_t n = a->n;
    union { float f; int32_t i; uint16_t h; uint8_t b; } v; /* the value, converted once */
    st_any(&v, a->dt, 0, a->value);
    if (tg_dtype_size(a->dt) == 4) {
        uint32_t bits, *d = a->dst;
        memcpy(&bits, &v, 4);
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) d[i] = bits;
    } else if (tg_dtype_size(a->dt) == 1) {
        memset(a->dst, v.b, (size_t)n);
    } else {
        uint16_t *d = a->dst;
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) d[i] = v.h;
    }
}

tg_status cpu_fill(tg_stream *s, const struct tg_fill_args *a)
{
    TG_TRY(check_dtype("fill", a->dt, 1));
    return cpu_submit(s, fill_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ cast */
/* Notes the first source value that is not an integer of the integer dtype a->dst_dt's range in a->check
 * (TG_INDEX_CAST); returns 1 when there is one. */
static int cast_scan(const struct tg_cast_args *a)
{
    const double lo = a->dst_dt == TG_U16 ? 0.0 : -2147483648.0, hi = a->dst_dt == TG_U16 ? 65535.0 : 2147483647.0;
    for (int64_t i = 0; i < a->n; i++) {
        const double v = ld_any(a->src, a->src_dt, i);
        if (v >= lo && v <= hi && v == trunc(v)) continue;
        uint32_t bits;
        if (a->src_dt == TG_I32) {
            bits = (uint32_t)((const int32_t *)a->src)[i];
        } else {
            const float f = (float)v; /* f32 and bf16 sources: exact */
            memcpy(&bits, &f, sizeof bits);
        }
        const unsigned long long key = (unsigned long long)(i < 0xffffffffLL ? i : 0xffffffffLL) << 32 | bits;
        if (key < a->check->first[TG_INDEX_CAST])
            a->check->first[TG_INDEX_CAST] = key, a->check->limit[TG_INDEX_CAST] = tg_index_cast_code(a->src_dt, a->dst_dt);
        return 1;
    }
    return 0;
}

static void cast_run(const void *p)
{
    const struct tg_cast_args *a = p;
    int64_t n = a->n;
    if (a->check && cast_scan(a)) return; /* refused: dst stays as it was */
    if (a->src_dt == a->dst_dt) {
        memmove(a->dst, a->src, (size_t)n * tg_dtype_size(a->dst_dt));
    } else if (a->src_dt == TG_F32 && a->dst_dt == TG_BF16) {
        const float *src = a->src;
        uint16_t *dst = a->dst;
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dst[i] = tg_f32_to_bf16(src[i]);
    } else if (a->src_dt == TG_BF16 && a->dst_dt == TG_F32) {
        const uint16_t *src = a->src;
        float *dst = a->dst;
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dst[i] = tg_bf16_to_f32(src[i]);
    } else {
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) st_any(a->dst, a->dst_dt, i, ld_any(a->src, a->src_dt, i));
    }
}

tg_status cpu_cast(tg_stream *s, const struct tg_cast_args *a)
{
    TG_TRY(check_dtype("cast", a->src_dt, 1));
    TG_TRY(check_dtype("cast", a->dst_dt, 1));
    return cpu_submit(s, cast_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ binary */
static inline float binop(tg_binop op, float x, float y)
{
    switch (op) {
    case TG_ADD: return x + y;
    case TG_SUB: return x - y;
    case TG_MUL: return x * y;
    default: return x / y;
    }
}

static void binary_run(const void *p)
{
    const struct tg_binary_args *a = p;
    int64_t n = a->n;
    tg_binop op = a->op;
    if (a->dt == TG_F32) {
        const float *x = a->a, *y = a->b;
        float *o = a->out; /* may alias x or y: element i reads before it writes */
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) o[i] = binop(op, x[i], y[i]);
    } else {
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) st_f32(a->out, a->dt, i, binop(op, ld_f32(a->a, a->dt, i), ld_f32(a->b, a->dt, i)));
    }
}

tg_status cpu_binary(tg_stream *s, const struct tg_binary_args *a)
{
    TG_TRY(check_dtype("binary", a->dt, 0));
    if ((unsigned)a->op > TG_DIV) return tg_error(TG_EINVAL, "cpu binary: unknown operation %d", (int)a->op);
    return cpu_submit(s, binary_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ axpby */
static void axpby_run(const void *p)
{
    const struct tg_axpby_args *a = p;
    int64_t n = a->n;
    float alpha = a->alpha, beta = a->beta;
    if (a->dt == TG_F32) {
        const float *x = a->x;
        float *y = a->y;
        if (beta == 0.0f) {
#pragma omp parallel for if (n > CPU_PAR_MIN)
            for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
        } else {
#pragma omp parallel for if (n > CPU_PAR_MIN)
            for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + beta * y[i];
        }
    } else {
#pragma omp parallel for if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float v = alpha * ld_f32(a->x, a->dt, i);
            if (beta != 0.0f) v += beta * ld_f32(a->y, a->dt, i);
            st_f32(a->y, a->dt, i, v);
        }
    }
}

tg_status cpu_axpby(tg_stream *s, const struct tg_axpby_args *a)
{
    TG_TRY(check_dtype("axpby", a->dt, 0));
    return cpu_submit(s, axpby_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ reductions */
/* The input is cut into at most RED_CHUNKS chunks whose size depends only on
 * n; chunk partials (double) are combined in order, so the result does not
 * depend on the number of threads. */
#define RED_CHUNKS 256
#define RED_MIN_CHUNK 4096

static void reduce_run(const void *p)
{
    const struct tg_reduce_args *a = p;
    int64_t n = a->n;
    int64_t chunk = (n + RED_CHUNKS - 1) / RED_CHUNKS;
    if (chunk < RED_MIN_CHUNK) chunk = RED_MIN_CHUNK;
    int nchunks = n > 0 ? (int)((n + chunk - 1) / chunk) : 0;
    double part[RED_CHUNKS];
    int nan_seen[RED_CHUNKS];

#pragma omp parallel for if (nchunks > 1) schedule(static)
    for (int c = 0; c < nchunks; c++) {
        int64_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double acc = 0;
        int nan = 0;
        for (int64_t i = lo; i < hi; i++) {
            double v = ld_f32(a->a, a->dt, i);
            switch (a->op) {
            case TG_REDUCE_SUM: acc += v; break;
            case TG_REDUCE_SUMSQ: acc += v * v; break;
            case TG_REDUCE_MAX_ABS:
            case TG_REDUCE_MAX_ABS_DIFF:
                if (a->op == TG_REDUCE_MAX_ABS_DIFF) v -= ld_f32(a->b, a->dt, i);
                if (isnan(v)) nan = 1;
                else if (fabs(v) > acc) acc = fabs(v);
                break;
            }
        }
        part[c] = acc;
        nan_seen[c] = nan;
    }

    double r = 0;
    int nan = 0;
    for (int c = 0; c < nchunks; c++) {
        if (a->op == TG_REDUCE_SUM || a->op == TG_REDUCE_SUMSQ) r += part[c];
        else if (part[c] > r) r = part[c];
        nan |= nan_seen[c];
    }
    *a->out = nan ? NAN : (float)r; /* a max over values with a NaN is NaN */
}

tg_status cpu_reduce(tg_stream *s, const struct tg_reduce_args *a)
{
    TG_TRY(check_dtype("reduce", a->dt, 0));
    if ((unsigned)a->op > TG_REDUCE_SUMSQ) return tg_error(TG_EINVAL, "cpu reduce: unknown operation %d", (int)a->op);
    return cpu_submit(s, reduce_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ rand (Philox4x32-10, see struct tg_rand_args) */
static inline double philox_unit(uint32_t w)
{
    return ((double)(w >> 8) + 0.5) * (1.0 / 16777216.0); /* in (0, 1) */
}

static void rand_run(const void *p)
{
    const struct tg_rand_args *a = p;
    int64_t n = a->n, nctr = (n + 3) / 4;
    const double two_pi = 6.283185307179586476925286766559;
#pragma omp parallel for if (n > CPU_PAR_MIN) schedule(static)
    for (int64_t c = 0; c < nctr; c++) {
        uint32_t w[4];
        double v[4];
        tg_philox4x32(a->seed, a->offset + (uint64_t)c, w);
        if (a->dist == TG_RAND_UNIFORM) {
            for (int j = 0; j < 4; j++) v[j] = a->a + (a->b - a->a) * philox_unit(w[j]);
        } else {
            for (int j = 0; j < 4; j += 2) {
                double r = sqrt(-2.0 * log(philox_unit(w[j]))), t = two_pi * philox_unit(w[j + 1]);
                v[j] = a->a + a->b * (r * cos(t));
                v[j + 1] = a->a + a->b * (r * sin(t));
            }
        }
        for (int j = 0; j < 4 && 4 * c + j < n; j++) st_f32(a->dst, a->dt, 4 * c + j, (float)v[j]);
    }
}

tg_status cpu_rand(tg_stream *s, const struct tg_rand_args *a)
{
    TG_TRY(check_dtype("rand", a->dt, 0));
    if (a->dist != TG_RAND_UNIFORM && a->dist != TG_RAND_NORMAL)
        return tg_error(TG_EINVAL, "cpu rand: unknown distribution %d", (int)a->dist);
    return cpu_submit(s, rand_run, a, sizeof *a);
}
