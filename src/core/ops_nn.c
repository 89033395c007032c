/* ops_nn.c — the transformer op layer: checks shapes, dtypes and devices, then issues one backend kernel on the current stream. */
#include "core/ops_nn.h"
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ checks
 * Each helper returns TG_OK or sets a message "op: what" and returns TG_EINVAL.
 * Tensors appear in messages as "x [4,7] f32". */

static const char *desc(const tg_tensor *t, char *buf, size_t n)
{
    char sh[64];
    snprintf(buf, n, "%s %s", tg_tensor_shape_str(t, sh, sizeof sh), tg_dtype_name(t->dtype));
    return buf;
}

static int same_dev(const tg_tensor *a, const tg_tensor *b)
{
    tg_device x = tg_tensor_device(a), y = tg_tensor_device(b);
    return x.type == y.type && x.index == y.index;
}

static int float_dtype(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16; }

static tg_status need(const char *op, const char *name, const tg_tensor *t)
{
    if (!t) return tg_error(TG_EINVAL, "%s: %s is NULL", op, name);
    return TG_OK;
}

/* t is on ref's device. */
static tg_status on_dev(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t)
{
    char a[32], b[32], x[96], y[96];
    if (same_dev(ref, t)) return TG_OK;
    return tg_error(TG_EINVAL, "%s: tensors on different devices (%s %s on %s vs %s %s on %s)", op, rn,
                    desc(ref, x, sizeof x), tg_device_str(tg_tensor_device(ref), a, sizeof a), name,
                    desc(t, y, sizeof y), tg_device_str(tg_tensor_device(t), b, sizeof b));
}

/* An activation: f32 or bf16, at least 1-D. */
static tg_status activation(const char *op, const char *name, const tg_tensor *t)
{
    char x[96];
    TG_TRY(need(op, name, t));
    if (!float_dtype(t->dtype) || t->ndim < 1)
        return tg_error(TG_EINVAL, "%s: %s %s must be an f32 or bf16 tensor", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* b has a's shape, dtype and device. */
static tg_status like(const char *op, const char *an, const tg_tensor *a, const char *bn, const tg_tensor *b)
{
    char x[96], y[96];
    TG_TRY(need(op, bn, b));
    TG_TRY(on_dev(op, an, a, bn, b));
    if (!tg_tensor_same_shape(a, b) || a->dtype != b->dtype)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (same shape and dtype expected)", op, an, desc(a, x, sizeof x), bn,
                        desc(b, y, sizeof y));
    return TG_OK;
}

/* v is a 1-D vector [c] of dtype dt on ref's device (dt < 0: f32 or ref's dtype, a wgrad output). */
static tg_status vec(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *v,
                     int64_t c, int dt)
{
    char x[96], y[96];
    TG_TRY(need(op, name, v));
    TG_TRY(on_dev(op, rn, ref, name, v));
    int dt_ok = dt >= 0 ? v->dtype == (tg_dtype)dt : (v->dtype == TG_F32 || v->dtype == ref->dtype);
    if (v->ndim != 1 || v->shape[0] != c || !dt_ok)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s [%lld] %s expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(v, y, sizeof y), name, (long long)c,
                        dt >= 0 ? tg_dtype_name((tg_dtype)dt)
                                : ref->dtype == TG_F32 ? "f32" : "f32 or bf16");
    return TG_OK;
}

/* A wgrad output of `ndim` dims `shape`: f32 or ref's dtype. */
static tg_status wgrad_out(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *w,
                           int ndim, const int64_t *shape)
{
    char x[96], y[96], want[64];
    TG_TRY(need(op, name, w));
    TG_TRY(on_dev(op, rn, ref, name, w));
    int ok = w->ndim == ndim && (w->dtype == TG_F32 || w->dtype == ref->dtype);
    for (int i = 0; ok && i < ndim; i++) ok = w->shape[i] == shape[i];
    if (ok) return TG_OK;
    int k = snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim; i++) k += snprintf(want + k, sizeof want - (size_t)k, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(want + k, sizeof want - (size_t)k, "]");
    return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s %s %s expected)", op, rn, desc(ref, x, sizeof x), name,
                    desc(w, y, sizeof y), name, want, ref->dtype == TG_F32 ? "f32" : "f32 or bf16");
}

/* A per-row statistic: f32 with n elements (any shape) on ref's device. */
static tg_status stat(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *s,
                      int64_t n)
{
    char x[96], y[96];
    TG_TRY(need(op, name, s));
    TG_TRY(on_dev(op, rn, ref, name, s));
    if (s->dtype != TG_F32 || tg_tensor_numel(s) != n)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s of %lld f32 expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(s, y, sizeof y), name, (long long)n);
    return TG_OK;
}

/* An index tensor: i32 with n elements on ref's device. */
static tg_status ids(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t,
                     int64_t n)
{
    char x[96], y[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, rn, ref, name, t));
    if (t->dtype != TG_I32 || tg_tensor_numel(t) != n)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s of %lld i32 expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(t, y, sizeof y), name, (long long)n);
    return TG_OK;
}

static tg_status finite_arg(const char *op, const char *name, double v)
{
    if (!isfinite(v)) return tg_error(TG_EINVAL, "%s: %s = %g is not finite", op, name, v);
    return TG_OK;
}

static tg_status kernel(const char *op, tg_stream *s, const void *fn)
{
    if (!fn) return tg_error(TG_ENOTSUP, "%s is not implemented by the %s backend", op, s->be->name);
    return TG_OK;
}

static int64_t cols(const tg_tensor *t) { return t->shape[t->ndim - 1]; }
static int64_t rows(const tg_tensor *t) { return cols(t) ? tg_tensor_numel(t) / cols(t) : 0; }

/* The current stream of t's device, or an error. */
static tg_status stream_for(const char *op, const char *name, const tg_tensor *t, tg_stream **s)
{
    TG_TRY(need(op, name, t));
    *s = tg_stream_current(tg_tensor_device(t));
    if (!*s) return TG_ENOMEM; /* message set by tg_stream_current */
    return TG_OK;
}

