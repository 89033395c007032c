/* sequential.c — chain composites: children forward in order, backward in reverse; Sequential itself. */
#include "nn/nn.h"

tg_status tg_chain_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    return tg_chain_forward_res(m, mb, x, NULL, y);
}

tg_status tg_chain_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    if (m->nchildren == 0) { /* y = (res +) x: the add goes to a new tensor, x is the caller's */
        TG_TRY(tg_tensor_ref(x, y));
        return res ? tg_nn_add_residual(res, y) : TG_OK;
    }
    tg_tensor *cur = NULL; /* owned; the children keep their own references to what they save */
    for (int i = 0; i < m->nchildren; i++) {
        tg_tensor *next;
        /* the last child makes the chain's output: the residual goes there */
        tg_status st = tg_module_forward_res(m->children[i], mb, cur ? cur : x, i == m->nchildren - 1 ? res : NULL, &next);
        tg_tensor_free(cur);
        if (st != TG_OK) return st;
        cur = next;
    }
    *y = cur;
    return TG_OK;
}

tg_status tg_chain_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    return tg_chain_backward_res(m, mb, dy, NULL, dx);
}

tg_status tg_chain_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    if (m->nchildren == 0) {
        if (!dres) return dy ? tg_tensor_ref(dy, dx) : TG_OK;
        if (!dy) return tg_error(TG_EINVAL, "dy is missing");
        TG_TRY(tg_tensor_ref(dy, dx)); /* dx = dres + dy, into a new tensor: dy is the caller's */
        return tg_nn_add_residual(dres, dx);
    }
    tg_tensor *cur = NULL;
    for (int i = m->nchildren - 1; i >= 0; i--) {
        tg_tensor *next;
        /* the first child runs last: its input gradient is the chain's, so the residual goes there */
        tg_status st = tg_module_backward_res(m->children[i], mb, cur ? cur : dy, i == 0 ? dres : NULL, &next);
        tg_tensor_free(cur);
        if (st != TG_OK) return st;
        if (!next && i > 0) {
            char a[160], b[160];
            return tg_error(TG_EINVAL, "%s returns no input gradient, so it must come first (it is child %d, before %s)",
                            tg_module_label(m->children[i], a, sizeof a), i + 1,
                            tg_module_label(m->children[i - 1], b, sizeof b));
        }
        cur = next;
    }
    *dx = cur;
    return TG_OK;
}

static const struct tg_module_vtbl sequential_vt = {
    .type = "Sequential",
    .forward = tg_chain_forward,
    .forward_res = tg_chain_forward_res,
    .backward = tg_chain_backward,
    .backward_res = tg_chain_backward_res,
};

tg_status tg_sequential_new(tg_module **children, int n, const tg_module_opts *o, tg_module **out)
{
    *out = NULL;
    if (n < 0 || (n > 0 && !children)) return tg_error(TG_EINVAL, "Sequential: bad list of %d children", n);
    for (int i = 0; i < n; i++)
        if (!children[i]) return tg_error(TG_EINVAL, "Sequential: child %d is missing", i + 1);
    tg_module *m;
    TG_TRY(tg_module_alloc(&sequential_vt, o, &m));
    for (int i = 0; i < n; i++) {
        tg_status st = tg_module_add_child(m, children[i]);
        if (st != TG_OK) {
            tg_module_release(m);
            return st;
        }
    }
    *out = m;
    return TG_OK;
}
