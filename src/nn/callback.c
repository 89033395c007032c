/* callback.c — a module whose forward / backward / backward_dw are callbacks (Lua tables); the engine fires its params' hooks. */
#include "nn/nn.h"

/* The shapes and dtypes of one forward's inputs: the backward's dx must have them. */
struct cb_inputs {
    int mb, n;
    tg_dtype dt[TG_MAX_IO];
    int ndim[TG_MAX_IO];
    int64_t shape[TG_MAX_IO][TG_MAX_DIMS];
};

struct callback {
    struct tg_callback_module_fns fns;
    void *ud;
    struct cb_inputs *in; /* one per microbatch whose forward ran and whose backward has not */
    int nin, incap;
};

/* Notes the inputs of mb's forward (replacing an older note of mb). */
static tg_status note_inputs(struct callback *C, int mb, const tg_tensor *const *x, int n)
{
    int i = 0;
    while (i < C->nin && C->in[i].mb != mb) i++;
    if (i == C->nin) {
        if (C->nin == C->incap) {
            int cap = C->incap ? 2 * C->incap : 4;
            struct cb_inputs *a = realloc(C->in, (size_t)cap * sizeof *a);
            if (!a) return tg_error(TG_ENOMEM, "out of host memory");
            C->in = a, C->incap = cap;
        }
        C->nin++;
    }
    struct cb_inputs *r = &C->in[i];
    r->mb = mb, r->n = n;
    for (int k = 0; k < n && k < TG_MAX_IO; k++) {
        r->dt[k] = x[k]->dtype, r->ndim[k] = x[k]->ndim;
        for (int d = 0; d < x[k]->ndim && d < TG_MAX_DIMS; d++) r->shape[k][d] = x[k]->shape[d];
    }
    return TG_OK;
}

/* dx[k] (when given) has the shape and dtype of mb's input k; the note of mb goes. */
static tg_status check_dx(tg_module *m, int mb, tg_tensor *const *dx, int n)
{
    struct callback *C = m->impl;
    int i = 0;
    while (i < C->nin && C->in[i].mb != mb) i++;
    if (i == C->nin) return TG_OK; /* a forward the engine did not see (nothing to compare with) */
    struct cb_inputs r = C->in[i];
    C->in[i] = C->in[--C->nin];
    for (int k = 0; k < n && k < r.n; k++) {
        const tg_tensor *t = dx[k];
        if (!t) continue;
        int same = t->dtype == r.dt[k] && t->ndim == r.ndim[k];
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == r.shape[k][d];
        if (same) continue;
        char label[160], got[64], want[64] = "[";
        size_t len = 1;
        for (int d = 0; d < r.ndim[k]; d++)
            len += (size_t)snprintf(want + len, sizeof want - len, "%s%lld", d ? "," : "", (long long)r.shape[k][d]);
        snprintf(want + len, sizeof want - len, "] %s", tg_dtype_name(r.dt[k]));
        return tg_error(TG_EINVAL, "%s backward (microbatch %d) returned dx %s %s, but its input was %s",
                        tg_module_label(m, label, sizeof label), mb, tg_tensor_shape_str(t, got, sizeof got),
                        tg_dtype_name(t->dtype), want);
    }
    return TG_OK;
}

/* wgrad item: only the microbatch (the callbacks keep their own state) */

static tg_status cb_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct callback *C = m->impl;
    TG_TRY(C->fns.forward(C->ud, mb, x, y));
    if (!*y) return tg_error(TG_EINVAL, "forward returned no tensor");
    return note_inputs(C, mb, &x, 1);
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
    tg_status st = check_dx(m, mb, dx, 1);
    if (st != TG_OK) {
        tg_tensor_free(*dx);
        *dx = NULL;
        return st;
    }
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
    TG_TRY(C->fns.forward_n(C->ud, mb, x, nx, y, ny));
    return note_inputs(C, mb, x, nx);
}

static tg_status cb_backward_n(tg_module *m, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx)
{
    struct callback *C = m->impl;
    if (!C->fns.backward_n)
        return tg_error(TG_EINVAL, "the module takes one output gradient tensor, not a list of %d (it has no backward_n)", ny);
    int acc = -1;
    if (!C->fns.backward_dw) TG_TRY(accumulate_of(m, &acc));
    TG_TRY(C->fns.backward_n(C->ud, mb, dy, ny, dx, nx, acc));
    TG_TRY(check_dx(m, mb, dx, nx)); /* the caller frees dx on failure */
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
    free(C->in);
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