/* Runs the checks in `checks` (a status expression chain), then the kernel; notes errors on s. */
#define ISSUE(s, op, fn, args, checks)                                                                 \
    do {                                                                                               \
        tg_status st_ = (checks);                                                                      \
        if (st_ == TG_OK) st_ = kernel(op, s, (const void *)(s)->be->fn);                              \
        if (st_ == TG_OK) st_ = (s)->be->fn(s, args);                                                  \
        return tg_stream_note_error(s, st_);                                                           \
    } while (0)

/* ------------------------------------------------------------------ layernorm */
static tg_status layernorm_forward_check(tg_tensor *y, tg_tensor *mean, tg_tensor *rstd, const tg_tensor *x,
                                         const tg_tensor *gamma, const tg_tensor *beta, double eps)
{
    const char *op = "layernorm_forward";
    TG_TRY(activation(op, "x", x));
    TG_TRY(like(op, "x", x, "y", y));
    TG_TRY(vec(op, "x", x, "gamma", gamma, cols(x), x->dtype));
    if (beta) TG_TRY(vec(op, "x", x, "beta", beta, cols(x), x->dtype));
    TG_TRY(stat(op, "x", x, "mean", mean, rows(x)));
    TG_TRY(stat(op, "x", x, "rstd", rstd, rows(x)));
    if (!(eps >= 0) || !isfinite(eps)) return tg_error(TG_EINVAL, "%s: eps = %g must be finite and >= 0", op, eps);
    return TG_OK;
}

tg_status tg_layernorm_forward(tg_tensor *y, tg_tensor *mean, tg_tensor *rstd, const tg_tensor *x,
                               const tg_tensor *gamma, const tg_tensor *beta, double eps)
{
    tg_stream *s;
    TG_TRY(stream_for("layernorm_forward", "x", x, &s));
    tg_status st = layernorm_forward_check(y, mean, rstd, x, gamma, beta, eps);
    struct tg_layernorm_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_layernorm_forward_args){
            .y = tg_tensor_data(y), .mean = tg_tensor_data(mean), .rstd = tg_tensor_data(rstd),
            .x = tg_tensor_data(x), .gamma = tg_tensor_data(gamma), .beta = beta ? tg_tensor_data(beta) : NULL,
            .dt = x->dtype, .n = rows(x), .c = cols(x), .eps = (float)eps};
    ISSUE(s, "layernorm_forward", layernorm_forward, &a, st);
}

/* has_mean: layernorm (mean required) rather than rmsnorm (no mean). dres may be NULL. */
static tg_status norm_backward_check(const char *op, int has_mean, tg_tensor *dx, const tg_tensor *dy,
                                     const tg_tensor *dres, const tg_tensor *x, const tg_tensor *gamma,
                                     const tg_tensor *mean, const tg_tensor *rstd)
{
    TG_TRY(activation(op, "x", x));
    TG_TRY(like(op, "x", x, "dy", dy));
    TG_TRY(like(op, "x", x, "dx", dx));
    if (dres) TG_TRY(like(op, "x", x, "dres", dres));
    TG_TRY(vec(op, "x", x, "gamma", gamma, cols(x), x->dtype));
    if (has_mean) TG_TRY(stat(op, "x", x, "mean", mean, rows(x)));
    TG_TRY(stat(op, "x", x, "rstd", rstd, rows(x)));
    return TG_OK;
}

tg_status tg_layernorm_backward_res(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *dres, const tg_tensor *x,
                                    const tg_tensor *gamma, const tg_tensor *mean, const tg_tensor *rstd)
{
    tg_stream *s;
    TG_TRY(stream_for("layernorm_backward", "x", x, &s));
    tg_status st = norm_backward_check("layernorm_backward", 1, dx, dy, dres, x, gamma, mean, rstd);
    struct tg_layernorm_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_layernorm_backward_args){
            .dx = tg_tensor_data(dx), .dy = tg_tensor_data(dy), .x = tg_tensor_data(x),
            .dres = dres ? tg_tensor_data(dres) : NULL, .gamma = tg_tensor_data(gamma), .mean = tg_tensor_data(mean),
            .rstd = tg_tensor_data(rstd), .dt = x->dtype, .n = rows(x), .c = cols(x)};
    ISSUE(s, "layernorm_backward", layernorm_backward, &a, st);
}

tg_status tg_layernorm_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *gamma,
                                const tg_tensor *mean, const tg_tensor *rstd)
{
    return tg_layernorm_backward_res(dx, dy, NULL, x, gamma, mean, rstd);
}

static tg_status norm_backward_dw_check(const char *op, int has_mean, tg_tensor *dgamma, tg_tensor *dbeta,
                                        const tg_tensor *dy, const tg_tensor *x, const tg_tensor *mean,
                                        const tg_tensor *rstd, double accumulate)
{
    int64_t c;
    TG_TRY(activation(op, "x", x));
    TG_TRY(like(op, "x", x, "dy", dy));
    c = cols(x);
    TG_TRY(wgrad_out(op, "x", x, "dgamma", dgamma, 1, &c));
    if (dbeta) TG_TRY(wgrad_out(op, "x", x, "dbeta", dbeta, 1, &c));
    if (has_mean) TG_TRY(stat(op, "x", x, "mean", mean, rows(x)));
    TG_TRY(stat(op, "x", x, "rstd", rstd, rows(x)));
    return finite_arg(op, "accumulate", accumulate);
}

