/* gemm-epilogues-match-unfused-ops.c — tg_gemm_ex's bias, bias+gelu (with aux), bias-grad and gelu-grad (dgelu) epilogues equal the GEMM followed by bias_add, gelu_forward, bias_backward_dw and gelu_backward (f32: same bits or 1e-6; bf16: one rounding), plain and batched, accumulating or not, on both CPU GEMM paths. */
#include "core/debug.h"
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* bf16 results of the fused path are rounded once, the unfused ones twice
 * (after the GEMM and after the bias / gelu): they differ by about one bf16
 * ulp (2^-8 relative) where they differ. */
#define BF16_TOL 1e-2
/* f32 gelu: same formula, same float operations; allow for a different
 * contraction of a*b+c by the compiler in the two files. */
#define F32_GELU_TOL 1e-6

static double err(const tg_tensor *got, const tg_tensor *want)
{
    size_t n = (size_t)tg_tensor_numel(want);
    double *g = nt_get(got), *w = nt_get(want);
    double e = nt_any_nan(g, n) ? INFINITY : nt_rel_max(g, w, n, 1e-3);
    free(g), free(w);
    return e;
}

static int same_bits(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = tg_tensor_bytes(a);
    void *x = malloc(n), *y = malloc(n);
    nt_check(tg_tensor_read(a, x, n), "read"), nt_check(tg_tensor_read(b, y, n), "read");
    int same = memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

static tg_tensor *rnd(tg_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *v = malloc((size_t)n * sizeof *v);
    nt_fill_uniform(v, (size_t)n, lo, hi);
    tg_tensor *t = nt_new(dt, ndim, shape, v);
    free(v);
    return t;
}

static tg_tensor *clone(const tg_tensor *t)
{
    tg_tensor *c = nt_new(t->dtype, t->ndim, t->shape, NULL);
    nt_check(tg_copy(c, t), "copy");
    return c;
}

/* A (batch,) m x k operand stored transposed or not; 2-D when batch == 0. */
static tg_tensor *operand(tg_dtype dt, int64_t batch, int64_t r, int64_t c)
{
    int64_t s3[3] = {batch, r, c};
    return batch ? rnd(dt, 3, s3, -1, 1) : rnd(dt, 2, s3 + 1, -1, 1);
}

/* Forward epilogues: C = epi(op(A) op(B) + beta C0) vs the unfused ops on a copy. */
static void forward_case(tg_dtype ab, tg_dtype cd, int64_t batch, int ta, int tb, double beta, const char *path)
{
    const int64_t m = 37, n = 40, k = 29;
    tg_tensor *a = ta ? operand(ab, batch, k, m) : operand(ab, batch, m, k);
    tg_tensor *b = tb ? operand(ab, 0, n, k) : operand(ab, 0, k, n);
    tg_tensor *c0 = operand(cd, batch, m, n), *bias = rnd(cd, 1, (const int64_t[]){n}, -1, 1);
    char what[160];
    snprintf(what, sizeof what, "%s: %s x %s -> %s%s%s, batch %lld, beta %g", path, tg_dtype_name(ab), tg_dtype_name(ab),
             tg_dtype_name(cd), ta ? " A^T" : "", tb ? " B^T" : "", (long long)batch, beta);

    /* BIAS */
    tg_tensor *fused = clone(c0), *ref = clone(c0);
    nt_check(tg_gemm_ex(fused, a, ta, b, tb, 1.0, beta, TG_EPI_BIAS, bias, NULL, NULL, 0), "gemm_ex bias");
    nt_check(tg_gemm(ref, a, ta, b, tb, 1.0, beta), "gemm"), nt_check(tg_bias_add(ref, bias), "bias_add");
    if (cd == TG_F32) ok(same_bits(fused, ref), "%s: bias epilogue = gemm + bias_add, same bits", what);
    else ok(err(fused, ref) <= BF16_TOL, "%s: bias epilogue = gemm + bias_add within bf16 rounding (%.2g)", what, err(fused, ref));

    /* the C that beta scales read from another tensor (a residual): the same bits as with C copied in first */
    tg_tensor *cin_out = clone(c0);
    nt_set(cin_out, NAN);
    nt_check(tg_gemm_in(cin_out, c0, a, ta, b, tb, 1.0, beta, TG_EPI_BIAS, bias, NULL, NULL, 0), "gemm_in bias");
    ok(same_bits(cin_out, fused), "%s: bias epilogue with C read from c_in = with C holding it, same bits", what);
    tg_tensor_free(cin_out);

    /* BIAS_GELU with aux: aux = the bias epilogue's value, C = gelu of it */
    tg_tensor *aux = nt_new(cd, c0->ndim, c0->shape, NULL), *g = clone(c0), *gref = clone(ref);
    nt_set(aux, NAN);
    nt_check(tg_gemm_ex(g, a, ta, b, tb, 1.0, beta, TG_EPI_BIAS_GELU, bias, aux, NULL, 0), "gemm_ex bias_gelu");
    nt_check(tg_gelu_forward(gref, ref), "gelu_forward");
    ok(same_bits(aux, fused), "%s: bias_gelu's aux holds the pre-activation (the bias epilogue's bits)", what);
    double e = err(g, gref);
    ok(e <= (cd == TG_F32 ? F32_GELU_TOL : BF16_TOL), "%s: bias_gelu = gemm + bias_add + gelu_forward (max rel %.2g)", what, e);
    /* and without aux, the same C */
    tg_tensor *g2 = clone(c0);
    nt_check(tg_gemm_ex(g2, a, ta, b, tb, 1.0, beta, TG_EPI_BIAS_GELU, bias, NULL, NULL, 0), "gemm_ex bias_gelu");
    ok(same_bits(g2, g), "%s: bias_gelu without aux gives the same C", what);

    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c0), tg_tensor_free(bias), tg_tensor_free(fused);
    tg_tensor_free(ref), tg_tensor_free(aux), tg_tensor_free(g), tg_tensor_free(gref), tg_tensor_free(g2);
}

