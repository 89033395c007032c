/* elementwise-ops.c — fill, binary ops, axpby, casts and reductions on f32 and bf16 match direct computation. */
#include "backend/backend.h"
#include "tap.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const tg_device cpu = {TG_CPU, 0};
static uint64_t rng = 0x853c49e6748fea9bull;

static double urand(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

static tg_tensor *vec(tg_dtype dt, int64_t n)
{
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, 1, &n, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

/* Random values (times scale, plus shift), as stored in t; returned as f32. */
static float *randomize(tg_tensor *t, double scale, double shift)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *d = malloc(n * sizeof *d);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) d[i] = scale * urand() + shift;
    if (tg_tensor_write_f64(t, d, n) != TG_OK || tg_tensor_read_f64(t, d, n) != TG_OK) bail_out("%s", tg_last_error());
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    free(d);
    return f;
}

static float *values(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *d = malloc(n * sizeof *d);
    float *f = malloc(n * sizeof *f);
    if (tg_tensor_read_f64(t, d, n) != TG_OK) bail_out("%s", tg_last_error());
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    free(d);
    return f;
}

/* What a kernel storing v in dt holds: bf16 rounds through f32. */
static float stored(tg_dtype dt, float v) { return dt == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(v)) : v; }

static int bit_equal(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

static float reduce_sumsq(const tg_tensor *t)
{
    float out = -1;
    struct tg_reduce_args r = {.op = TG_REDUCE_SUMSQ, .a = tg_tensor_data(t), .dt = tg_tensor_dtype(t),
                               .n = tg_tensor_numel(t), .out = &out};
    if (tg_backend_cpu.reduce(tg_stream_current(cpu), &r) != TG_OK) return NAN;
    return out;
}

static void check_dtype(tg_dtype dt, int64_t n)
{
    const char *dn = tg_dtype_name(dt);
    tg_tensor *a = vec(dt, n), *b = vec(dt, n), *o = vec(dt, n);
    float *av = randomize(a, 2, 0), *bv = randomize(b, 1, 1.5); /* b in [0.5, 2.5): safe to divide by */

    /* fill */
    ok(tg_fill(o, 0.1) == TG_OK, "%s n=%lld: fill 0.1", dn, (long long)n);
    float *ov = values(o);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !bit_equal(ov[i], stored(dt, 0.1f));
    is_int(bad, 0, "%s n=%lld: every element holds 0.1 as stored in %s", dn, (long long)n, dn);
    free(ov);

    /* binary */
    static const char *names[] = {"add", "sub", "mul", "div"};
    for (int op = TG_ADD; op <= TG_DIV; op++) {
        bad = 0;
        if (tg_binary((tg_binop)op, o, a, b) != TG_OK) bad = -1;
        ov = values(o);
        for (int64_t i = 0; i < n && bad >= 0; i++) {
            float x = av[i], y = bv[i];
            float want = stored(dt, op == TG_ADD ? x + y : op == TG_SUB ? x - y : op == TG_MUL ? x * y : x / y);
            if (!bit_equal(ov[i], want) && bad++ == 0) diag("%s[%lld]: got %.9g, want %.9g", names[op], (long long)i, ov[i], want);
        }
        is_int(bad, 0, "%s n=%lld: %s computes in f32 and rounds on store", dn, (long long)n, names[op]);
        free(ov);
    }

    /* in place: a = a * b */
    tg_tensor *a2 = vec(dt, n);
    tg_copy(a2, a);
    ok(tg_binary(TG_MUL, a2, a2, b) == TG_OK, "%s: in-place mul (out aliases a)", dn);
    ov = values(a2);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !bit_equal(ov[i], stored(dt, av[i] * bv[i]));
    is_int(bad, 0, "%s n=%lld: in-place mul is right", dn, (long long)n);
    free(ov);

    /* axpby: general, and beta == 0 over NaN */
    tg_copy(a2, b);
    ok(tg_axpby(a2, 0.75, a, -2.0) == TG_OK, "%s: axpby(y = 0.75 x - 2 y)", dn);
    ov = values(a2);
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = 0.75 * av[i] - 2.0 * bv[i], tol = (dt == TG_BF16 ? 0x1p-8 : 0x1p-22) * (fabs(0.75 * av[i]) + fabs(2.0 * bv[i]));
        bad += !(fabs(ov[i] - want) <= tol);
    }
    is_int(bad, 0, "%s n=%lld: axpby matches alpha*x + beta*y (f32 math, rounded on store)", dn, (long long)n);
    free(ov);
    tg_fill(a2, NAN);
    ok(tg_axpby(a2, 3.0, a, 0.0) == TG_OK, "%s: axpby with beta 0 on a NaN-filled y", dn);
    ov = values(a2);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !bit_equal(ov[i], stored(dt, 3.0f * av[i]));
    is_int(bad, 0, "%s n=%lld: beta 0 overwrites y (no NaN survives)", dn, (long long)n);
    free(ov);

    /* reductions */
    double sum = 0, sumsq = 0, maxabs = 0, maxdiff = 0, got = -1;
    for (int64_t i = 0; i < n; i++) {
        sum += av[i], sumsq += (double)av[i] * av[i];
        maxabs = fmax(maxabs, fabs(av[i]));
        maxdiff = fmax(maxdiff, fabs((double)av[i] - bv[i]));
    }
    ok(tg_sum(a, &got) == TG_OK, "%s: sum", dn);
    is_near(got, sum, 1e-6 * (fabs(sum) + 1), "%s n=%lld: sum matches the f64 sum (rounded to f32)", dn, (long long)n);
    ok(tg_max_abs(a, &got) == TG_OK, "%s: max_abs", dn);
    is_near(got, maxabs, 0, "%s n=%lld: max_abs is exact", dn, (long long)n);
    ok(tg_max_abs_diff(a, b, &got) == TG_OK, "%s: max_abs_diff", dn);
    is_near(got, maxdiff, 1e-6 * maxdiff, "%s n=%lld: max_abs_diff matches", dn, (long long)n);
    is_near(reduce_sumsq(a), sumsq, 1e-6 * sumsq, "%s n=%lld: backend sumsq matches", dn, (long long)n);

    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(o), tg_tensor_free(a2);
    free(av), free(bv);
}

