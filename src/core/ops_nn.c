/* ops_nn.c — the transformer op layer: checks shapes, dtypes and devices, then issues one backend kernel on the current stream. */
#include "core/ops_nn.h"
#include "core/ops_check.h"
#include "core/checked.h"

#include <math.h>

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
    int ok = y->dtype == x->dtype && y->ndim == x->ndim && cols(x) % 2 == 0 && cols(y) == cols(x) / 2;
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

tg_status tg_attention_kv(tg_tensor *out, tg_tensor *kcache, tg_tensor *vcache, const tg_tensor *qkv, int64_t pos,
                          int n_head)
{
    const char *op = "attention_kv";
    tg_stream *s;
    int64_t b = 0, t = 0, c = 0;
    char x[96], y[96];
    TG_TRY(stream_for(op, "qkv", qkv, &s));
    tg_status st = qkv_check(op, qkv, n_head, &b, &t, &c);
    if (st == TG_OK) st = btc(op, qkv, "out", out, b, t, c);
    if (st == TG_OK) st = need(op, "kcache", kcache);
    if (st == TG_OK) st = need(op, "vcache", vcache);
    if (st == TG_OK) st = on_dev(op, "qkv", qkv, "kcache", kcache);
    if (st == TG_OK) st = like(op, "kcache", kcache, "vcache", vcache);
    if (st == TG_OK && (kcache->ndim != 3 || kcache->shape[0] != b || kcache->shape[2] != c || kcache->dtype != qkv->dtype))
        st = tg_error(TG_EINVAL, "%s: qkv %s vs kcache %s (kcache [%lld,Tmax,%lld] %s expected)", op,
                      desc(qkv, x, sizeof x), desc(kcache, y, sizeof y), (long long)b, (long long)c,
                      tg_dtype_name(qkv->dtype));
    /* pos comes from the caller unchecked: pos + t is computed with a check (a huge pos would wrap past the cache). */
    int64_t end = 0;
    if (st == TG_OK && (pos < 0 || !tg_add_i64(pos, t, &end) || end > kcache->shape[1]))
        st = tg_error(TG_EINVAL, "%s: %lld positions from position %lld do not fit the cache of %lld positions (kcache %s)",
                      op, (long long)t, (long long)pos, (long long)kcache->shape[1], desc(kcache, y, sizeof y));
    struct tg_attention_kv_args a = {0};
    if (st == TG_OK)
        a = (struct tg_attention_kv_args){.out = tg_tensor_data(out), .kcache = tg_tensor_data(kcache),
                                          .vcache = tg_tensor_data(vcache), .qkv = tg_tensor_data(qkv),
                                          .dt = qkv->dtype, .b = b, .tn = t, .tmax = kcache->shape[1], .pos = pos,
                                          .c = c, .n_head = n_head};
    ISSUE(s, op, attention_kv, &a, st);
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
                                               .check = tg_index_check_of(s), .dt = out->dtype, .b = b, .t = t,
                                               .c = c, .v = wte->shape[0]};
    ISSUE_CHECKED(s, op, embedding_forward, &a, st);
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
            .v = dwte ? dwte->shape[0] : 0, .tmax = dwpe ? dwpe->shape[0] : 0, .accumulate = (float)accumulate,
            .check = dwte ? tg_index_check_of(s) : NULL};
    if (st == TG_OK && !dwte && !dwpe) return TG_OK; /* nothing to compute */
    ISSUE_CHECKED(s, op, embedding_backward_dw, &a, st);
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
                                                   .check = tg_index_check_of(s), .dt = logits->dtype,
                                                   .n = rows(logits), .v = cols(logits), .ignore_index = ignore_index};
    ISSUE_CHECKED(s, op, cross_entropy_forward, &a, st);
}

/* check_targets 0: the caller checked the targets already (the LM head checks all of them before its chunks,
 * whose rows would be numbered from the chunk's start). */
static tg_status ce_backward(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets, const tg_tensor *loss,
                             double dloss, int ignore_index, int check_targets)
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
                                                    .check = check_targets ? tg_index_check_of(s) : NULL,
                                                    .dt = logits->dtype, .n = rows(logits), .v = cols(logits),
                                                    .dloss = (float)dloss, .ignore_index = ignore_index};
    ISSUE_CHECKED(s, op, cross_entropy_backward, &a, st);
}