/* DGELU: C = gelu'(aux) * (alpha op(A) op(B) + beta C0) vs the GEMM then gelu_backward(C, aux).
 * n = 40 gives rows whose length is a multiple of 8 (cuBLASLt's aux rule), n = 13 not. */
static void dgelu_case(tg_dtype ab, tg_dtype cd, int64_t batch, int ta, int tb, double alpha, double beta, int64_t n,
                       const char *path)
{
    const int64_t m = 35, k = 27;
    tg_tensor *a = ta ? operand(ab, batch, k, m) : operand(ab, batch, m, k);
    tg_tensor *b = tb ? operand(ab, 0, n, k) : operand(ab, 0, k, n);
    tg_tensor *c0 = operand(cd, batch, m, n);
    tg_tensor *aux = rnd(cd, c0->ndim, c0->shape, -4, 4); /* pre-activations across gelu's bend and tails */
    char what[200];
    snprintf(what, sizeof what, "%s: dgelu %s x %s -> %s%s%s, %lld x %lld, batch %lld, alpha %g, beta %g", path,
             tg_dtype_name(ab), tg_dtype_name(ab), tg_dtype_name(cd), ta ? " A^T" : "", tb ? " B^T" : "", (long long)m,
             (long long)n, (long long)batch, alpha, beta);
    tg_tensor *fused = clone(c0), *prod = clone(c0), *ref = nt_new(cd, c0->ndim, c0->shape, NULL);
    tg_tensor *aux_before = clone(aux);
    nt_check(tg_gemm_ex(fused, a, ta, b, tb, alpha, beta, TG_EPI_DGELU, NULL, aux, NULL, 0), "gemm_ex dgelu");
    nt_check(tg_gemm(prod, a, ta, b, tb, alpha, beta), "gemm");
    nt_check(tg_gelu_backward(ref, prod, aux), "gelu_backward");
    if (cd == TG_F32) ok(same_bits(fused, ref), "%s: = gemm + gelu_backward, same bits", what);
    else ok(err(fused, ref) <= BF16_TOL, "%s: = gemm + gelu_backward within bf16 rounding (%.2g)", what, err(fused, ref));
    ok(same_bits(aux, aux_before), "%s: aux is only read", what);
    /* C read from a separate C input: the same bits as with C holding it */
    tg_tensor *cin_out = clone(c0);
    nt_set(cin_out, NAN);
    nt_check(tg_gemm_in(cin_out, c0, a, ta, b, tb, alpha, beta, TG_EPI_DGELU, NULL, aux, NULL, 0), "gemm_in dgelu");
    ok(same_bits(cin_out, fused), "%s: with C read from c_in = with C holding it", what);
    /* and the derivative itself against float64 where it is exact enough to check (f32 C only) */
    if (cd == TG_F32) {
        size_t cnt = (size_t)tg_tensor_numel(c0);
        double *x = nt_get(aux), *v = nt_get(prod), *got = nt_get(fused), worst = 0;
        for (size_t i = 0; i < cnt; i++) {
            double u = 0.7978845608028654 * (x[i] + 0.044715 * x[i] * x[i] * x[i]), th = tanh(u);
            double d = 0.5 * (1 + th) + 0.5 * x[i] * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x[i] * x[i]);
            worst = fmax(worst, fabs(got[i] - v[i] * d) / fmax(fabs(v[i]), 1e-3)); /* d's error is absolute near its zero */
        }
        ok(worst < 1e-5, "%s: = gelu_tanh'(aux) * v in float64 (max err / |v| %.2g)", what, worst);
        free(x), free(v), free(got);
    }
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c0), tg_tensor_free(aux), tg_tensor_free(fused);
    tg_tensor_free(prod), tg_tensor_free(ref), tg_tensor_free(aux_before), tg_tensor_free(cin_out);
}