int main(void)
{
    plan(NO_PLAN);
    static const int64_t sizes[] = {1, 7, 1000, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_dtype(TG_F32, sizes[i]);
        check_dtype(TG_BF16, sizes[i]);
    }

    /* Special values flow through IEEE f32 arithmetic. */
    tg_tensor *x = vec(TG_F32, 4), *y = vec(TG_F32, 4), *z = vec(TG_F32, 4);
    float xv[4] = {1, -1, 0, INFINITY}, yv[4] = {0, 0, 0, 2}, zv[4];
    tg_tensor_write(x, xv, sizeof xv), tg_tensor_write(y, yv, sizeof yv);
    ok(tg_binary(TG_DIV, z, x, y) == TG_OK && tg_tensor_read(z, zv, sizeof zv) == TG_OK, "div by zero runs");
    ok(zv[0] == INFINITY && zv[1] == -INFINITY && isnan(zv[2]) && zv[3] == INFINITY, "1/0 = Inf, -1/0 = -Inf, 0/0 = NaN, Inf/2 = Inf");
    double m = 0;
    ok(tg_max_abs(z, &m) == TG_OK && isnan(m), "max_abs of values with a NaN is NaN");
    ok(tg_sum(x, &m) == TG_OK && isinf(m), "sum with an Inf is Inf");

    /* Casts between integer and float tensors. */
    tg_tensor *ti = vec(TG_I32, 5), *tf = vec(TG_F32, 5), *tu = vec(TG_U16, 5);
    int32_t iv[5] = {1, -7, 123456789, 0, 2147483647};
    float fv[5];
    tg_tensor_write(ti, iv, sizeof iv);
    ok(tg_copy(tf, ti) == TG_OK && tg_tensor_read(tf, fv, sizeof fv) == TG_OK, "cast i32 -> f32");
    ok(fv[0] == 1 && fv[1] == -7 && fv[2] == 123456792.0f && fv[3] == 0 && fv[4] == 2147483648.0f,
       "i32 -> f32 rounds to nearest (123456789 -> 123456792)");
    /* Into an integer dtype a value that is not an integer of its range is refused, naming it and its index
     * (it was truncated, saturated, NaN made 0); the destination keeps its values. */
    const float bad_i32[] = {2.7f, -2.7f, 1e10f, NAN, -1e10f, INFINITY};
    const char *bad_i32_str[] = {"2.7 at index 2", "-2.7 at index 2", "1e+10 at index 2", "nan at index 2",
                                 "-1e+10 at index 2", "inf at index 2"};
    for (int k = 0; k < 6; k++) {
        float fb[5] = {1, 2, bad_i32[k], 4, 5};
        int32_t keep[5] = {9, 9, 9, 9, 9};
        tg_tensor_write(tf, fb, sizeof fb), tg_tensor_write(ti, keep, sizeof keep);
        ok(tg_copy(ti, tf) == TG_EINVAL, "cast f32 -> i32 of %g is refused", (double)bad_i32[k]);
        like(tg_last_error(), bad_i32_str[k], "... naming the value and its index");
        ok(tg_tensor_read(ti, iv, sizeof iv) == TG_OK && iv[0] == 9 && iv[4] == 9, "... and i32 keeps its values");
    }
    like(tg_last_error(), "copy: value inf at index 2 of the f32 source does not fit i32 (integers -2147483648 to 2147483647)",
         "the message names both dtypes and the range");
    float fs[5] = {2, -2, 2147483520.0f, 0, -2147483648.0f};
    tg_tensor_write(tf, fs, sizeof fs);
    ok(tg_copy(ti, tf) == TG_OK && tg_tensor_read(ti, iv, sizeof iv) == TG_OK, "cast f32 -> i32 of integers of the range");
    ok(iv[0] == 2 && iv[1] == -2 && iv[2] == 2147483520 && iv[3] == 0 && iv[4] == (int32_t)-2147483647 - 1,
       "f32 -> i32 converts them exactly (%d %d %d %d %d)", iv[0], iv[1], iv[2], iv[3], iv[4]);
    uint16_t uv[5] = {0, 1, 50257, 65535, 7};
    tg_tensor_write(tu, uv, sizeof uv);
    ok(tg_copy(tf, tu) == TG_OK && tg_tensor_read(tf, fv, sizeof fv) == TG_OK, "cast u16 -> f32");
    ok(fv[0] == 0 && fv[1] == 1 && fv[2] == 50257 && fv[3] == 65535 && fv[4] == 7, "u16 token ids widen exactly");
    ok(tg_copy(ti, tu) == TG_OK && tg_tensor_read(ti, iv, sizeof iv) == TG_OK && iv[2] == 50257 && iv[3] == 65535,
       "cast u16 -> i32 keeps token ids");
    float fneg[5] = {0, 70000, 12, 0, 65535};
    tg_tensor_write(tf, fneg, sizeof fneg);
    ok(tg_copy(tu, tf) == TG_EINVAL, "cast f32 -> u16 of 70000 is refused (it was clamped to 65535)");
    like(tg_last_error(), "value 70000 at index 1 of the f32 source does not fit u16 (integers 0 to 65535)", "... naming it");
    fneg[1] = -3;
    tg_tensor_write(tf, fneg, sizeof fneg);
    ok(tg_copy(tu, tf) == TG_EINVAL, "cast f32 -> u16 of -3 is refused");
    fneg[1] = 7;
    tg_tensor_write(tf, fneg, sizeof fneg);
    ok(tg_copy(tu, tf) == TG_OK && tg_tensor_read(tu, uv, sizeof uv) == TG_OK && uv[1] == 7 && uv[2] == 12 && uv[4] == 65535,
       "f32 -> u16 converts integers of [0, 65535] exactly");
    int32_t iw[5] = {0, 65535, 65536, -1, 3};
    tg_tensor_write(ti, iw, sizeof iw);
    ok(tg_copy(tu, ti) == TG_EINVAL, "cast i32 -> u16 of 65536 is refused");
    like(tg_last_error(), "value 65536 at index 2 of the i32 source does not fit u16", "... naming the first one, not -1 after it");

    /* Reductions do not depend on the thread count. */
    tg_tensor *big = vec(TG_F32, 1 << 20);
    free(randomize(big, 1, 0.1));
    double s1 = 0, s2 = 0;
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    tg_sum(big, &s1);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    tg_sum(big, &s2);
    ok(s1 == s2, "sum of 2^20 elements is bitwise the same on 1 and 2 threads (%.9g %.9g)", s1, s2);

    /* Refusals. */
    tg_tensor *w = vec(TG_F32, 3), *wb = vec(TG_BF16, 4);
    is_int(tg_binary(TG_ADD, x, x, w), TG_EINVAL, "add of [4] and [3] is refused");
    like(tg_last_error(), "[3]", "the message names the shapes");
    is_int(tg_binary(TG_ADD, x, x, wb), TG_EINVAL, "add of f32 and bf16 is refused");
    is_int(tg_binary(TG_ADD, ti, ti, ti), TG_EINVAL, "add of i32 tensors is refused");
    is_int(tg_axpby(w, 1, x, 1), TG_EINVAL, "axpby of [3] and [4] is refused");
    is_int(tg_copy(w, x), TG_EINVAL, "copy of 4 elements into 3 is refused");
    struct tg_fill_args fa = {.dst = tg_tensor_data(x), .dt = TG_F16, .n = 4, .value = 1};
    is_int(tg_backend_cpu.fill(tg_stream_current(cpu), &fa), TG_ENOTSUP, "the CPU fill kernel refuses f16");

    tg_tensor_free(x), tg_tensor_free(y), tg_tensor_free(z), tg_tensor_free(ti), tg_tensor_free(tf), tg_tensor_free(tu);
    tg_tensor_free(big), tg_tensor_free(w), tg_tensor_free(wb);
    return done_testing();
}