tg_status tg_layernorm_backward_dw(tg_tensor *dgamma, tg_tensor *dbeta, const tg_tensor *dy, const tg_tensor *x,
                                   const tg_tensor *mean, const tg_tensor *rstd, double accumulate)
{
    tg_stream *s;
    TG_TRY(stream_for("layernorm_backward_dw", "dgamma", dgamma, &s));
    tg_status st = norm_backward_dw_check("layernorm_backward_dw", 1, dgamma, dbeta, dy, x, mean, rstd, accumulate);
    struct tg_layernorm_backward_dw_args a = {0};
    if (st == TG_OK && dbeta && dbeta->dtype != dgamma->dtype)
        st = tg_error(TG_EINVAL, "layernorm_backward_dw: dgamma is %s but dbeta is %s (one dtype expected)",
                      tg_dtype_name(dgamma->dtype), tg_dtype_name(dbeta->dtype));
    if (st == TG_OK)
        a = (struct tg_layernorm_backward_dw_args){
            .dgamma = tg_tensor_data(dgamma), .dbeta = dbeta ? tg_tensor_data(dbeta) : NULL, .dy = tg_tensor_data(dy),
            .x = tg_tensor_data(x), .mean = tg_tensor_data(mean), .rstd = tg_tensor_data(rstd), .dt = x->dtype,
            .dw_dt = dgamma->dtype, .n = rows(x), .c = cols(x), .accumulate = (float)accumulate};
    ISSUE(s, "layernorm_backward_dw", layernorm_backward_dw, &a, st);
}

/* ------------------------------------------------------------------ rmsnorm */
static tg_status rmsnorm_forward_check(tg_tensor *y, tg_tensor *rstd, const tg_tensor *x, const tg_tensor *gamma,
                                       double eps)
{
    const char *op = "rmsnorm_forward";
    TG_TRY(activation(op, "x", x));
    TG_TRY(like(op, "x", x, "y", y));
    TG_TRY(vec(op, "x", x, "gamma", gamma, cols(x), x->dtype));
    TG_TRY(stat(op, "x", x, "rstd", rstd, rows(x)));
    if (!(eps >= 0) || !isfinite(eps)) return tg_error(TG_EINVAL, "%s: eps = %g must be finite and >= 0", op, eps);
    return TG_OK;
}

tg_status tg_rmsnorm_forward(tg_tensor *y, tg_tensor *rstd, const tg_tensor *x, const tg_tensor *gamma, double eps)
{
    tg_stream *s;
    TG_TRY(stream_for("rmsnorm_forward", "x", x, &s));
    tg_status st = rmsnorm_forward_check(y, rstd, x, gamma, eps);
    struct tg_rmsnorm_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_rmsnorm_forward_args){.y = tg_tensor_data(y), .rstd = tg_tensor_data(rstd), .x = tg_tensor_data(x),
                                             .gamma = tg_tensor_data(gamma), .dt = x->dtype, .n = rows(x),
                                             .c = cols(x), .eps = (float)eps};
    ISSUE(s, "rmsnorm_forward", rmsnorm_forward, &a, st);
}

tg_status tg_rmsnorm_backward_res(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *dres, const tg_tensor *x,
                                  const tg_tensor *gamma, const tg_tensor *rstd)
{
    tg_stream *s;
    TG_TRY(stream_for("rmsnorm_backward", "x", x, &s));
    tg_status st = norm_backward_check("rmsnorm_backward", 0, dx, dy, dres, x, gamma, NULL, rstd);
    struct tg_rmsnorm_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_rmsnorm_backward_args){.dx = tg_tensor_data(dx), .dy = tg_tensor_data(dy), .x = tg_tensor_data(x),
                                              .dres = dres ? tg_tensor_data(dres) : NULL,
                                              .gamma = tg_tensor_data(gamma), .rstd = tg_tensor_data(rstd),
                                              .dt = x->dtype, .n = rows(x), .c = cols(x)};
    ISSUE(s, "rmsnorm_backward", rmsnorm_backward, &a, st);
}

tg_status tg_rmsnorm_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *gamma,
                              const tg_tensor *rstd)
{
    return tg_rmsnorm_backward_res(dx, dy, NULL, x, gamma, rstd);
}

tg_status tg_rmsnorm_backward_dw(tg_tensor *dgamma, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *rstd,
                                 double accumulate)
{
    tg_stream *s;
    TG_TRY(stream_for("rmsnorm_backward_dw", "dgamma", dgamma, &s));
    tg_status st = norm_backward_dw_check("rmsnorm_backward_dw", 0, dgamma, NULL, dy, x, NULL, rstd, accumulate);
    struct tg_rmsnorm_backward_dw_args a = {0};
    if (st == TG_OK)
        a = (struct tg_rmsnorm_backward_dw_args){.dgamma = tg_tensor_data(dgamma), .dy = tg_tensor_data(dy),
                                                 .x = tg_tensor_data(x), .rstd = tg_tensor_data(rstd), .dt = x->dtype,
                                                 .dw_dt = dgamma->dtype, .n = rows(x), .c = cols(x),
                                                 .accumulate = (float)accumulate};
    ISSUE(s, "rmsnorm_backward_dw", rmsnorm_backward_dw, &a, st);
}

/* ------------------------------------------------------------------ gelu, swiglu */
tg_status tg_gelu_forward(tg_tensor *y, const tg_tensor *x)
{
    tg_stream *s;
    TG_TRY(stream_for("gelu_forward", "x", x, &s));
    tg_status st = activation("gelu_forward", "x", x);
    if (st == TG_OK) st = like("gelu_forward", "x", x, "y", y);
    struct tg_gelu_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_gelu_forward_args){.y = tg_tensor_data(y), .x = tg_tensor_data(x), .dt = x->dtype,
                                          .n = tg_tensor_numel(x)};
    ISSUE(s, "gelu_forward", gelu_forward, &a, st);
}

tg_status tg_gelu_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x)
{
    tg_stream *s;
    TG_TRY(stream_for("gelu_backward", "x", x, &s));
    tg_status st = activation("gelu_backward", "x", x);
    if (st == TG_OK) st = like("gelu_backward", "x", x, "dy", dy);
    if (st == TG_OK) st = like("gelu_backward", "x", x, "dx", dx);
    struct tg_gelu_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_gelu_backward_args){.dx = tg_tensor_data(dx), .dy = tg_tensor_data(dy), .x = tg_tensor_data(x),
                                           .dt = x->dtype, .n = tg_tensor_numel(x)};
    ISSUE(s, "gelu_backward", gelu_backward, &a, st);
}