/* BGRAD on the wgrad pattern dW (out, in) = acc * dW + dy^T x: db = column sums of dy, vs bias_backward_dw. */
static void bgrad_case(tg_dtype ab, tg_dtype wd, tg_dtype bd, int64_t batch, double acc, const char *path)
{
    const int64_t rows = 45, out = 36, in = 20;
    tg_tensor *dy = operand(ab, batch, rows, out), *x = operand(ab, batch, rows, in);
    int64_t ws[3] = {batch, out, in}, bs[2] = {batch, out};
    tg_tensor *dw0 = batch ? rnd(wd, 3, ws, -1, 1) : rnd(wd, 2, ws + 1, -1, 1);
    tg_tensor *db0 = batch ? rnd(bd, 2, bs, -1, 1) : rnd(bd, 1, bs + 1, -1, 1);
    if (acc == 0) nt_set(dw0, NAN), nt_set(db0, NAN); /* overwriting ignores what was there */
    char what[160];
    snprintf(what, sizeof what, "%s: dy^T x, %s -> dW %s, db %s, batch %lld, accumulate %g", path, tg_dtype_name(ab),
             tg_dtype_name(wd), tg_dtype_name(bd), (long long)batch, acc);
    tg_tensor *dw = clone(dw0), *db = clone(db0), *dwr = clone(dw0), *dbr = clone(db0);
    nt_check(tg_gemm_ex(dw, dy, 1, x, 0, 1.0, acc, TG_EPI_BGRAD, NULL, NULL, db, acc), "gemm_ex bgrad");
    nt_check(tg_gemm(dwr, dy, 1, x, 0, 1.0, acc), "gemm");
    for (int64_t bi = 0; bi < (batch ? batch : 1); bi++) { /* bias_backward_dw per batch matrix */
        tg_tensor *dyb = dy, *dbb = dbr;
        if (batch) {
            nt_check(tg_tensor_view(dy, bi * rows * out, 2, (const int64_t[]){rows, out}, &dyb), "view");
            nt_check(tg_tensor_view(dbr, bi * out, 1, (const int64_t[]){out}, &dbb), "view");
        }
        nt_check(tg_bias_backward_dw(dbb, dyb, acc), "bias_backward_dw");
        if (batch) tg_tensor_free(dyb), tg_tensor_free(dbb);
    }
    ok(same_bits(dw, dwr), "%s: dW as the plain gemm", what);
    ok(same_bits(db, dbr), "%s: db = bias_backward_dw(dy), same bits", what);
    tg_tensor_free(dy), tg_tensor_free(x), tg_tensor_free(dw0), tg_tensor_free(db0);
    tg_tensor_free(dw), tg_tensor_free(db), tg_tensor_free(dwr), tg_tensor_free(dbr);
}

