/* transformer_layer.c — pre-norm block: h = x + attn(norm(x)); y = h + mlp(h) (the MLP carries its own norm). */
#include "nn/nn.h"

/* children: [0] attn_norm (LayerNorm | RMSNorm), [1] attn (CausalSelfAttention), [2] mlp (LayerNormMLP).
 * Nothing is saved here: the residual adds pass gradients straight through. */

static tg_status block_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    tg_tensor *a = NULL, *h = NULL, *c = NULL;
    struct tg_fp8_input a8; /* FP8 delayed scaling: the norm writes qkv's input */
    TG_TRY(tg_fp8_forward_into(m->children[0], m->children[1], mb, x, NULL, NULL, &a8, &a));
    /* the residual adds run in the GEMMs of the attention's and the MLP's output projections */
    m->children[1]->fp8_in = a8.x8 ? &a8 : NULL;
    tg_status st = tg_module_forward_res(m->children[1], mb, a, x, &h);
    m->children[1]->fp8_in = NULL;
    tg_fp8_input_free(&a8);
    tg_tensor_free(a);
    if (st == TG_OK) st = tg_module_forward_res(m->children[2], mb, h, h, &c);
    tg_tensor_free(h);
    if (st != TG_OK) {
        tg_tensor_free(c);
        return st;
    }
    *y = c;
    return TG_OK;
}

/* The residual gradients ride along in the children's backward (tg_module_backward_res): with LayerNorm or
 * RMSNorm in front of each branch they are added inside the norms' dgrad kernels, no add kernels of their own. */
static tg_status block_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    tg_tensor *dh = NULL, *da = NULL, *out = NULL;
    if (!dy) return tg_error(TG_EINVAL, "dy is missing");
    /* dh = dy + d(mlp)/dh */
    TG_TRY(tg_module_backward_res(m->children[2], mb, dy, dy, &dh));
    /* the attention keeps dh for its delayed wgrad: dh is not written after this */
    tg_status st = tg_module_backward(m->children[1], mb, dh, &da);
    /* dx = dh + d(attn_norm)/dx */
    if (st == TG_OK) st = tg_module_backward_res(m->children[0], mb, da, dh, &out);
    tg_tensor_free(da);
    tg_tensor_free(dh);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *dx = out;
    return TG_OK;
}

static const struct tg_module_vtbl block_vt = {
    .type = "TransformerLayer",
    .forward = block_forward,
    .backward = block_backward,
};

tg_status tg_transformer_layer_new(int64_t c, int n_head, int64_t hidden, const char *norm, const char *activation,
                                   const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    tg_module *m, *tmp = NULL;
    TG_TRY(tg_module_alloc(&block_vt, o, &m));
    tg_module_opts co;
    char name[256];
    tg_nn_child_opts(m, "attn_norm", &co, name, sizeof name);
    tg_status st = tg_norm_new_by_name(norm, c, &co, &tmp);
    if (st == TG_OK) st = tg_module_add_child(m, tmp);
    tg_module_release(tmp);
    tmp = NULL;
    if (st == TG_OK) {
        tg_nn_child_opts(m, "attn", &co, name, sizeof name);
        st = tg_attention_new(c, n_head, &co, &tmp);
        if (st == TG_OK) st = tg_module_add_child(m, tmp);
        tg_module_release(tmp);
        tmp = NULL;
    }
    if (st == TG_OK) {
        tg_nn_child_opts(m, "mlp", &co, name, sizeof name);
        st = tg_layernorm_mlp_new(c, hidden, norm, activation, &co, &tmp);
        if (st == TG_OK) st = tg_module_add_child(m, tmp);
        tg_module_release(tmp);
    }
    if (st == TG_OK) { /* block_forward / block_backward hand them residuals (partial capture graphs them with it) */
        m->children[1]->parent_res = TG_PARENT_RES_FORWARD;
        m->children[2]->parent_res = TG_PARENT_RES_FORWARD | TG_PARENT_RES_BACKWARD;
    }
    if (st != TG_OK) {
        tg_module_release(m);
        return tg_error_prefix(st, "TransformerLayer");
    }
    *mp = m;
    return TG_OK;
}
