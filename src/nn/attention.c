/* attention.c — causal self-attention: fused QKV Linear (C -> 3C), the attention core (no parameters), output Linear. */
#include "nn/nn.h"

struct core {
    int64_t c;
    int n_head;
};

/* saved: t[0] = qkv (B, T, 3C), t[1] = out (B, T, C), t[2] = lse (B, n_head, T) f32 */

static tg_status core_forward(tg_module *m, int mb, const tg_tensor *qkv, tg_tensor **y)
{
    struct core *A = m->impl;
    char a[64];
    if (qkv->ndim != 3 || qkv->shape[2] != 3 * A->c || qkv->dtype != m->opts.dtype)
        return tg_error(TG_EINVAL, "qkv is %s %s, expected (B, T, %lld) %s", tg_tensor_shape_str(qkv, a, sizeof a),
                        tg_dtype_name(qkv->dtype), (long long)(3 * A->c), tg_dtype_name(m->opts.dtype));
    int64_t os[3] = {qkv->shape[0], qkv->shape[1], A->c}, ls[3] = {qkv->shape[0], A->n_head, qkv->shape[1]};
    tg_tensor *t[3] = {NULL, NULL, NULL}, *out = NULL;
    tg_status st = tg_module_tensor(m, m->opts.dtype, 3, os, &t[1]);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 3, ls, &t[2]);
    if (st == TG_OK) st = tg_attention_forward(t[1], t[2], qkv, A->n_head);
    if (st == TG_OK) st = tg_tensor_ref(qkv, &t[0]);
    if (st == TG_OK) st = tg_tensor_ref(t[1], &out);
    if (st != TG_OK) {
        for (int i = 0; i < 3; i++) tg_tensor_free(t[i]);
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

static tg_status core_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct core *A = m->impl;
    struct tg_saved *s;
    TG_TRY(tg_module_peek(m, mb, &s));
    TG_TRY(tg_nn_check_like("dy", dy, s->t[0], A->c, m->opts.dtype));
    tg_tensor *out = NULL;
    tg_status st = tg_module_tensor(m, m->opts.dtype, 3, s->t[0]->shape, &out);
    if (st == TG_OK) st = tg_attention_backward(out, dy, s->t[0], s->t[1], s->t[2], A->n_head);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    tg_module_take(m, mb, &s);
    tg_saved_free(s);
    *dx = out;
    return TG_OK;
}

static void core_destroy(tg_module *m) { free(m->impl); }

static const struct tg_module_vtbl core_vt = {
    .type = "DotProductAttention", .forward = core_forward, .backward = core_backward, .destroy = core_destroy};

static tg_status attention_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    struct core *A = m->children[1]->impl;
    char a[64];
    if (x->ndim != 3 || x->shape[2] != A->c || x->dtype != m->opts.dtype)
        return tg_error(TG_EINVAL, "x is %s %s, expected (B, T, %lld) %s", tg_tensor_shape_str(x, a, sizeof a),
                        tg_dtype_name(x->dtype), (long long)A->c, tg_dtype_name(m->opts.dtype));
    /* res goes to the output projection's GEMM; an FP8 input written by the norm before goes to qkv */
    return tg_fp8_chain_forward_res(m, mb, x, res, y);
}

static tg_status attention_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    return attention_forward_res(m, mb, x, NULL, y);
}

static const struct tg_module_vtbl attention_vt = {
    .type = "CausalSelfAttention",
    .forward = attention_forward,
    .forward_res = attention_forward_res,
    .backward = tg_chain_backward,
};

tg_status tg_attention_new(int64_t c, int n_head, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (c < 1 || n_head < 1 || c % n_head != 0)
        return tg_error(TG_EINVAL, "CausalSelfAttention: hidden_size %lld must be a positive multiple of num_attention_heads %d",
                        (long long)c, n_head);
    tg_module *m, *tmp = NULL;
    TG_TRY(tg_module_alloc(&attention_vt, o, &m));
    m->fp8_in_first = 1;
    tg_module_opts co;
    char name[256];
    tg_nn_child_opts(m, "qkv", &co, name, sizeof name);
    tg_status st = tg_linear_new(c, 3 * c, &co, &tmp);
    if (st == TG_OK) st = tg_module_add_child(m, tmp);
    tg_module_release(tmp);
    tmp = NULL;
    if (st == TG_OK) {
        tg_nn_child_opts(m, "core", &co, name, sizeof name);
        st = tg_module_alloc(&core_vt, &co, &tmp);
        struct core *A = st == TG_OK ? calloc(1, sizeof *A) : NULL;
        if (st == TG_OK && !A) st = tg_error(TG_ENOMEM, "out of host memory");
        if (A) {
            A->c = c, A->n_head = n_head;
            tmp->impl = A;
        }
        if (st == TG_OK) st = tg_module_add_child(m, tmp);
        tg_module_release(tmp);
        tmp = NULL;
    }
    if (st == TG_OK) {
        tg_nn_child_opts(m, "proj", &co, name, sizeof name);
        st = tg_linear_new(c, c, &co, &tmp);
        if (st == TG_OK) st = tg_module_add_child(m, tmp);
        tg_module_release(tmp);
    }
    if (st != TG_OK) {
        tg_module_release(m);
        return tg_error_prefix(st, "CausalSelfAttention");
    }
    *mp = m;
    return TG_OK;
}