/* x (..., 2H) and y (..., H) with the same leading dims. */
static tg_status swiglu_check(const char *op, const char *yn, const tg_tensor *y, const tg_tensor *x)
{
    char a[96], b[96];
    TG_TRY(activation(op, "x", x));
    TG_TRY(need(op, yn, y));
    TG_TRY(on_dev(op, "x", x, yn, y));
    int ok = y->dtype == x->dtype && y->ndim == x->ndim && cols(x) % 2 == 0 && cols(y) * 2 == cols(x);
    for (int i = 0; ok && i < x->ndim - 1; i++) ok = x->shape[i] == y->shape[i];
    if (!ok)
        return tg_error(TG_EINVAL, "%s: x %s vs %s %s (x (..., 2H) and %s (..., H) of one dtype expected)", op,
                        desc(x, a, sizeof a), yn, desc(y, b, sizeof b), yn);
    return TG_OK;
}

tg_status tg_swiglu_forward(tg_tensor *y, const tg_tensor *x)
{
    tg_stream *s;
    TG_TRY(stream_for("swiglu_forward", "x", x, &s));
    tg_status st = swiglu_check("swiglu_forward", "y", y, x);
    struct tg_swiglu_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_swiglu_forward_args){.y = tg_tensor_data(y), .x = tg_tensor_data(x), .dt = x->dtype,
                                            .n = rows(x), .h = cols(x) / 2};
    ISSUE(s, "swiglu_forward", swiglu_forward, &a, st);
}

tg_status tg_swiglu_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x)
{
    tg_stream *s;
    TG_TRY(stream_for("swiglu_backward", "x", x, &s));
    tg_status st = swiglu_check("swiglu_backward", "dy", dy, x);
    if (st == TG_OK) st = like("swiglu_backward", "x", x, "dx", dx);
    struct tg_swiglu_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_swiglu_backward_args){.dx = tg_tensor_data(dx), .dy = tg_tensor_data(dy), .x = tg_tensor_data(x),
                                             .dt = x->dtype, .n = rows(x), .h = cols(x) / 2};
    ISSUE(s, "swiglu_backward", swiglu_backward, &a, st);
}

/* ------------------------------------------------------------------ bias */
tg_status tg_bias_add(tg_tensor *y, const tg_tensor *bias)
{
    tg_stream *s;
    TG_TRY(stream_for("bias_add", "y", y, &s));
    tg_status st = activation("bias_add", "y", y);
    if (st == TG_OK) st = vec("bias_add", "y", y, "bias", bias, cols(y), y->dtype);
    struct tg_bias_add_args a = {0};
    if (st == TG_OK)
        a = (struct tg_bias_add_args){.y = tg_tensor_data(y), .bias = tg_tensor_data(bias), .dt = y->dtype,
                                      .n = rows(y), .c = cols(y)};
    ISSUE(s, "bias_add", bias_add, &a, st);
}

tg_status tg_bias_backward_dw(tg_tensor *dbias, const tg_tensor *dy, double accumulate)
{
    tg_stream *s;
    int64_t c = 0;
    TG_TRY(stream_for("bias_backward_dw", "dbias", dbias, &s));
    tg_status st = activation("bias_backward_dw", "dy", dy);
    if (st == TG_OK) c = cols(dy), st = wgrad_out("bias_backward_dw", "dy", dy, "dbias", dbias, 1, &c);
    if (st == TG_OK) st = finite_arg("bias_backward_dw", "accumulate", accumulate);
    struct tg_bias_backward_dw_args a = {0};
    if (st == TG_OK)
        a = (struct tg_bias_backward_dw_args){.dbias = tg_tensor_data(dbias), .dy = tg_tensor_data(dy), .dt = dy->dtype,
                                              .dw_dt = dbias->dtype, .n = rows(dy), .c = c,
                                              .accumulate = (float)accumulate};
    ISSUE(s, "bias_backward_dw", bias_backward_dw, &a, st);
}

/* ------------------------------------------------------------------ attention */
/* qkv (B, T, 3C) with C divisible by n_head; fills B, T, C. */
static tg_status qkv_check(const char *op, const tg_tensor *qkv, int n_head, int64_t *b, int64_t *t, int64_t *c)
{
    char x[96];
    TG_TRY(activation(op, "qkv", qkv));
    if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0)
        return tg_error(TG_EINVAL, "%s: qkv %s must be (B, T, 3C)", op, desc(qkv, x, sizeof x));
    *b = qkv->shape[0], *t = qkv->shape[1], *c = qkv->shape[2] / 3;
    if (n_head <= 0 || *c % n_head != 0)
        return tg_error(TG_EINVAL, "%s: qkv %s: C = %lld is not divisible by n_head = %d", op, desc(qkv, x, sizeof x),
                        (long long)*c, n_head);
    return TG_OK;
}

/* t (B, T, C) of qkv's dtype and device. */
static tg_status btc(const char *op, const tg_tensor *qkv, const char *name, const tg_tensor *t, int64_t b, int64_t tt,
                     int64_t c)
{
    char x[96], y[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, "qkv", qkv, name, t));
    if (t->ndim != 3 || t->shape[0] != b || t->shape[1] != tt || t->shape[2] != c || t->dtype != qkv->dtype)
        return tg_error(TG_EINVAL, "%s: qkv %s vs %s %s (%s [%lld,%lld,%lld] %s expected)", op, desc(qkv, x, sizeof x),
                        name, desc(t, y, sizeof y), name, (long long)b, (long long)tt, (long long)c,
                        tg_dtype_name(qkv->dtype));
    return TG_OK;
}

static tg_status lse_check(const char *op, const tg_tensor *qkv, const tg_tensor *lse, int64_t b, int n_head, int64_t t)
{
    char x[96], y[96];
    TG_TRY(need(op, "lse", lse));
    TG_TRY(on_dev(op, "qkv", qkv, "lse", lse));
    if (lse->dtype != TG_F32 || lse->ndim != 3 || lse->shape[0] != b || lse->shape[1] != n_head || lse->shape[2] != t)
        return tg_error(TG_EINVAL, "%s: qkv %s vs lse %s (lse [%lld,%d,%lld] f32 expected)", op, desc(qkv, x, sizeof x),
                        desc(lse, y, sizeof y), (long long)b, n_head, (long long)t);
    return TG_OK;
}