/* BGRAD of a non-transposed A sums its rows: checked against float64 sums. */
static void bgrad_rows_case(void)
{
    const int64_t m = 9, k = 70, n = 5;
    tg_tensor *a = operand(TG_F32, 0, m, k), *b = operand(TG_F32, 0, k, n);
    tg_tensor *c = nt_make(TG_F32, NULL, m, n), *db = nt_make(TG_F32, NULL, m);
    nt_set(db, 0.5);
    nt_check(tg_gemm_ex(c, a, 0, b, 0, 1.0, 0.0, TG_EPI_BGRAD, NULL, NULL, db, 2.0), "gemm_ex bgrad");
    double *av = nt_get(a), *got = nt_get(db), want[9], e = 0;
    for (int64_t i = 0; i < m; i++) {
        want[i] = 1.0;
        for (int64_t p = 0; p < k; p++) want[i] += av[i * k + p];
        e = fmax(e, fabs(got[i] - want[i]));
    }
    ok(e < 1e-5, "bgrad of a non-transposed A: 2 * db + row sums of A (max err %.2g)", e);
    free(av), free(got);
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c), tg_tensor_free(db);
}

static void errors(void)
{
    tg_tensor *a = nt_make(TG_F32, NULL, 4, 3), *b = nt_make(TG_F32, NULL, 3, 5), *c = nt_make(TG_F32, NULL, 4, 5);
    tg_tensor *bias4 = nt_make(TG_F32, NULL, 4), *bias5 = nt_make(TG_BF16, NULL, 5), *db = nt_make(TG_F32, NULL, 5);
    tg_tensor *aux = nt_make(TG_F32, NULL, 4, 5), *same = NULL;
    nt_check(tg_tensor_view(c, 0, 2, (const int64_t[]){4, 5}, &same), "view");
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_BIAS, bias4, NULL, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "[4]") && strstr(tg_last_error(), "[4,5]"),
       "a bias of the wrong length is refused, naming its shape and C's: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_BIAS, bias5, NULL, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "bf16"),
       "a bias of another dtype than C is refused: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_BIAS, NULL, NULL, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "needs a bias"),
       "the bias epilogue without a bias is refused");
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_BGRAD, NULL, NULL, db, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "(4)") && strstr(tg_last_error(), "[5]"),
       "a bgrad that is not one per row of op(A) is refused, naming the shapes: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_BIAS_GELU, bias4, same, NULL, 0) == TG_EINVAL,
       "an aux sharing C's memory is refused: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_NONE, NULL, aux, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "none"),
       "a tensor the epilogue does not use is refused: %s", tg_last_error());
    /* partial overlaps of C: a C input or an aux shifted by one row within one buffer */
    tg_tensor *buf = nt_make(TG_F32, NULL, 5, 5), *c_lo = NULL, *c_hi = NULL;
    nt_check(tg_tensor_view(buf, 0, 2, (const int64_t[]){4, 5}, &c_lo), "view");
    nt_check(tg_tensor_view(buf, 5, 2, (const int64_t[]){4, 5}, &c_hi), "view");
    ok(tg_gemm_in(c_hi, c_lo, a, 0, b, 0, 1, 1, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "partly overlaps"),
       "a C input partly overlapping C is refused: %s", tg_last_error());
    ok(tg_gemm_in(c_lo, c_lo, a, 0, b, 0, 1, 1, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_OK,
       "a C input that is exactly C is allowed");
    tg_tensor *bias5f = nt_make(TG_F32, NULL, 5);
    ok(tg_gemm_ex(c_hi, a, 0, b, 0, 1, 0, TG_EPI_BIAS_GELU, bias5f, c_lo, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "shares memory"),
       "an aux partly overlapping C is refused: %s", tg_last_error());
    tg_tensor_free(buf), tg_tensor_free(c_lo), tg_tensor_free(c_hi), tg_tensor_free(bias5f);
    ok(tg_gemm_in(c, bias4, a, 0, b, 0, 1, 1, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "C input") && strstr(tg_last_error(), "[4]") && strstr(tg_last_error(), "[4,5]"),
       "a C input of another shape is refused, naming both shapes: %s", tg_last_error());
    /* dgelu: aux is its input, C's shape and dtype, not C itself; no bias */
    tg_tensor *aux45 = nt_make(TG_F32, NULL, 5, 4), *aux16 = nt_make(TG_BF16, NULL, 4, 5);
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_DGELU, NULL, NULL, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "dgelu needs aux") && strstr(tg_last_error(), "[4,5]"),
       "dgelu without aux is refused, naming C's shape: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_DGELU, NULL, aux45, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "[5,4]") && strstr(tg_last_error(), "[4,5]"),
       "a dgelu aux of another shape is refused, naming both shapes: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_DGELU, NULL, aux16, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "bf16"),
       "a dgelu aux of another dtype than C is refused: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_DGELU, NULL, same, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "shares"),
       "a dgelu aux sharing C's memory is refused: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, TG_EPI_DGELU, bias5, aux, NULL, 0) == TG_EINVAL && strstr(tg_last_error(), "dgelu"),
       "a bias with dgelu is refused, naming the epilogue: %s", tg_last_error());
    ok(tg_gemm_ex(c, a, 0, b, 0, 1, 0, (tg_gemm_epilogue)(TG_EPI_DGELU + 1), NULL, NULL, NULL, 0) == TG_EINVAL &&
           strstr(tg_last_error(), "unknown epilogue"),
       "an epilogue past dgelu is refused: %s", tg_last_error());
    tg_tensor_free(aux45), tg_tensor_free(aux16);
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c), tg_tensor_free(bias4), tg_tensor_free(bias5);
    tg_tensor_free(db), tg_tensor_free(aux), tg_tensor_free(same);
}

