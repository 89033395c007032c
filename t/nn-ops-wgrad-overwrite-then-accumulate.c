/* nn-ops-wgrad-overwrite-then-accumulate.c — every wgrad op overwrites its output with accumulate 0 (even when it holds NaN) and adds with accumulate 1, into f32 main_grad or a grad of the param dtype. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 3, C = 6, V = 5, TMAX = 5, N = B * T };

/* Inputs of activation dtype `dt` for all wgrad ops. */
static tg_tensor *x, *dy, *mean, *rstd, *idx;
static const int32_t ids[N] = {4, 1, 4, 0, 4, 1};

static void make_inputs(tg_dtype dt)
{
    double xv[N * C], dyv[N * C];
    nt_fill_uniform(xv, N * C, -2, 2);
    nt_fill_uniform(dyv, N * C, -1, 1);
    x = nt_make(dt, xv, B, T, C), dy = nt_make(dt, dyv, B, T, C);
    mean = nt_make(TG_F32, NULL, N), rstd = nt_make(TG_F32, NULL, N);
    idx = nt_ids(2, (const int64_t[]){B, T}, ids);
    tg_tensor *g = nt_make(dt, NULL, C), *y = nt_make(dt, NULL, B, T, C);
    nt_set(g, 1);
    nt_check(tg_layernorm_forward(y, mean, rstd, x, g, NULL, 1e-5), "layernorm_forward");
    tg_tensor_free(g), tg_tensor_free(y);
}

static void free_inputs(void)
{
    tg_tensor_free(x), tg_tensor_free(dy), tg_tensor_free(mean), tg_tensor_free(rstd), tg_tensor_free(idx);
}

/* A wgrad op writing one or two outputs. */
typedef tg_status (*wgrad_fn)(tg_tensor *o1, tg_tensor *o2, double acc);
static tg_status ln_dw(tg_tensor *o1, tg_tensor *o2, double acc) { return tg_layernorm_backward_dw(o1, o2, dy, x, mean, rstd, acc); }
static tg_status rms_dw(tg_tensor *o1, tg_tensor *o2, double acc) { return tg_rmsnorm_backward_dw(o1, dy, x, rstd, acc); }
static tg_status bias_dw(tg_tensor *o1, tg_tensor *o2, double acc) { return tg_bias_backward_dw(o1, dy, acc); }
static tg_status emb_dw(tg_tensor *o1, tg_tensor *o2, double acc) { return tg_embedding_backward_dw(o1, o2, dy, idx, acc); }

static int same_bits(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = tg_tensor_bytes(a);
    char *p = malloc(n), *q = malloc(n);
    nt_check(tg_tensor_read(a, p, n), "read");
    nt_check(tg_tensor_read(b, q, n), "read");
    int same = memcmp(p, q, n) == 0;
    free(p), free(q);
    return same;
}

/* max |got - want| / max(1, |want|) */
static double err(const tg_tensor *t, const double *want)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *got = nt_get(t), e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(d <= e)) e = d;
    }
    free(got);
    return e;
}