tg_status tg_attention_forward(tg_tensor *out, tg_tensor *lse, const tg_tensor *qkv, int n_head)
{
    const char *op = "attention_forward";
    tg_stream *s;
    int64_t b = 0, t = 0, c = 0;
    TG_TRY(stream_for(op, "qkv", qkv, &s));
    tg_status st = qkv_check(op, qkv, n_head, &b, &t, &c);
    if (st == TG_OK) st = btc(op, qkv, "out", out, b, t, c);
    if (st == TG_OK) st = lse_check(op, qkv, lse, b, n_head, t);
    struct tg_attention_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_attention_forward_args){.out = tg_tensor_data(out), .lse = tg_tensor_data(lse),
                                               .qkv = tg_tensor_data(qkv), .dt = qkv->dtype, .b = b, .t = t, .c = c,
                                               .n_head = n_head};
    ISSUE(s, op, attention_forward, &a, st);
}

tg_status tg_attention_backward(tg_tensor *dqkv, const tg_tensor *dout, const tg_tensor *qkv, const tg_tensor *out,
                                const tg_tensor *lse, int n_head)
{
    const char *op = "attention_backward";
    tg_stream *s;
    int64_t b = 0, t = 0, c = 0;
    TG_TRY(stream_for(op, "qkv", qkv, &s));
    tg_status st = qkv_check(op, qkv, n_head, &b, &t, &c);
    if (st == TG_OK) st = like(op, "qkv", qkv, "dqkv", dqkv);
    if (st == TG_OK) st = btc(op, qkv, "dout", dout, b, t, c);
    if (st == TG_OK) st = btc(op, qkv, "out", out, b, t, c);
    if (st == TG_OK) st = lse_check(op, qkv, lse, b, n_head, t);
    struct tg_attention_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_attention_backward_args){.dqkv = tg_tensor_data(dqkv), .dout = tg_tensor_data(dout),
                                                .out = tg_tensor_data(out), .qkv = tg_tensor_data(qkv),
                                                .lse = tg_tensor_data(lse), .dt = qkv->dtype, .b = b, .t = t, .c = c,
                                                .n_head = n_head};
    ISSUE(s, op, attention_backward, &a, st);
}

/* ------------------------------------------------------------------ embedding */
/* idx (B, T) i32; fills B, T. */
static tg_status idx_check(const char *op, const tg_tensor *idx, int64_t *b, int64_t *t)
{
    char x[96];
    TG_TRY(need(op, "idx", idx));
    if (idx->dtype != TG_I32 || idx->ndim != 2)
        return tg_error(TG_EINVAL, "%s: idx %s must be (B, T) i32", op, desc(idx, x, sizeof x));
    *b = idx->shape[0], *t = idx->shape[1];
    return TG_OK;
}

/* A table (rows >= min_rows, C) of dtype dt (dt < 0: f32 or ref's dtype). */
static tg_status table(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *w,
                       int64_t min_rows, int64_t c, int dt)
{
    char x[96], y[96];
    TG_TRY(need(op, name, w));
    TG_TRY(on_dev(op, rn, ref, name, w));
    int dt_ok = dt >= 0 ? w->dtype == (tg_dtype)dt : (w->dtype == TG_F32 || w->dtype == ref->dtype);
    if (w->ndim != 2 || w->shape[0] < min_rows || w->shape[1] != c || !dt_ok)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s (%s%lld, %lld) %s expected)", op, rn, desc(ref, x, sizeof x),
                        name, desc(w, y, sizeof y), name, min_rows > 1 ? ">= " : "", (long long)min_rows, (long long)c,
                        dt >= 0 ? tg_dtype_name((tg_dtype)dt) : ref->dtype == TG_F32 ? "f32" : "f32 or bf16");
    return TG_OK;
}

tg_status tg_embedding_forward(tg_tensor *out, const tg_tensor *idx, const tg_tensor *wte, const tg_tensor *wpe)
{
    const char *op = "embedding_forward";
    char x[96], y[96];
    tg_stream *s;
    int64_t b = 0, t = 0, c = 0;
    TG_TRY(stream_for(op, "out", out, &s));
    tg_status st = activation(op, "out", out);
    if (st == TG_OK) st = idx_check(op, idx, &b, &t);
    if (st == TG_OK) st = on_dev(op, "out", out, "idx", idx);
    if (st == TG_OK && (out->ndim != 3 || out->shape[0] != b || out->shape[1] != t))
        st = tg_error(TG_EINVAL, "%s: idx %s vs out %s (out (%lld, %lld, C) expected)", op, desc(idx, x, sizeof x),
                      desc(out, y, sizeof y), (long long)b, (long long)t);
    if (st == TG_OK) c = out->shape[2], st = table(op, "out", out, "wte", wte, 1, c, out->dtype);
    if (st == TG_OK && wpe) st = table(op, "out", out, "wpe", wpe, t, c, out->dtype);
    struct tg_embedding_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_embedding_forward_args){.out = tg_tensor_data(out), .idx = tg_tensor_data(idx),
                                               .wte = tg_tensor_data(wte), .wpe = wpe ? tg_tensor_data(wpe) : NULL,
                                               .dt = out->dtype, .b = b, .t = t, .c = c, .v = wte->shape[0]};
    ISSUE(s, op, embedding_forward, &a, st);
}