tg_status tg_cross_entropy_backward(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                    const tg_tensor *loss, double dloss, int ignore_index)
{
    return ce_backward(dlogits, logits, targets, loss, dloss, ignore_index, 1);
}

tg_status tg_cross_entropy_backward_prechecked(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                               const tg_tensor *loss, double dloss, int ignore_index)
{
    return ce_backward(dlogits, logits, targets, loss, dloss, ignore_index, 0);
}

static tg_status ce_fused(tg_tensor *losses, tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                          const tg_tensor *loss, double dloss, int ignore_index, int check_targets)
{
    const char *op = "cross_entropy_fused";
    tg_stream *s;
    TG_TRY(stream_for(op, "logits", logits, &s));
    tg_status st = logits_check(op, logits, targets);
    if (st == TG_OK) st = stat(op, "logits", logits, "losses", losses, rows(logits));
    if (st == TG_OK && dlogits) st = like(op, "logits", logits, "dlogits", dlogits);
    if (st == TG_OK) st = loss_check(op, logits, loss);
    if (st == TG_OK) st = finite_arg(op, "dloss", dloss);
    struct tg_cross_entropy_fused_args a = {0};
    if (st == TG_OK)
        a = (struct tg_cross_entropy_fused_args){.losses = tg_tensor_data(losses), .dlogits = dlogits ? tg_tensor_data(dlogits) : NULL,
                                                 .logits = tg_tensor_data(logits), .targets = tg_tensor_data(targets),
                                                 .loss = tg_tensor_data(loss),
                                                 .check = check_targets ? tg_index_check_of(s) : NULL,
                                                 .dt = logits->dtype, .n = rows(logits), .v = cols(logits),
                                                 .dloss = (float)dloss, .ignore_index = ignore_index};
    ISSUE_CHECKED(s, op, cross_entropy_fused, &a, st);
}

tg_status tg_cross_entropy_fused(tg_tensor *losses, tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                 const tg_tensor *loss, double dloss, int ignore_index)
{
    return ce_fused(losses, dlogits, logits, targets, loss, dloss, ignore_index, 1);
}

tg_status tg_cross_entropy_fused_prechecked(tg_tensor *losses, tg_tensor *dlogits, const tg_tensor *logits,
                                            const tg_tensor *targets, const tg_tensor *loss, double dloss,
                                            int ignore_index)
{
    return ce_fused(losses, dlogits, logits, targets, loss, dloss, ignore_index, 0);
}

tg_status tg_cross_entropy_mean(tg_tensor *loss, const tg_tensor *losses, const tg_tensor *targets, int64_t vocab,
                                int ignore_index)
{
    const char *op = "cross_entropy_mean";
    char x[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "targets", targets, &s));
    tg_status st = TG_OK;
    if (targets->dtype != TG_I32)
        st = tg_error(TG_EINVAL, "%s: targets %s must be i32", op, desc(targets, x, sizeof x));
    if (st == TG_OK && vocab < 1) st = tg_error(TG_EINVAL, "%s: vocabulary size %lld must be >= 1", op, (long long)vocab);
    if (st == TG_OK) st = need(op, "loss", loss);
    if (st == TG_OK) st = on_dev(op, "targets", targets, "loss", loss);
    if (st == TG_OK && (loss->dtype != TG_F32 || tg_tensor_numel(loss) != 2))
        st = tg_error(TG_EINVAL, "%s: loss %s must hold 2 f32 ([mean, count])", op, desc(loss, x, sizeof x));
    if (st == TG_OK && losses) st = stat(op, "targets", targets, "losses", losses, tg_tensor_numel(targets));
    struct tg_cross_entropy_mean_args a = {0};
    if (st == TG_OK)
        a = (struct tg_cross_entropy_mean_args){.loss = tg_tensor_data(loss), .losses = losses ? tg_tensor_data(losses) : NULL,
                                                .targets = tg_tensor_data(targets), .check = tg_index_check_of(s),
                                                .n = tg_tensor_numel(targets), .v = vocab, .ignore_index = ignore_index};
    ISSUE_CHECKED(s, op, cross_entropy_mean, &a, st);
}
