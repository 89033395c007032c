/* nn-ops-util.c — helpers shared by the nn-ops tests (see nn-ops-util.h). */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const tg_device nt_cpu = {TG_CPU, 0};

static uint64_t nt_state = 0x9e3779b97f4a7c15ull;

double nt_uniform(double lo, double hi)
{
    nt_state ^= nt_state << 13, nt_state ^= nt_state >> 7, nt_state ^= nt_state << 17; /* xorshift64 */
    return lo + (hi - lo) * (double)(nt_state >> 11) * (1.0 / 9007199254740992.0);
}

void nt_fill_uniform(double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = nt_uniform(lo, hi);
}

void nt_round(double *x, size_t n, tg_dtype dt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = dt == TG_BF16 ? (double)tg_bf16_to_f32(tg_f32_to_bf16((float)x[i])) : (double)(float)x[i];
}

void nt_check(tg_status st, const char *what)
{
    if (st != TG_OK) bail_out("%s: %s", what, tg_last_error());
}

tg_tensor *nt_new(tg_dtype dt, int ndim, const int64_t *shape, const double *vals)
{
    tg_tensor *t = NULL;
    nt_check(tg_tensor_new(dt, ndim, shape, nt_cpu, &t), "tg_tensor_new");
    if (vals) nt_check(tg_tensor_write_f64(t, vals, (size_t)tg_tensor_numel(t)), "tg_tensor_write_f64");
    return t;
}

tg_tensor *nt_matrix(tg_dtype dt, int64_t r, int64_t c)
{
    const int64_t shape[2] = {r, c};
    return nt_new(dt, c ? 2 : 1, shape, NULL);
}

tg_tensor *nt_scalar(float v) { return nt_make(TG_F32, (const double[]){v}, 1); }

int nt_same_bytes(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = tg_tensor_bytes(a);
    unsigned char *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    nt_check(tg_tensor_read(a, x, n), "tg_tensor_read");
    int same = n == tg_tensor_bytes(b);
    if (same) nt_check(tg_tensor_read(b, y, n), "tg_tensor_read");
    same = same && memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

float nt_read_f32(const tg_tensor *t)
{
    float v;
    nt_check(tg_tensor_read(t, &v, sizeof v), "tg_tensor_read");
    return v;
}

tg_tensor *nt_ids(int ndim, const int64_t *shape, const int32_t *ids)
{
    tg_tensor *t = nt_new(TG_I32, ndim, shape, NULL);
    nt_check(tg_tensor_write(t, ids, tg_tensor_bytes(t)), "tg_tensor_write");
    return t;
}

double *nt_get(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) bail_out("out of memory");
    nt_check(tg_tensor_read_f64(t, x, n), "tg_tensor_read_f64");
    return x;
}

void nt_append(double **buf, size_t *n, const tg_tensor *t)
{
    size_t k = (size_t)tg_tensor_numel(t);
    double *v = nt_get(t), *grown = realloc(*buf, (*n + k) * sizeof *grown);
    if (!grown) bail_out("out of memory");
    memcpy(grown + *n, v, k * sizeof *v);
    *buf = grown, *n += k;
    free(v);
}

void nt_set(tg_tensor *t, double v) { nt_check(tg_fill(t, v), "tg_fill"); }

double nt_rel_max(const double *got, const double *want, size_t n, double floor)
{
    double e = 0, m = floor;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (!(d <= e)) e = d; /* NaN wins */
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return e / m;
}

double nt_rel_l2(const double *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

int nt_any_nan(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}