tg_status tg_embedding_backward_dw(tg_tensor *dwte, tg_tensor *dwpe, const tg_tensor *dout, const tg_tensor *idx,
                                   double accumulate)
{
    const char *op = "embedding_backward_dw";
    char x[96], y[96];
    tg_stream *s;
    int64_t b = 0, t = 0, c = 0;
    TG_TRY(stream_for(op, "dout", dout, &s));
    tg_status st = activation(op, "dout", dout);
    if (st == TG_OK) st = idx_check(op, idx, &b, &t);
    if (st == TG_OK) st = on_dev(op, "dout", dout, "idx", idx);
    if (st == TG_OK && (dout->ndim != 3 || dout->shape[0] != b || dout->shape[1] != t))
        st = tg_error(TG_EINVAL, "%s: idx %s vs dout %s (dout (%lld, %lld, C) expected)", op, desc(idx, x, sizeof x),
                      desc(dout, y, sizeof y), (long long)b, (long long)t);
    if (st == TG_OK) c = dout->shape[2];
    if (st == TG_OK && dwte) st = table(op, "dout", dout, "dwte", dwte, 1, c, -1);
    if (st == TG_OK && dwpe) st = table(op, "dout", dout, "dwpe", dwpe, t, c, -1);
    if (st == TG_OK) st = finite_arg(op, "accumulate", accumulate);
    struct tg_embedding_backward_dw_args a = {0};
    if (st == TG_OK)
        a = (struct tg_embedding_backward_dw_args){
            .dwte = dwte ? tg_tensor_data(dwte) : NULL, .dwpe = dwpe ? tg_tensor_data(dwpe) : NULL,
            .dout = tg_tensor_data(dout), .idx = tg_tensor_data(idx), .dt = dout->dtype,
            .dwte_dt = dwte ? dwte->dtype : TG_F32, .dwpe_dt = dwpe ? dwpe->dtype : TG_F32, .b = b, .t = t, .c = c,
            .v = dwte ? dwte->shape[0] : 0, .tmax = dwpe ? dwpe->shape[0] : 0, .accumulate = (float)accumulate};
    if (st == TG_OK && !dwte && !dwpe) return TG_OK; /* nothing to compute */
    ISSUE(s, op, embedding_backward_dw, &a, st);
}

/* ------------------------------------------------------------------ cross-entropy */
/* logits (..., V) as rows (N, V), V >= 1; targets: N i32 of any shape. */
static tg_status logits_check(const char *op, const tg_tensor *logits, const tg_tensor *targets)
{
    char x[96];
    TG_TRY(activation(op, "logits", logits));
    if (cols(logits) < 1) return tg_error(TG_EINVAL, "%s: logits %s must be (N, V) with V >= 1", op, desc(logits, x, sizeof x));
    return ids(op, "logits", logits, "targets", targets, rows(logits));
}

static tg_status loss_check(const char *op, const tg_tensor *logits, const tg_tensor *loss)
{
    char x[96];
    TG_TRY(need(op, "loss", loss));
    TG_TRY(on_dev(op, "logits", logits, "loss", loss));
    if (loss->dtype != TG_F32 || tg_tensor_numel(loss) != 2)
        return tg_error(TG_EINVAL, "%s: loss %s must hold 2 f32 ([mean, count])", op, desc(loss, x, sizeof x));
    return TG_OK;
}

tg_status tg_cross_entropy_forward(tg_tensor *loss, tg_tensor *losses, const tg_tensor *logits, const tg_tensor *targets,
                                   int ignore_index)
{
    const char *op = "cross_entropy_forward";
    tg_stream *s;
    TG_TRY(stream_for(op, "logits", logits, &s));
    tg_status st = logits_check(op, logits, targets);
    if (st == TG_OK) st = loss_check(op, logits, loss);
    if (st == TG_OK) st = stat(op, "logits", logits, "losses", losses, rows(logits));
    struct tg_cross_entropy_forward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_cross_entropy_forward_args){.loss = tg_tensor_data(loss), .losses = tg_tensor_data(losses),
                                                   .logits = tg_tensor_data(logits), .targets = tg_tensor_data(targets),
                                                   .dt = logits->dtype, .n = rows(logits), .v = cols(logits),
                                                   .ignore_index = ignore_index};
    ISSUE(s, op, cross_entropy_forward, &a, st);
}

tg_status tg_cross_entropy_backward(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                    const tg_tensor *loss, double dloss, int ignore_index)
{
    const char *op = "cross_entropy_backward";
    tg_stream *s;
    TG_TRY(stream_for(op, "logits", logits, &s));
    tg_status st = logits_check(op, logits, targets);
    if (st == TG_OK) st = like(op, "logits", logits, "dlogits", dlogits);
    if (st == TG_OK) st = loss_check(op, logits, loss);
    if (st == TG_OK) st = finite_arg(op, "dloss", dloss);
    struct tg_cross_entropy_backward_args a = {0};
    if (st == TG_OK)
        a = (struct tg_cross_entropy_backward_args){.dlogits = tg_tensor_data(dlogits), .logits = tg_tensor_data(logits),
                                                    .targets = tg_tensor_data(targets), .loss = tg_tensor_data(loss),
                                                    .dt = logits->dtype, .n = rows(logits), .v = cols(logits),
                                                    .dloss = (float)dloss, .ignore_index = ignore_index};
    ISSUE(s, op, cross_entropy_backward, &a, st);
}