static void check_op(const char *op, wgrad_fn fn, int nout, const int64_t shapes[2][2], tg_dtype odt)
{
    const char *dn = tg_dtype_name(odt);
    const double tol = odt == TG_BF16 ? 1.0 / 128 : 1e-6; /* one rounding of the output dtype */
    tg_tensor *ref[2] = {0}, *out[2] = {0};
    double *g[2] = {0}, *want[2] = {0};
    for (int k = 0; k < nout; k++) {
        ref[k] = nt_new(odt, shapes[k][1] ? 2 : 1, shapes[k], NULL);
        out[k] = nt_new(odt, shapes[k][1] ? 2 : 1, shapes[k], NULL);
        nt_set(ref[k], 0);
    }
    /* the gradient itself: 0 + g with accumulate 1 */
    ok(fn(ref[0], nout > 1 ? ref[1] : NULL, 1) == TG_OK, "%s (%s out): accumulate 1 into zeros runs", op, dn);
    for (int k = 0; k < nout; k++) g[k] = nt_get(ref[k]), want[k] = malloc((size_t)tg_tensor_numel(ref[k]) * sizeof(double));

    /* accumulate 0 over NaN: overwrites, bit-identical to 0 + g */
    for (int k = 0; k < nout; k++) nt_set(out[k], NAN);
    ok(fn(out[0], nout > 1 ? out[1] : NULL, 0) == TG_OK, "%s (%s out): accumulate 0 runs", op, dn);
    for (int k = 0; k < nout; k++) {
        double *v = nt_get(out[k]);
        ok(!nt_any_nan(v, (size_t)tg_tensor_numel(out[k])), "%s (%s out %d): accumulate 0 over NaN leaves no NaN", op, dn, k);
        ok(same_bits(out[k], ref[k]), "%s (%s out %d): accumulate 0 over NaN gives exactly the gradient", op, dn, k);
        free(v);
    }

    /* accumulate 1 adds: g + g, then from a constant 0.75: 0.75 + g */
    ok(fn(out[0], nout > 1 ? out[1] : NULL, 1) == TG_OK, "%s (%s out): accumulate 1 runs", op, dn);
    for (int k = 0; k < nout; k++) {
        for (int64_t i = 0; i < tg_tensor_numel(out[k]); i++) want[k][i] = 2 * g[k][i];
        double e = err(out[k], want[k]);
        ok(e <= tol, "%s (%s out %d): accumulate 1 after a wgrad gives 2 g (error %.1e)", op, dn, k, e);
        nt_set(out[k], 0.75);
    }
    ok(fn(out[0], nout > 1 ? out[1] : NULL, 1) == TG_OK, "%s (%s out): accumulate 1 onto 0.75 runs", op, dn);
    for (int k = 0; k < nout; k++) {
        for (int64_t i = 0; i < tg_tensor_numel(out[k]); i++) want[k][i] = 0.75 + g[k][i];
        double e = err(out[k], want[k]);
        ok(e <= tol, "%s (%s out %d): accumulate 1 onto 0.75 gives 0.75 + g (error %.1e)", op, dn, k, e);
    }

    /* and accumulate 0 again starts over */
    ok(fn(out[0], nout > 1 ? out[1] : NULL, 0) == TG_OK, "%s (%s out): accumulate 0 again runs", op, dn);
    for (int k = 0; k < nout; k++) ok(same_bits(out[k], ref[k]), "%s (%s out %d): accumulate 0 starts over", op, dn, k);

    for (int k = 0; k < nout; k++) tg_tensor_free(ref[k]), tg_tensor_free(out[k]), free(g[k]), free(want[k]);
}

static void check_all(tg_dtype act, tg_dtype odt)
{
    const int64_t vec[2][2] = {{C, 0}, {C, 0}}, emb[2][2] = {{V, C}, {TMAX, C}};
    make_inputs(act);
    diag("activations %s, wgrad outputs %s", tg_dtype_name(act), tg_dtype_name(odt));
    check_op("layernorm_backward_dw", ln_dw, 2, vec, odt);
    check_op("rmsnorm_backward_dw", rms_dw, 1, vec, odt);
    check_op("bias_backward_dw", bias_dw, 1, vec, odt);
    check_op("embedding_backward_dw", emb_dw, 2, emb, odt);
    free_inputs();
}

/* dwpe rows >= T and dwte rows of unused ids: 0 with accumulate 0, unchanged with accumulate 1. */
static void check_untouched_rows(void)
{
    make_inputs(TG_F32);
    tg_tensor *dwte = nt_make(TG_F32, NULL, V, C), *dwpe = nt_make(TG_F32, NULL, TMAX, C);
    nt_set(dwte, NAN), nt_set(dwpe, NAN);
    nt_check(tg_embedding_backward_dw(dwte, dwpe, dy, idx, 0), "embedding_backward_dw");
    double *te = nt_get(dwte), *pe = nt_get(dwpe);
    int zero = 1;
    for (int j = 0; j < C; j++) zero &= te[2 * C + j] == 0 && te[3 * C + j] == 0 && pe[3 * C + j] == 0 && pe[4 * C + j] == 0;
    ok(zero, "embedding_backward_dw: unused wte rows and wpe rows >= T are 0 after accumulate 0 over NaN");
    free(te), free(pe);
    nt_set(dwte, 0.5), nt_set(dwpe, 0.5);
    nt_check(tg_embedding_backward_dw(dwte, dwpe, dy, idx, 1), "embedding_backward_dw");
    te = nt_get(dwte), pe = nt_get(dwpe);
    int kept = 1;
    for (int j = 0; j < C; j++) kept &= te[2 * C + j] == 0.5 && te[3 * C + j] == 0.5 && pe[3 * C + j] == 0.5 && pe[4 * C + j] == 0.5;
    ok(kept, "embedding_backward_dw: unused wte rows and wpe rows >= T keep their value with accumulate 1");
    free(te), free(pe);
    tg_tensor_free(dwte), tg_tensor_free(dwpe);
    free_inputs();
}

int main(void)
{
    plan(NO_PLAN);
    check_all(TG_F32, TG_F32);
    check_all(TG_BF16, TG_F32);  /* bf16 module, fused wgrad accumulation into main_grad */
    check_all(TG_BF16, TG_BF16); /* bf16 module, grad in the param dtype */
    check_untouched_rows();
    return done_testing();
}
