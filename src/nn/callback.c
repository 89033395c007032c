/* callback.c — a module whose forward / backward / backward_dw are callbacks (Lua tables); the engine fires its params' hooks. */
#include "nn/nn.h"

struct callback {
    struct tg_callback_module_fns fns;
    void *ud;
};

/* wgrad item: only the microbatch (the callbacks keep their own state) */

static tg_status cb_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct callback *C = m->impl;
    TG_TRY(C->fns.forward(C->ud, mb, x, y));
    if (!*y) return tg_error(TG_EINVAL, "forward returned no tensor");
    return TG_OK;
}

/* Whether the wgrad about to run adds to (1) or overwrites (0) the targets of
 * m's parameters: tg_param_wgrad_accumulate of each, which must agree. */
static tg_status accumulate_of(tg_module *m, int *acc)
{
    char label[160];
    *acc = 0;
    for (int i = 0; i < m->nparams; i++) {
        int a = tg_param_wgrad_accumulate(m->params[i]) != 0.0;
        if (i == 0) *acc = a;
        else if (a != *acc)
            return tg_error(TG_ESTATE, "%s: its parameters disagree on whether this wgrad overwrites or adds: %s would %s, %s would %s "
                            "(is a parameter listed by two modules?)", tg_module_label(m, label, sizeof label), m->params[0]->name,
                            *acc ? "add" : "overwrite", m->params[i]->name, a ? "add" : "overwrite");
    }
    return TG_OK;
}

static tg_status cb_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct callback *C = m->impl;
    int acc = -1; /* backward_dw computes the wgrad */
    if (!C->fns.backward_dw) TG_TRY(accumulate_of(m, &acc));
    TG_TRY(C->fns.backward(C->ud, mb, dy, dx, acc));
    if (!C->fns.backward_dw) return tg_module_wgrad_done_all(m, mb); /* wgrad ran inside backward */
    struct tg_saved *item = calloc(1, sizeof *item);
    if (!item) return tg_error(TG_ENOMEM, "out of host memory");
    item->mb = mb;
    return tg_module_wgrad_or_queue(m, item);
}

static tg_status cb_forward_n(tg_module *m, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny)
{
    struct callback *C = m->impl;
    if (!C->fns.forward_n)
        return tg_error(TG_EINVAL, "the module takes one tensor, not a list of %d inputs (it has no forward_n)", nx);
    return C->fns.forward_n(C->ud, mb, x, nx, y, ny);
}

static tg_status cb_backward_n(tg_module *m, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx)
{
    struct callback *C = m->impl;
    if (!C->fns.backward_n)
        return tg_error(TG_EINVAL, "the module takes one output gradient tensor, not a list of %d (it has no backward_n)", ny);
    int acc = -1;
    if (!C->fns.backward_dw) TG_TRY(accumulate_of(m, &acc));
    TG_TRY(C->fns.backward_n(C->ud, mb, dy, ny, dx, nx, acc));
    if (!C->fns.backward_dw) return tg_module_wgrad_done_all(m, mb);
    struct tg_saved *item = calloc(1, sizeof *item);
    if (!item) return tg_error(TG_ENOMEM, "out of host memory");
    item->mb = mb;
    return tg_module_wgrad_or_queue(m, item);
}

static tg_status cb_wgrad(tg_module *m, struct tg_saved *item)
{
    struct callback *C = m->impl;
    int acc;
    TG_TRY(accumulate_of(m, &acc));
    TG_TRY(C->fns.backward_dw(C->ud, item->mb, acc));
    return tg_module_wgrad_done_all(m, item->mb);
}

static void cb_destroy(tg_module *m)
{
    struct callback *C = m->impl;
    if (!C) return;
    if (C->fns.free_ud) C->fns.free_ud(C->ud);
    free(C);
}

int tg_callback_module_can_delay(const tg_module *m)
{
    const struct callback *C = m->impl;
    return C && C->fns.backward_dw != NULL;
}

static const struct tg_module_vtbl callback_vt = {
    .type = "Module",
    .forward = cb_forward,
    .backward = cb_backward,
    .forward_n = cb_forward_n,
    .backward_n = cb_backward_n,
    .wgrad = cb_wgrad,
    .destroy = cb_destroy,
    .can_delay = tg_callback_module_can_delay,
};

tg_status tg_callback_module_new(const struct tg_callback_module_fns *fns, void *ud, tg_param **params, int nparams,
                                 const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (!fns || !fns->forward || !fns->backward)
        return tg_error(TG_EINVAL, "callback module: forward and backward are required");
    if (nparams < 0 || (nparams > 0 && !params)) return tg_error(TG_EINVAL, "callback module: bad parameter list");
    tg_module *m;
    TG_TRY(tg_module_alloc(&callback_vt, o, &m));
    struct callback *C = calloc(1, sizeof *C);
    m->params = nparams ? calloc((size_t)nparams, sizeof *m->params) : NULL;
    if (!C || (nparams && !m->params)) {
        free(C);
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    C->fns = *fns;
    C->ud = ud;
    m->impl = C;
    for (int i = 0; i < nparams; i++) {
        if (!params[i]) {
            C->fns.free_ud = NULL; /* on failure ud stays the caller's */
            tg_module_release(m);
            return tg_error(TG_EINVAL, "callback module: parameter %d is missing", i + 1);
        }
        m->params[m->nparams++] = tg_param_retain(params[i]);
        if (!params[i]->owner) params[i]->owner = m;
    }
    *mp = m;
    return TG_OK;
}