/* ------------------------------------------------------------------ optimizer */
/* The device scalar a multi-tensor op reads or writes: (1) f32 on ref's device. */
static tg_status scalar_check(const char *op, const char *name, const tg_tensor *t, const char *rn, const tg_tensor *ref)
{
    char x[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, rn, ref, name, t));
    if (t->dtype != TG_F32 || tg_tensor_numel(t) != 1)
        return tg_error(TG_EINVAL, "%s: %s %s must hold one f32", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* A capturable optimizer's device lr (1) f32 and step count (1) i32, both on p's
 * device (ref names p: "p" or "param 1 p"). */
static tg_status sched_check(const char *op, const char *rn, const tg_tensor *ref, const tg_tensor *lr,
                             const tg_tensor *step)
{
    char x[96];
    TG_TRY(scalar_check(op, "lr", lr, rn, ref));
    TG_TRY(need(op, "step", step));
    TG_TRY(on_dev(op, rn, ref, "step", step));
    if (step->dtype != TG_I32 || tg_tensor_numel(step) != 1)
        return tg_error(TG_EINVAL, "%s: step %s must hold one i32 (the step count)", op, desc(step, x, sizeof x));
    return TG_OK;
}

/* One parameter's tensors (op may name the parameter: "adamw_multi: param 3"). */
static tg_status adamw_tensors_check(const char *op, const tg_tensor *p, const tg_tensor *p_lowp, const tg_tensor *g,
                                     const tg_tensor *m, const tg_tensor *v)
{
    char x[96], y[96];
    TG_TRY(need(op, "p", p));
    if (p->dtype != TG_F32) return tg_error(TG_EINVAL, "%s: p %s must be f32 (master weights)", op, desc(p, x, sizeof x));
    TG_TRY(like(op, "p", p, "m", m));
    TG_TRY(like(op, "p", p, "v", v));
    TG_TRY(need(op, "g", g));
    TG_TRY(on_dev(op, "p", p, "g", g));
    if (!tg_tensor_same_shape(p, g) || !float_dtype(g->dtype))
        return tg_error(TG_EINVAL, "%s: p %s vs g %s (g of p's shape, f32 or bf16, expected)", op, desc(p, x, sizeof x),
                        desc(g, y, sizeof y));
    if (p_lowp) {
        TG_TRY(on_dev(op, "p", p, "p_lowp", p_lowp));
        if (!tg_tensor_same_shape(p, p_lowp) || p_lowp->dtype != TG_BF16)
            return tg_error(TG_EINVAL, "%s: p %s vs p_lowp %s (bf16 of p's shape expected)", op, desc(p, x, sizeof x),
                            desc(p_lowp, y, sizeof y));
    }
    return TG_OK;
}

static tg_status adamw_hyper_check(const char *op, double lr, double beta1, double beta2, double eps, int64_t step,
                                   double grad_scale)
{
    TG_TRY(finite_arg(op, "lr", lr));
    TG_TRY(finite_arg(op, "grad_scale", grad_scale));
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return tg_error(TG_EINVAL, "%s: beta1 = %g and beta2 = %g must be in [0, 1)", op, beta1, beta2);
    if (!(eps > 0) || !isfinite(eps)) return tg_error(TG_EINVAL, "%s: eps = %g must be finite and > 0", op, eps);
    if (step < 1) return tg_error(TG_EINVAL, "%s: step = %lld must be >= 1", op, (long long)step);
    return TG_OK;
}

static tg_status adamw_check(const char *op, tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m,
                             tg_tensor *v, double lr, double beta1, double beta2, double eps, double weight_decay,
                             int64_t step, double grad_scale)
{
    TG_TRY(adamw_tensors_check(op, p, p_lowp, g, m, v));
    TG_TRY(finite_arg(op, "lr", lr));
    TG_TRY(finite_arg(op, "weight_decay", weight_decay));
    return adamw_hyper_check(op, lr, beta1, beta2, eps, step, grad_scale);
}

/* tg_adamw_step, with lr and step read on the device when lr_t is given. */
static tg_status adamw_step_issue(const char *op, tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m,
                                  tg_tensor *v, double lr, const tg_tensor *lr_t, int64_t step, const tg_tensor *step_t,
                                  double beta1, double beta2, double eps, double weight_decay, double grad_scale)
{
    tg_stream *s;
    TG_TRY(stream_for(op, "p", p, &s));
    tg_status st = adamw_check(op, p, p_lowp, g, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    if (st == TG_OK && lr_t) st = sched_check(op, "p", p, lr_t, step_t);
    struct tg_adamw_args a = {0};
    if (st == TG_OK)
        a = (struct tg_adamw_args){.p = tg_tensor_data(p), .m = tg_tensor_data(m), .v = tg_tensor_data(v),
                                   .p_lowp = p_lowp ? tg_tensor_data(p_lowp) : NULL, .g = tg_tensor_data(g),
                                   .g_dt = g->dtype, .n = tg_tensor_numel(p), .lr = (float)lr, .beta1 = (float)beta1,
                                   .beta2 = (float)beta2, .eps = (float)eps, .weight_decay = (float)weight_decay,
                                   .grad_scale = (float)grad_scale, .step = step,
                                   .lr_dev = lr_t ? tg_tensor_data(lr_t) : NULL,
                                   .step_dev = lr_t ? tg_tensor_data(step_t) : NULL};
    ISSUE(s, op, adamw, &a, st);
}

tg_status tg_adamw_step(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step, double grad_scale)
{
    return adamw_step_issue("adamw_step", p, p_lowp, g, m, v, lr, NULL, step, NULL, beta1, beta2, eps, weight_decay,
                            grad_scale);
}

tg_status tg_adamw_step_dev(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v,
                            const tg_tensor *lr, const tg_tensor *step, double beta1, double beta2, double eps,
                            double weight_decay, double grad_scale)
{
    const char *op = "adamw_step";
    if (!lr || !step) return tg_error(TG_EINVAL, "%s: capturable: both lr and step tensors are required", op);
    /* 0 and 1 stand for the device values in the host checks */
    return adamw_step_issue(op, p, p_lowp, g, m, v, 0.0, lr, 1, step, beta1, beta2, eps, weight_decay, grad_scale);
}

tg_status tg_adamw_count(tg_tensor *step)
{
    const char *op = "adamw_count";
    char x[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "step", step, &s));
    tg_status st = TG_OK;
    if (step->dtype != TG_I32 || tg_tensor_numel(step) != 1)
        st = tg_error(TG_EINVAL, "%s: step %s must hold one i32 (the step count)", op, desc(step, x, sizeof x));
    int32_t *d = st == TG_OK ? tg_tensor_data(step) : NULL;
    ISSUE(s, op, adamw_count, d, st);
}

static tg_status adamw_multi_check(const struct tg_adamw_param *ps, int n, double lr, double beta1, double beta2,
                                   double eps, int64_t step, double grad_scale, const tg_tensor *clip_sumsq,
                                   double max_norm)
{
    const char *op = "adamw_multi";
    char what[48];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "%s: param %d", op, i + 1);
        TG_TRY(adamw_tensors_check(what, ps[i].p, ps[i].p_lowp, ps[i].g, ps[i].m, ps[i].v));
        if (i > 0) TG_TRY(on_dev(what, "param 1 p", ps[0].p, "p", ps[i].p));
        TG_TRY(finite_arg(what, "weight_decay", ps[i].weight_decay));
    }
    TG_TRY(adamw_hyper_check(op, lr, beta1, beta2, eps, step, grad_scale));
    if (clip_sumsq) {
        TG_TRY(scalar_check(op, "clip_sumsq", clip_sumsq, "param 1 p", ps[0].p));
        if (!(max_norm > 0)) return tg_error(TG_EINVAL, "%s: max_norm = %g must be > 0", op, max_norm);
    }
    return TG_OK;
}

