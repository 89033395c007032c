/* norm.c — LayerNorm (gamma, beta) and RMSNorm (gamma) over the last dimension, split backward. */
#include "nn/nn.h"

#include <string.h>

struct norm {
    int64_t c;
    int rms;     /* RMSNorm: no mean, no beta */
    tg_param *g; /* (C) gamma, init 1 */
    tg_param *b; /* (C) beta, init 0; NULL for RMSNorm or bias = 0 */
};

/* saved: t[0] = x (..., C), t[1] = rstd (N) f32, t[2] = mean (N) f32 (LayerNorm);
 * wgrad item: the same plus t[3] = dy (..., C) */

static tg_status norm_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct norm *N = m->impl;
    TG_TRY(tg_nn_check_rows("x", x, m->opts.dtype, N->c));
    /* fp8_out: the next Linear's FP8 input and its transpose instead of y; *y is then x (its shape) */
    const struct tg_fp8_input *f8 = m->fp8_out;
    if (f8 && N->rms) {
        char a[160];
        return tg_error(TG_ESTATE, "%s writes no FP8 output", tg_module_label(m, a, sizeof a));
    }
    int64_t rows[1] = {tg_tensor_numel(x) / N->c};
    tg_tensor *t[3] = {NULL, NULL, NULL}, *out = NULL;
    tg_status st = f8 ? tg_tensor_ref(x, &out) : tg_nn_new_like(m, x, N->c, m->opts.dtype, &out);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, rows, &t[1]);
    if (st == TG_OK && !N->rms) st = tg_module_tensor(m, TG_F32, 1, rows, &t[2]);
    if (st == TG_OK && f8) {
        st = tg_layernorm_forward_fp8(f8->x8, t[2], t[1], x, N->g->data, N->b ? N->b->data : NULL, m->opts.eps,
                                      f8->scale, f8->amax, f8->scale_inv, TG_FP8_AMAX_ACCUMULATE);
        if (st == TG_OK) st = tg_fp8_transpose(f8->x8_t, f8->x8);
    } else if (st == TG_OK) {
        if (N->rms) st = tg_rmsnorm_forward(out, t[1], x, N->g->data, m->opts.eps);
        else st = tg_layernorm_forward(out, t[2], t[1], x, N->g->data, N->b ? N->b->data : NULL, m->opts.eps);
    }
    if (st == TG_OK) st = tg_tensor_ref(x, &t[0]);
    if (st != TG_OK) {
        for (int i = 0; i < 3; i++) tg_tensor_free(t[i]);
        tg_tensor_free(out);
        return st;
    }
    st = tg_module_save(m, mb, t, 3);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

/* dres (may be NULL) is added inside the dgrad kernel: a residual add costs no pass of its own. */
static tg_status norm_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    struct norm *N = m->impl;
    struct tg_saved *s;
    TG_TRY(tg_module_peek(m, mb, &s));
    TG_TRY(tg_nn_check_like("dy", dy, s->t[0], N->c, m->opts.dtype));
    if (dres) TG_TRY(tg_nn_check_like("the residual gradient", dres, s->t[0], N->c, m->opts.dtype));
    tg_tensor *out = NULL;
    tg_status st = tg_nn_new_like(m, s->t[0], N->c, m->opts.dtype, &out);
    if (st == TG_OK) {
        if (N->rms) st = tg_rmsnorm_backward_res(out, dy, dres, s->t[0], N->g->data, s->t[1]);
        else st = tg_layernorm_backward_res(out, dy, dres, s->t[0], N->g->data, s->t[2], s->t[1]);
    }
    if (st == TG_OK) st = tg_tensor_ref(dy, &s->t[3]);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    s->n = 4;
    tg_module_take(m, mb, &s);
    *dx = out;
    return tg_module_wgrad_or_queue(m, s);
}

static tg_status norm_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    return norm_backward_res(m, mb, dy, NULL, dx);
}

static tg_status norm_wgrad(tg_module *m, struct tg_saved *item)
{
    struct norm *N = m->impl;
    const tg_tensor *x = item->t[0], *rstd = item->t[1], *mean = item->t[2], *dy = item->t[3];
    double acc = tg_param_wgrad_accumulate(N->g);
    tg_status st;
    if (N->rms) {
        st = tg_rmsnorm_backward_dw(tg_param_wgrad_target(N->g), dy, x, rstd, acc);
    } else {
        /* gamma and beta get their contributions together, so they share the accumulate flag */
        if (N->b && tg_param_wgrad_accumulate(N->b) != acc)
            return tg_error(TG_ESTATE, "%s and %s disagree on whether to overwrite or accumulate their gradients",
                            N->g->name, N->b->name);
        st = tg_layernorm_backward_dw(tg_param_wgrad_target(N->g), N->b ? tg_param_wgrad_target(N->b) : NULL, dy, x, mean,
                                      rstd, acc);
    }
    if (st == TG_OK) st = tg_param_wgrad_done(N->g, item->mb);
    if (st == TG_OK && N->b) st = tg_param_wgrad_done(N->b, item->mb);
    return st;
}

static void norm_destroy(tg_module *m) { free(m->impl); }

static const struct tg_module_vtbl layernorm_vt = {
    .type = "LayerNorm", .forward = norm_forward, .backward = norm_backward, .backward_res = norm_backward_res, .wgrad = norm_wgrad,
    .destroy = norm_destroy};
static const struct tg_module_vtbl rmsnorm_vt = {
    .type = "RMSNorm", .forward = norm_forward, .backward = norm_backward, .backward_res = norm_backward_res, .wgrad = norm_wgrad,
    .destroy = norm_destroy};

static tg_status norm_new(int64_t c, int rms, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (c < 1) return tg_error(TG_EINVAL, "%s: size must be positive (got %lld)", rms ? "RMSNorm" : "LayerNorm", (long long)c);
    tg_module *m;
    TG_TRY(tg_module_alloc(rms ? &rmsnorm_vt : &layernorm_vt, o, &m));
    struct norm *N = calloc(1, sizeof *N);
    if (!N) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = N;
    N->c = c;
    N->rms = rms;
    int64_t shape[1] = {c};
    tg_status st = tg_module_add_param(m, "weight", 1, shape, 0.0, 1.0, &N->g);
    if (st == TG_OK && !rms && m->opts.bias) st = tg_module_add_param(m, "bias", 1, shape, 0.0, 0.0, &N->b);
    if (st != TG_OK) {
        tg_module_release(m);
        return st;
    }
    *mp = m;
    return TG_OK;
}

tg_status tg_layernorm_new(int64_t c, const tg_module_opts *o, tg_module **m) { return norm_new(c, 0, o, m); }
tg_status tg_rmsnorm_new(int64_t c, const tg_module_opts *o, tg_module **m) { return norm_new(c, 1, o, m); }

/* Shared by the composites: normalization "LayerNorm" or "RMSNorm" (NULL: LayerNorm), as TE spells them. */
tg_status tg_norm_new_by_name(const char *norm, int64_t c, const tg_module_opts *o, tg_module **m)
{
    *m = NULL;
    if (!norm || !strcmp(norm, "LayerNorm")) return tg_layernorm_new(c, o, m);
    if (!strcmp(norm, "RMSNorm")) return tg_rmsnorm_new(c, o, m);
    return tg_error(TG_EINVAL, "unknown normalization '%s' (expected \"LayerNorm\" or \"RMSNorm\")", norm);
}

int tg_norm_writes_fp8(const tg_module *m)
{
    return m->vt == &layernorm_vt && !m->route && !m->npre;
}