int main(void)
{
    plan(NO_PLAN);
    static const char *paths[] = {"default", "blocked"};
    for (int p = 0; p < 2; p++) {
        tg_debug_set(TG_DEBUG_GEMM_BLOCKED, p); /* CBLAS (f32) off: the packed loop's epilogue */
        const tg_dtype types[][2] = {{TG_F32, TG_F32}, {TG_BF16, TG_BF16}, {TG_BF16, TG_F32}};
        for (int t = 0; t < 3; t++)
            for (int tr = 0; tr < 4; tr++) forward_case(types[t][0], types[t][1], 0, tr & 1, tr >> 1, 0.0, paths[p]);
        for (int t = 0; t < 3; t++) {
            forward_case(types[t][0], types[t][1], 3, 0, 1, 0.5, paths[p]);
            forward_case(types[t][0], types[t][1], 0, 1, 0, 1.0, paths[p]);
        }
        for (int t = 0; t < 3; t++) { /* dgelu: beta 0 and 1, batched, both aux row lengths, all transposes */
            for (int tr = 0; tr < 4; tr++) dgelu_case(types[t][0], types[t][1], 0, tr & 1, tr >> 1, 1.0, 0.0, 40, paths[p]);
            dgelu_case(types[t][0], types[t][1], 0, 0, 0, 1.0, 1.0, 40, paths[p]);
            dgelu_case(types[t][0], types[t][1], 0, 0, 1, 0.5, 1.0, 13, paths[p]);
            dgelu_case(types[t][0], types[t][1], 3, 0, 1, 1.0, 0.0, 40, paths[p]);
            dgelu_case(types[t][0], types[t][1], 3, 1, 0, 1.0, 1.0, 13, paths[p]);
        }
        for (int acc = 0; acc < 2; acc++) {
            bgrad_case(TG_F32, TG_F32, TG_F32, 0, acc, paths[p]);
            bgrad_case(TG_BF16, TG_F32, TG_F32, 0, acc, paths[p]);  /* fused main_grad */
            bgrad_case(TG_BF16, TG_BF16, TG_BF16, 0, acc, paths[p]); /* bf16 grads */
            bgrad_case(TG_BF16, TG_F32, TG_F32, 2, acc, paths[p]);
        }
    }
    bgrad_rows_case();
    errors();
    return done_testing();
}
