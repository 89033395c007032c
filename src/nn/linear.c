/* linear.c — Linear: y = x W^T + b; dgrad dx = dy W; wgrad dW = dy^T x, db = sum dy (now or delayed). */
#include "nn/nn.h"

struct linear {
    int64_t in, out;
    tg_param *w; /* (out, in) */
    tg_param *b; /* (out) or NULL */
    int shared;  /* w is another module's parameter (retained here) */
};

/* saved: t[0] = x (..., in); wgrad item: t[0] = x, t[1] = dy (..., out) */

static tg_status linear_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct linear *L = m->impl;
    TG_TRY(tg_nn_check_rows("x", x, m->opts.dtype, L->in));
    tg_tensor *out = NULL, *x2 = NULL, *y2 = NULL, *keep = NULL;
    tg_status st = tg_nn_new_like(m, x, L->out, m->opts.dtype, &out);
    if (st == TG_OK) st = tg_nn_rows(x, &x2);
    if (st == TG_OK) st = tg_nn_rows(out, &y2);
    if (st == TG_OK) st = tg_gemm(y2, x2, 0, L->w->data, 1, 1.0, 0.0); /* y = x @ W^T */
    if (st == TG_OK && L->b) st = tg_bias_add(y2, L->b->data);
    if (st == TG_OK) st = tg_tensor_ref(x, &keep);
    if (st == TG_OK) st = tg_module_save(m, mb, &keep, 1);
    tg_tensor_free(x2);
    tg_tensor_free(y2);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

static tg_status linear_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct linear *L = m->impl;
    struct tg_saved *s;
    TG_TRY(tg_module_peek(m, mb, &s));
    TG_TRY(tg_nn_check_like("dy", dy, s->t[0], L->out, m->opts.dtype));
    tg_tensor *out = NULL, *dx2 = NULL, *dy2 = NULL;
    tg_status st = tg_nn_new_like(m, s->t[0], L->in, m->opts.dtype, &out);
    if (st == TG_OK) st = tg_nn_rows(out, &dx2);
    if (st == TG_OK) st = tg_nn_rows(dy, &dy2);
    if (st == TG_OK) st = tg_gemm(dx2, dy2, 0, L->w->data, 0, 1.0, 0.0); /* dgrad: dx = dy @ W */
    tg_tensor_free(dx2);
    tg_tensor_free(dy2);
    if (st == TG_OK) st = tg_tensor_ref(dy, &s->t[1]);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    s->n = 2;
    tg_module_take(m, mb, &s);
    *dx = out;
    return tg_module_wgrad_or_queue(m, s);
}

static tg_status linear_wgrad(tg_module *m, struct tg_saved *item)
{
    struct linear *L = m->impl;
    tg_tensor *x2 = NULL, *dy2 = NULL;
    tg_status st = tg_nn_rows(item->t[0], &x2);
    if (st == TG_OK) st = tg_nn_rows(item->t[1], &dy2);
    /* wgrad: dW (out, in) = acc * dW + dy^T @ x; db = acc * db + sum_n dy */
    if (st == TG_OK)
        st = tg_gemm(tg_param_wgrad_target(L->w), dy2, 1, x2, 0, 1.0, tg_param_wgrad_accumulate(L->w));
    if (st == TG_OK && L->b) st = tg_bias_backward_dw(tg_param_wgrad_target(L->b), dy2, tg_param_wgrad_accumulate(L->b));
    tg_tensor_free(x2);
    tg_tensor_free(dy2);
    if (st == TG_OK) st = tg_param_wgrad_done(L->w, item->mb);
    if (st == TG_OK && L->b) st = tg_param_wgrad_done(L->b, item->mb);
    return st;
}

static void linear_destroy(tg_module *m)
{
    struct linear *L = m->impl;
    if (L && L->shared) tg_param_release(L->w);
    free(L);
}

static const struct tg_module_vtbl linear_vt = {
    .type = "Linear",
    .forward = linear_forward,
    .backward = linear_backward,
    .wgrad = linear_wgrad,
    .destroy = linear_destroy,
};

tg_status tg_linear_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (in < 1 || out < 1) return tg_error(TG_EINVAL, "Linear: sizes must be positive (in %lld, out %lld)", (long long)in, (long long)out);
    tg_module *m;
    TG_TRY(tg_module_alloc(&linear_vt, o, &m));
    struct linear *L = calloc(1, sizeof *L);
    if (!L) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = L;
    L->in = in, L->out = out;
    int64_t ws[2] = {out, in}, bs[1] = {out};
    tg_status st = tg_module_add_param(m, "weight", 2, ws, m->opts.init_std, 0.0, &L->w);
    if (st == TG_OK && m->opts.bias) st = tg_module_add_param(m, "bias", 1, bs, 0.0, 0.0, &L->b);
    if (st != TG_OK) {
        tg_module_release(m);
        return st;
    }
    *mp = m;
    return TG_OK;
}

tg_status tg_linear_new_shared(tg_param *weight, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (!weight || weight->data->ndim != 2) return tg_error(TG_EINVAL, "Linear: the shared weight must be 2-D (out, in)");
    tg_module *m;
    TG_TRY(tg_module_alloc(&linear_vt, o, &m));
    if (weight->data->dtype != m->opts.dtype) {
        tg_status st = tg_error(TG_EINVAL, "Linear: shared weight %s is %s but the module computes in %s", weight->name,
                                tg_dtype_name(weight->data->dtype), tg_dtype_name(m->opts.dtype));
        tg_module_release(m);
        return st;
    }
    struct linear *L = calloc(1, sizeof *L);
    if (!L) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = L;
    L->out = weight->data->shape[0], L->in = weight->data->shape[1];
    L->w = tg_param_retain(weight);
    L->shared = 1;
    m->shared = weight;
    *mp = m;
    return TG_OK;
}
