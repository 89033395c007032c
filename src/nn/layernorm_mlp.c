/* layernorm_mlp.c — LayerNormMLP (TE): norm, fc1, activation (gelu | swiglu), fc2; gelu is fused into fc1 (forward) and fc2's dgrad (backward), swiglu is a parameterless child. */
#include "core/debug.h"
#include "nn/nn.h"

#include <string.h>

struct act {
    int swiglu; /* x (..., 2H) -> y (..., H); else gelu, same shape */
    int64_t h;  /* output width */
};

/* saved: t[0] = x, the activation's input */

static tg_status act_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct act *A = m->impl;
    TG_TRY(tg_nn_check_rows("x", x, m->opts.dtype, A->swiglu ? 2 * A->h : A->h));
    tg_tensor *out = NULL, *keep = NULL;
    tg_status st = tg_nn_new_like(m, x, A->h, m->opts.dtype, &out);
    if (st == TG_OK) st = A->swiglu ? tg_swiglu_forward(out, x) : tg_gelu_forward(out, x);
    if (st == TG_OK) st = tg_tensor_ref(x, &keep);
    if (st == TG_OK) st = tg_module_save(m, mb, &keep, 1);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

static tg_status act_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct act *A = m->impl;
    struct tg_saved *s;
    TG_TRY(tg_module_peek(m, mb, &s));
    TG_TRY(tg_nn_check_like("dy", dy, s->t[0], A->h, m->opts.dtype));
    tg_tensor *out = NULL;
    tg_status st = tg_nn_new_like(m, s->t[0], s->t[0]->shape[s->t[0]->ndim - 1], m->opts.dtype, &out);
    if (st == TG_OK) st = A->swiglu ? tg_swiglu_backward(out, dy, s->t[0]) : tg_gelu_backward(out, dy, s->t[0]);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    tg_module_take(m, mb, &s);
    tg_saved_free(s);
    *dx = out;
    return TG_OK;
}

static void act_destroy(tg_module *m) { free(m->impl); }

static const struct tg_module_vtbl gelu_vt = {
    .type = "GELU", .forward = act_forward, .backward = act_backward, .destroy = act_destroy};
static const struct tg_module_vtbl swiglu_vt = {
    .type = "SwiGLU", .forward = act_forward, .backward = act_backward, .destroy = act_destroy};

static tg_status act_new(int swiglu, int64_t h, const tg_module_opts *o, tg_module **mp)
{
    tg_module *m;
    TG_TRY(tg_module_alloc(swiglu ? &swiglu_vt : &gelu_vt, o, &m));
    struct act *A = calloc(1, sizeof *A);
    if (!A) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    A->swiglu = swiglu, A->h = h;
    m->impl = A;
    *mp = m;
    return TG_OK;
}

/* gelu: children norm, fc1 (gelu fused), fc2. fc2's dgrad applies fc1's gelu'
 * in its GEMM (DGELU epilogue on fc1's saved pre-activation), so fc1's
 * backward gets dh and runs no gelu_backward. Otherwise the chain's backward
 * (dres to the norm, which runs last), also when the test switch
 * TG_DEBUG_UNFUSED_DGELU is on. */
static tg_status mlp_gelu_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    if (tg_debug_get(TG_DEBUG_UNFUSED_DGELU) || m->nchildren != 3) return tg_chain_backward_res(m, mb, dy, dres, dx);
    tg_tensor *dh = NULL, *dn = NULL;
    TG_TRY(tg_linear_backward_dgelu(m->children[2], mb, dy, m->children[1], &dh));
    tg_status st = tg_module_backward(m->children[1], mb, dh, &dn);
    tg_tensor_free(dh);
    if (st == TG_OK) st = tg_module_backward_res(m->children[0], mb, dn, dres, dx);
    tg_tensor_free(dn);
    return st;
}

static tg_status mlp_gelu_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    return mlp_gelu_backward_res(m, mb, dy, NULL, dx);
}

static const struct tg_module_vtbl layernorm_mlp_vt = {
    .type = "LayerNormMLP",
    .forward = tg_fp8_chain_forward,
    .forward_res = tg_fp8_chain_forward_res,
    .backward = tg_chain_backward,
    .backward_res = tg_chain_backward_res,
};

static const struct tg_module_vtbl layernorm_mlp_gelu_vt = {
    .type = "LayerNormMLP",
    .forward = tg_fp8_chain_forward,
    .forward_res = tg_fp8_chain_forward_res,
    .backward = mlp_gelu_backward,
    .backward_res = mlp_gelu_backward_res,
};

/* Adds a new child made by the status-returning expression `make` into `tmp`. */
#define ADD_CHILD(make)                                                                                \
    do {                                                                                               \
        tg_module *tmp = NULL;                                                                         \
        if (st == TG_OK) st = (make);                                                                  \
        if (st == TG_OK) st = tg_module_add_child(m, tmp);                                             \
        tg_module_release(tmp);                                                                        \
    } while (0)

tg_status tg_layernorm_mlp_new(int64_t c, int64_t hidden, const char *norm, const char *activation,
                               const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    int swiglu;
    if (!activation || !strcmp(activation, "gelu")) swiglu = 0;
    else if (!strcmp(activation, "swiglu")) swiglu = 1;
    else return tg_error(TG_EINVAL, "LayerNormMLP: unknown activation '%s' (expected \"gelu\" or \"swiglu\")", activation);
    if (c < 1 || hidden < 1)
        return tg_error(TG_EINVAL, "LayerNormMLP: sizes must be positive (c %lld, hidden %lld)", (long long)c, (long long)hidden);
    tg_module *m;
    TG_TRY(tg_module_alloc(swiglu ? &layernorm_mlp_vt : &layernorm_mlp_gelu_vt, o, &m));
    tg_module_opts co;
    char name[256];
    tg_status st = TG_OK;
    tg_nn_child_opts(m, "norm", &co, name, sizeof name);
    ADD_CHILD(tg_norm_new_by_name(norm, c, &co, &tmp));
    tg_nn_child_opts(m, "fc1", &co, name, sizeof name);
    if (swiglu) {
        ADD_CHILD(tg_linear_new(c, 2 * hidden, &co, &tmp));
        tg_nn_child_opts(m, "swiglu", &co, name, sizeof name);
        ADD_CHILD(act_new(swiglu, hidden, &co, &tmp));
    } else { /* fc1 + gelu in one GEMM (bias and gelu in its epilogue) */
        ADD_CHILD(tg_linear_gelu_new(c, hidden, &co, &tmp));
    }
    tg_nn_child_opts(m, "fc2", &co, name, sizeof name);
    ADD_CHILD(tg_linear_new(hidden, c, &co, &tmp));
    if (st != TG_OK) {
        tg_module_release(m);
        return tg_error_prefix(st, "LayerNormMLP");
    }
    *mp = m;
    return TG_OK;
}