static tg_status adamw_multi_issue(const struct tg_adamw_param *params, int n, double lr, const tg_tensor *lr_t,
                                   int64_t step, const tg_tensor *step_t, double beta1, double beta2, double eps,
                                   double grad_scale, const tg_tensor *clip_sumsq, double max_norm)
{
    const char *op = "adamw_multi";
    tg_stream *s;
    if (n < 1 || !params) return tg_error(TG_EINVAL, "%s: needs at least one parameter (got %d)", op, n);
    TG_TRY(stream_for(op, "param 1 p", params[0].p, &s));
    tg_status st = adamw_multi_check(params, n, lr, beta1, beta2, eps, step, grad_scale, clip_sumsq, max_norm);
    if (st == TG_OK && lr_t) st = sched_check(op, "param 1 p", params[0].p, lr_t, step_t);
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->adamw_multi);
    struct tg_adamw_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_adamw_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d parameters", op, n);
    if (st == TG_OK) {
        *a = (struct tg_adamw_multi_args){.lr = (float)lr, .beta1 = (float)beta1, .beta2 = (float)beta2,
                                          .eps = (float)eps, .grad_scale = (float)grad_scale, .step = step,
                                          .clip_sumsq = clip_sumsq ? tg_tensor_data(clip_sumsq) : NULL,
                                          .max_norm = max_norm, .lr_dev = lr_t ? tg_tensor_data(lr_t) : NULL,
                                          .step_dev = lr_t ? tg_tensor_data(step_t) : NULL, .ntensors = n};
        for (int i = 0; i < n; i++) {
            const struct tg_adamw_param *q = &params[i];
            a->t[i] = (struct tg_adamw_multi_tensor){
                .p = tg_tensor_data(q->p), .m = tg_tensor_data(q->m), .v = tg_tensor_data(q->v),
                .p_lowp = q->p_lowp ? tg_tensor_data(q->p_lowp) : NULL, .g = tg_tensor_data(q->g),
                .n = tg_tensor_numel(q->p), .g_dt = q->g->dtype, .weight_decay = (float)q->weight_decay};
        }
        st = s->be->adamw_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

tg_status tg_adamw_multi(const struct tg_adamw_param *params, int n, double lr, double beta1, double beta2, double eps,
                         int64_t step, double grad_scale, const tg_tensor *clip_sumsq, double max_norm)
{
    return adamw_multi_issue(params, n, lr, NULL, step, NULL, beta1, beta2, eps, grad_scale, clip_sumsq, max_norm);
}

tg_status tg_adamw_multi_dev(const struct tg_adamw_param *params, int n, const tg_tensor *lr, const tg_tensor *step,
                             double beta1, double beta2, double eps, double grad_scale, const tg_tensor *clip_sumsq,
                             double max_norm)
{
    if (!lr || !step) return tg_error(TG_EINVAL, "adamw_multi: capturable: both lr and step tensors are required");
    /* 0 and 1 stand for the device values in the host checks */
    return adamw_multi_issue(params, n, 0.0, lr, 1, step, beta1, beta2, eps, grad_scale, clip_sumsq, max_norm);
}

tg_status tg_sumsq_multi(tg_tensor *out, const tg_tensor *const *ts, int n)
{
    const char *op = "sumsq_multi";
    char what[48], x[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "out", out, &s));
    tg_status st = scalar_check(op, "out", out, "out", out);
    if (st == TG_OK && (n < 0 || (n > 0 && !ts))) st = tg_error(TG_EINVAL, "%s: bad tensor count %d", op, n);
    for (int i = 0; st == TG_OK && i < n; i++) {
        snprintf(what, sizeof what, "%s: tensor %d", op, i + 1);
        st = need(what, "t", ts[i]);
        if (st == TG_OK) st = on_dev(what, "out", out, "t", ts[i]);
        if (st == TG_OK && !float_dtype(ts[i]->dtype))
            st = tg_error(TG_EINVAL, "%s: t %s must be f32 or bf16", what, desc(ts[i], x, sizeof x));
    }
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->sumsq_multi);
    struct tg_sumsq_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_sumsq_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d tensors", op, n);
    if (st == TG_OK) {
        a->out = tg_tensor_data(out);
        a->ntensors = n;
        for (int i = 0; i < n; i++)
            a->t[i] = (struct tg_sumsq_multi_tensor){.x = tg_tensor_data(ts[i]), .n = tg_tensor_numel(ts[i]),
                                                     .dt = ts[i]->dtype};
        st = s->be->sumsq_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

tg_status tg_zero_multi(tg_tensor *const *ts, int n)
{
    const char *op = "zero_multi";
    char what[48];
    tg_stream *s;
    if (n == 0) return TG_OK;
    if (n < 0 || !ts) return tg_error(TG_EINVAL, "%s: bad tensor count %d", op, n);
    TG_TRY(stream_for(op, "tensor 1", ts[0], &s));
    tg_status st = TG_OK;
    for (int i = 1; st == TG_OK && i < n; i++) {
        snprintf(what, sizeof what, "%s: tensor %d", op, i + 1);
        st = need(what, "t", ts[i]);
        if (st == TG_OK) st = on_dev(what, "tensor 1", ts[0], "t", ts[i]);
    }
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->zero_multi);
    struct tg_zero_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_zero_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d tensors", op, n);
    if (st == TG_OK) {
        a->n = n;
        for (int i = 0; i < n; i++)
            a->t[i] = (struct tg_zero_multi_buf){.p = tg_tensor_data(ts[i]), .bytes = (int64_t)tg_tensor_bytes(ts[i])};
        st = s->be->zero_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

/* ------------------------------------------------------------------ sumsq (through the reduce kernel) */
tg_status tg_sumsq(const tg_tensor *t, double *out)
{
    tg_stream *s;
    TG_TRY(stream_for("sumsq", "t", t, &s));
    return tg_reduce_to_host(TG_REDUCE_SUMSQ, t, NULL, out, "sumsq");
}
