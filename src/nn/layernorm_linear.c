/* layernorm_linear.c — LayerNormLinear (TE): a norm then a Linear, as a chain of two children. */
#include "nn/nn.h"

static const struct tg_module_vtbl layernorm_linear_vt = {
    .type = "LayerNormLinear",
    .forward = tg_fp8_chain_forward,
    .forward_res = tg_fp8_chain_forward_res,
    .backward = tg_chain_backward,
    .backward_res = tg_chain_backward_res,
};

tg_status tg_layernorm_linear_new(int64_t in, int64_t out, const char *norm, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    tg_module *m, *child = NULL;
    TG_TRY(tg_module_alloc(&layernorm_linear_vt, o, &m));
    tg_module_opts co;
    char name[256];
    /* parameters: <name>.norm.weight/.bias, then <name>.weight/.bias of the linear */
    tg_nn_child_opts(m, "norm", &co, name, sizeof name);
    tg_status st = tg_norm_new_by_name(norm, in, &co, &child);
    if (st == TG_OK) st = tg_module_add_child(m, child);
    tg_module_release(child);
    child = NULL;
    if (st == TG_OK) st = tg_linear_new(in, out, &m->opts, &child);
    if (st == TG_OK) st = tg_module_add_child(m, child);
    tg_module_release(child);
    if (st != TG_OK) {
        tg_module_release(m);
        return tg_error_prefix(st, "LayerNormLinear");
    }
    *mp = m;
    return TG_OK;
}
