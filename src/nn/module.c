/* module.c — generic module calls, saved contexts, the wgrad store (FIFO) and helpers for module code. */
#include "core/debug.h"
#include "trace/trace.h"
#include "nn/nn.h"

#include <math.h>
#include <string.h>

/* Errors are prefixed once with the innermost module that failed ("Linear
 * 'h.0.fc' backward (microbatch 2): ..."); outer composites leave it. */
static int call_depth, error_named;

static void call_enter(void)
{
    if (call_depth++ == 0) error_named = 0;
}

/* A module call from a wgrad hook while a module call is running (the hook's
 * own module, or one around it, is mid-backward): refused, naming the call. */
static tg_status reentrant(tg_module *m, const char *what, int mb)
{
    char label[160], mbs[32] = "";
    if (call_depth == 0 || !tg_hooks_running()) return TG_OK;
    error_named = 1;
    if (mb > 0) snprintf(mbs, sizeof mbs, " (microbatch %d)", mb);
    return tg_error(TG_ESTATE,
                    "%s %s%s called from a wgrad hook while a module call runs: hooks must not call modules' forward, "
                    "backward or backward_dw",
                    tg_module_label(m, label, sizeof label), what, mbs);
}

static tg_status call_leave(tg_module *m, const char *what, int mb, tg_status st)
{
    call_depth--;
    if (st == TG_OK || error_named) return st;
    char label[160];
    error_named = 1;
    if (mb > 0) return tg_error_prefix(st, "%s %s (microbatch %d)", tg_module_label(m, label, sizeof label), what, mb);
    return tg_error_prefix(st, "%s %s", tg_module_label(m, label, sizeof label), what);
}

const char *tg_module_label(const tg_module *m, char *buf, size_t n)
{
    if (m->name && m->name[0]) snprintf(buf, n, "%s '%s'", m->vt->type, m->name);
    else snprintf(buf, n, "%s", m->vt->type);
    return buf;
}

void tg_module_opts_default(tg_module_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = TG_F32;
    o->device = tg_default_device();
    o->bias = 1;
    o->chunk = 1;
    o->eps = 1e-5;
    o->init_std = 0.02;
}

static int is_composite(const tg_module *m) { return !m->vt->wgrad && m->nchildren > 0; }

/* ------------------------------------------------------------------ microbatch bookkeeping */
static void open_remove(tg_module *m, int mb)
{
    for (int i = 0; i < m->nopen; i++)
        if (m->open_mb[i] == mb) {
            memmove(m->open_mb + i, m->open_mb + i + 1, (size_t)(m->nopen - i - 1) * sizeof *m->open_mb);
            m->nopen--;
            return;
        }
}

/* After a forward of mb: mb is m's newest forward waiting for its backward. */
static tg_status note_forward(tg_module *m, int mb)
{
    int64_t key = tg_step_index();
    if (m->mb_step != key) m->nopen = 0; /* forwards of another step that no backward followed are abandoned */
    m->mb_step = key;
    m->fwd_last = mb;
    open_remove(m, mb);
    if (m->nopen == m->open_cap) {
        int cap = m->open_cap ? 2 * m->open_cap : 4;
        int *a = realloc(m->open_mb, (size_t)cap * sizeof *a);
        if (!a) return tg_error(TG_ENOMEM, "out of host memory");
        m->open_mb = a;
        m->open_cap = cap;
    }
    m->open_mb[m->nopen++] = mb;
    return TG_OK;
}

static int open_has(const tg_module *m, int mb)
{
    for (int i = 0; i < m->nopen; i++)
        if (m->open_mb[i] == mb) return 1;
    return 0;
}

/* In a step, a module runs one forward per microbatch before its backward: a second one would replace the
 * context the first saved (a module placed twice in a model, or a microbatch number given twice). */
static tg_status forward_again(const tg_module *m, int mb)
{
    int64_t key = tg_step_index();
    if (!key || m->mb_step != key || !open_has(m, mb)) return TG_OK;
    return tg_error(TG_ESTATE,
                    "forward of microbatch %d again in step %lld before its backward (a module runs one forward per "
                    "microbatch in a step: is it in the model twice?)",
                    mb, (long long)key);
}

int tg_module_next_forward(const tg_module *m)
{
    int64_t key = tg_step_index();
    if (key == 0 || m->mb_step != key) return 1;
    return m->fwd_last + 1;
}

/* While tracing: a compute span of m's phase for microbatch mb (0: unknown)
 * on the current stream of m's device; -1 otherwise. */
static int span_begin(const tg_module *m, const char *phase, int mb)
{
    char name[160], args[320], mname[96];
    snprintf(mname, sizeof mname, "%s", m->name && m->name[0] ? m->name : m->vt->type);
    for (char *c = mname; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_'; /* JSON-safe */
    snprintf(name, sizeof name, "%s %s", mname, phase);
    snprintf(args, sizeof args, "\"module\":\"%s\",\"type\":\"%s\",\"phase\":\"%s\"", mname, m->vt->type, phase);
    struct tg_trace_about a = {.mb = mb, .step = tg_step_index(), .args = args};
    return tg_trace_open(tg_stream_current(m->opts.device), TG_TRACK_COMPUTE, name, &a);
}

static void span_end(const tg_module *m, int id)
{
    if (id >= 0) tg_trace_close(id, tg_stream_current(m->opts.device));
}

/* The leaf wgrad of one saved item, in a span when tracing. */
static tg_status run_wgrad(tg_module *m, struct tg_saved *item)
{
    int sp = tg_trace_on ? span_begin(m, "wgrad", item->mb) : -1;
    tg_status st = m->vt->wgrad(m, item);
    span_end(m, sp);
    return st;
}

/* ------------------------------------------------------------------ generic calls */
tg_status tg_nn_add_residual(const tg_tensor *dres, tg_tensor **dx)
{
    char a[96];
    if (!*dx)
        return tg_error(TG_EINVAL, "returns no input gradient, so a residual gradient (%s) cannot be added to it",
                        tg_tensor_shape_str(dres, a, sizeof a));
    if ((*dx)->storage->refcount == 1) return tg_binary(TG_ADD, *dx, dres, *dx);
    tg_tensor *out = NULL;
    tg_status st = tg_tensor_new((*dx)->dtype, (*dx)->ndim, (*dx)->shape, tg_tensor_device(*dx), &out);
    if (st == TG_OK) st = tg_binary(TG_ADD, out, dres, *dx);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    tg_tensor_free(*dx);
    *dx = out;
    return TG_OK;
}

/* A routed module's calls replay its graphs inside steps; outside steps (an evaluation forward,
 * generation) it runs eagerly, since no backward follows to keep the graphs' order. */
static int routed(const tg_module *m) { return m->route && tg_step_open(); }

tg_status tg_module_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    return tg_module_forward_res(m, mb, x, NULL, y);
}

tg_status tg_module_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    *y = NULL;
    TG_TRY(reentrant(m, "forward", mb));
    call_enter();
    tg_status st = TG_OK;
    if (mb == 0) mb = tg_module_next_forward(m);
    if (mb < 1) st = tg_error(TG_EINVAL, "microbatch %d (microbatches count from 1)", mb);
    else if (tg_step_open() && mb > tg_step_microbatches())
        st = tg_error(TG_EINVAL, "microbatch %d, but the open step has %d microbatches", mb, tg_step_microbatches());
    else if (!x) st = tg_error(TG_EINVAL, "no input tensor");
    else if ((st = forward_again(m, mb)) != TG_OK) {
    } else {
        /* a routed module's F replay runs its pre-hooks and its own trace span */
        int r = routed(m);
        if (m->npre && !r) st = tg_engine_forward_pre(m, mb);
        int sp = st == TG_OK && tg_trace_on && !r ? span_begin(m, "forward", mb) : -1;
        if (st != TG_OK) {
        } else if (r) { /* the residual add runs eagerly, after the replay */
            const tg_tensor *gres = m->route->res ? res : NULL; /* the graph adds it, or it is added after */
            st = m->route->forward(m->route->ctx, m->route->chunk, mb, x, gres, y);
            if (st == TG_OK && res && !gres) st = tg_nn_add_residual(res, y);
        } else if (!res) {
            st = m->vt->forward(m, mb, x, y);
        } else if (m->vt->forward_res && !tg_debug_get(TG_DEBUG_UNFUSED_RESIDUAL)) {
            st = m->vt->forward_res(m, mb, x, res, y);
        } else {
            st = m->vt->forward(m, mb, x, y);
            if (st == TG_OK) st = tg_nn_add_residual(res, y);
        }
        span_end(m, sp);
    }
    if (st == TG_OK) st = note_forward(m, mb);
    if (st == TG_OK) st = tg_engine_note_forward(m);
    if (st != TG_OK && *y) {
        tg_tensor_free(*y);
        *y = NULL;
    }
    return call_leave(m, "forward", mb, st);
}

tg_status tg_module_forward_n(tg_module *m, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny)
{
    char label[160];
    *ny = 0;
    for (int i = 0; i < TG_MAX_IO; i++) y[i] = NULL;
    if (!m->vt->forward_n)
        return tg_error(TG_EINVAL, "%s takes one input, got %d", tg_module_label(m, label, sizeof label), nx);
    if (nx < 1 || nx > TG_MAX_IO)
        return tg_error(TG_EINVAL, "%s: %d inputs (1 to %d)", tg_module_label(m, label, sizeof label), nx, TG_MAX_IO);
    if (routed(m)) return tg_error(TG_EINVAL, "%s: a chunk with several inputs cannot be graphed in place", tg_module_label(m, label, sizeof label));
    TG_TRY(reentrant(m, "forward", mb));
    call_enter();
    tg_status st = TG_OK;
    if (mb == 0) mb = tg_module_next_forward(m);
    if (mb < 1) st = tg_error(TG_EINVAL, "microbatch %d (microbatches count from 1)", mb);
    else if (tg_step_open() && mb > tg_step_microbatches())
        st = tg_error(TG_EINVAL, "microbatch %d, but the open step has %d microbatches", mb, tg_step_microbatches());
    else st = forward_again(m, mb);
    for (int i = 0; i < nx && st == TG_OK; i++)
        if (!x[i]) st = tg_error(TG_EINVAL, "input %d is missing", i + 1);
    if (st == TG_OK) {
        if (m->npre) st = tg_engine_forward_pre(m, mb);
        int sp = st == TG_OK && tg_trace_on ? span_begin(m, "forward", mb) : -1;
        if (st == TG_OK) st = m->vt->forward_n(m, mb, x, nx, y, ny);
        if (st == TG_OK) m->tuple_io = 1;
        if (st == TG_OK && (*ny < 1 || *ny > TG_MAX_IO)) st = tg_error(TG_EINVAL, "forward returned %d outputs (1 to %d)", *ny, TG_MAX_IO);
        for (int i = 0; i < *ny && st == TG_OK; i++)
            if (!y[i]) st = tg_error(TG_EINVAL, "forward returned no tensor as output %d", i + 1);
        span_end(m, sp);
    }
    if (st == TG_OK) st = note_forward(m, mb);
    if (st == TG_OK) st = tg_engine_note_forward(m);
    if (st != TG_OK) {
        for (int i = 0; i < TG_MAX_IO; i++) tg_tensor_free(y[i]), y[i] = NULL;
        *ny = 0;
    }
    return call_leave(m, "forward", mb, st);
}

tg_status tg_module_backward_n(tg_module *m, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx)
{
    char label[160];
    for (int i = 0; i < nx && i < TG_MAX_IO; i++) dx[i] = NULL;
    if (!m->vt->backward_n)
        return tg_error(TG_EINVAL, "%s takes one output gradient, got %d", tg_module_label(m, label, sizeof label), ny);
    if (nx < 1 || nx > TG_MAX_IO || ny < 1 || ny > TG_MAX_IO)
        return tg_error(TG_EINVAL, "%s backward: %d output gradients, %d inputs (1 to %d)", tg_module_label(m, label, sizeof label), ny, nx, TG_MAX_IO);
    TG_TRY(reentrant(m, "backward", mb));
    call_enter();
    tg_status st = TG_OK;
    if (mb == 0) {
        if (m->nopen) mb = m->open_mb[0];
        else st = tg_error(TG_ESTATE, "backward: no forward is waiting for its backward (give the microbatch, or run forward first)");
    }
    if (st == TG_OK && mb < 1) st = tg_error(TG_EINVAL, "microbatch %d (microbatches count from 1)", mb);
    if (st == TG_OK) {
        int sp = tg_trace_on ? span_begin(m, "backward", mb) : -1;
        st = m->vt->backward_n(m, mb, dy, ny, dx, nx);
        span_end(m, sp);
    }
    if (st == TG_OK) open_remove(m, mb);
    if (st != TG_OK)
        for (int i = 0; i < nx; i++) tg_tensor_free(dx[i]), dx[i] = NULL;
    return call_leave(m, "backward", mb, st);
}

tg_status tg_module_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    return tg_module_backward_res(m, mb, dy, NULL, dx);
}

tg_status tg_module_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    *dx = NULL;
    TG_TRY(reentrant(m, "backward", mb));
    call_enter();
    tg_status st = TG_OK;
    if (mb == 0) {
        if (m->nopen) {
            mb = m->open_mb[0];
        } else {
            char label[160];
            error_named = 1;
            call_depth--;
            return tg_error(TG_ESTATE, "%s backward: no forward is waiting for its backward (give the microbatch, or run forward first)",
                            tg_module_label(m, label, sizeof label));
        }
    }
    if (mb < 1) st = tg_error(TG_EINVAL, "microbatch %d (microbatches count from 1)", mb);
    else {
        int r = routed(m);
        int sp = tg_trace_on && !r ? span_begin(m, "backward", mb) : -1;
        if (r) {
            const tg_tensor *gdres = m->route->dres ? dres : NULL;
            st = m->route->backward(m->route->ctx, m->route->chunk, mb, dy, gdres, dx);
            if (st == TG_OK && m->route->has_w) m->route_wpend++;
            if (st == TG_OK && dres && !gdres) st = tg_nn_add_residual(dres, dx);
        } else if (!dres) {
            st = m->vt->backward(m, mb, dy, dx);
        } else if (m->vt->backward_res && !tg_debug_get(TG_DEBUG_UNFUSED_RESIDUAL)) {
            st = m->vt->backward_res(m, mb, dy, dres, dx);
        } else {
            st = m->vt->backward(m, mb, dy, dx);
            if (st == TG_OK) st = tg_nn_add_residual(dres, dx);
        }
        span_end(m, sp);
    }
    if (st == TG_OK) open_remove(m, mb);
    if (st != TG_OK && *dx) { /* a failed backward (e.g. a failing hook) hands out no dx */
        tg_tensor_free(*dx);
        *dx = NULL;
    }
    return call_leave(m, "backward", mb, st);
}

/* W must follow B order: the first leaf under m (children in backward order)
 * whose store holds work with another microbatch than mb at its head; NULL
 * when there is none (checked before anything is popped). */
static tg_module *wrong_head(tg_module *m, int mb)
{
    if (m->route_wpend) return NULL; /* the graphed set checks its own order */
    if (!is_composite(m)) return m->wq_head && m->wq_head->mb != mb ? m : NULL;
    for (int i = m->nchildren - 1; i >= 0; i--) {
        tg_module *bad = wrong_head(m->children[i], mb);
        if (bad) return bad;
    }
    return NULL;
}

/* The first leaf under m whose store's head was queued in a step other than
 * the one open now (wgrads do not carry over into the next step; outside
 * steps a store may be drained); NULL when none. */
static tg_module *stale_head(tg_module *m)
{
    int64_t now = tg_step_index();
    if (!is_composite(m)) return now && m->wq_head && m->wq_head->step != now ? m : NULL;
    for (int i = m->nchildren - 1; i >= 0; i--) {
        tg_module *bad = stale_head(m->children[i]);
        if (bad) return bad;
    }
    return NULL;
}

/* Pops and computes the head of m's store (leaf) or of each child's that has one. */
static tg_status pop_wgrad(tg_module *m, int mb)
{
    if (m->route && m->route_wpend) {
        tg_status st = m->route->backward_dw(m->route->ctx, m->route->chunk, mb);
        if (st == TG_OK) m->route_wpend--;
        return st;
    }
    if (!is_composite(m)) {
        struct tg_saved *item = m->wq_head;
        m->wq_head = item->next;
        if (!m->wq_head) m->wq_tail = NULL;
        item->next = NULL;
        call_enter();
        int mb = item->mb;
        tg_status st = run_wgrad(m, item);
        tg_saved_free(item);
        return call_leave(m, "backward_dw", mb, st);
    }
    /* reverse order, like backward: a parameter shared by two children
     * (tied embedding) then gets its contributions in the same order */
    tg_status st = TG_OK;
    for (int i = m->nchildren - 1; i >= 0 && st == TG_OK; i--)
        if (tg_module_need_backward_dw(m->children[i])) st = pop_wgrad(m->children[i], mb);
    return st;
}

/* Whether m or a module under it delays its wgrad. */
static int any_delay(const tg_module *m)
{
    if (m->opts.delay_wgrad) return 1;
    for (int i = 0; i < m->nchildren; i++)
        if (any_delay(m->children[i])) return 1;
    return 0;
}

tg_status tg_module_backward_dw(tg_module *m, int mb)
{
    char label[160], other[160];
    if (mb < 0)
        return tg_error(TG_EINVAL, "%s backward_dw: microbatch %d (microbatches count from 1)",
                        tg_module_label(m, label, sizeof label), mb);
    TG_TRY(reentrant(m, "backward_dw", mb));
    if (!tg_module_need_backward_dw(m)) goto empty;
    tg_module *bad = mb ? wrong_head(m, mb) : NULL;
    if (bad == m)
        return tg_error(TG_ESTATE, "%s backward_dw (microbatch %d): the wgrad store's head is microbatch %d (W must follow B order)",
                        tg_module_label(m, label, sizeof label), mb, m->wq_head->mb);
    if (bad)
        return tg_error(TG_ESTATE, "%s backward_dw (microbatch %d): the wgrad store of %s has microbatch %d at its head (W must follow B order)",
                        tg_module_label(m, label, sizeof label), mb, tg_module_label(bad, other, sizeof other), bad->wq_head->mb);
    if ((bad = stale_head(m)) != NULL) {
        char when[48] = "outside steps";
        if (bad->wq_head->step) snprintf(when, sizeof when, "in step %lld", (long long)bad->wq_head->step);
        return tg_error(TG_ESTATE,
                        "%s backward_dw (microbatch %d): the wgrad of microbatch %d on %s was queued %s, and step %lld is "
                        "open (a step's delayed wgrads run before its step_end; drop_saved() drops them)",
                        tg_module_label(m, label, sizeof label), mb, bad->wq_head->mb,
                        tg_module_label(bad, other, sizeof other), when, (long long)tg_step_index());
    }
    call_enter();
    return call_leave(m, "backward_dw", mb, pop_wgrad(m, mb));
empty:
    if (is_composite(m) && !m->opts.delay_wgrad && any_delay(m))
        return tg_error(TG_ESTATE, "backward_dw with nothing queued on %s or its children (some delay their wgrad: "
                        "each of their backwards queues one)", tg_module_label(m, label, sizeof label));
    return tg_error(TG_ESTATE, "backward_dw with nothing queued on %s (delay_wgrad is %s: each backward %s)",
                    tg_module_label(m, label, sizeof label), m->opts.delay_wgrad ? "on" : "off",
                    m->opts.delay_wgrad ? "queues one wgrad" : "computes its wgrad itself");
}

/* The first module under m (m included) that cannot delay its wgrad; NULL when none. */
static const tg_module *cannot_delay(const tg_module *m)
{
    if (m->vt->wgrad && m->vt->can_delay && !m->vt->can_delay(m)) return m;
    for (int i = 0; i < m->nchildren; i++) {
        const tg_module *bad = cannot_delay(m->children[i]);
        if (bad) return bad;
    }
    return NULL;
}

/* The first module under m (m included) with queued wgrad work; NULL when none. */
static const tg_module *queued_under(const tg_module *m)
{
    if (m->wq_head) return m;
    for (int i = 0; i < m->nchildren; i++) {
        const tg_module *q = queued_under(m->children[i]);
        if (q) return q;
    }
    return NULL;
}

static void set_delay(tg_module *m, int on)
{
    m->opts.delay_wgrad = on;
    for (int i = 0; i < m->nchildren; i++) set_delay(m->children[i], on);
}

tg_status tg_module_set_delay_wgrad(tg_module *m, int on)
{
    char label[160], other[160];
    tg_module_label(m, label, sizeof label);
    if (tg_device_capturing(m->opts.device))
        return tg_error(TG_ECAPTURE, "%s set_delay_wgrad: not while its device captures", label);
    if (m->exec_mode && strcmp(m->exec_mode, "graphed") == 0)
        return tg_error(TG_ESTATE, "%s set_delay_wgrad: it is part of a graphed set, whose graphs were captured with delay_wgrad %s (free the set first)",
                        label, m->opts.delay_wgrad ? "on" : "off");
    const tg_module *q = queued_under(m);
    if (q)
        return tg_error(TG_ESTATE, "%s set_delay_wgrad: the wgrad of microbatch %d is still queued on %s (run backward_dw first)",
                        label, q->wq_head->mb, tg_module_label(q, other, sizeof other));
    const tg_module *bad = on ? cannot_delay(m) : NULL;
    if (bad)
        return tg_error(TG_EINVAL, "%s set_delay_wgrad: %s has no backward_dw, so its wgrad cannot be delayed", label,
                        tg_module_label(bad, other, sizeof other));
    set_delay(m, on != 0);
    return TG_OK;
}

int tg_module_need_backward_dw(const tg_module *m)
{
    if (m->wq_head || m->route_wpend) return 1;
    if (!is_composite(m)) return 0;
    for (int i = 0; i < m->nchildren; i++)
        if (tg_module_need_backward_dw(m->children[i])) return 1;
    return 0;
}

static tg_status push_param(tg_param *p, int dedupe, tg_param ***arr, int *n, int *cap)
{
    for (int j = 0; dedupe && j < *n; j++)
        if ((*arr)[j] == p) return TG_OK;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        tg_param **a = realloc(*arr, (size_t)c * sizeof *a);
        if (!a) return tg_error(TG_ENOMEM, "out of host memory");
        *arr = a, *cap = c;
    }
    (*arr)[(*n)++] = p;
    return TG_OK;
}

/* wgrad: every contribution (shared ones too, no dedupe); else each own parameter once */
static tg_status collect(tg_module *m, int wgrad, tg_param ***arr, int *n, int *cap)
{
    for (int i = 0; i < m->nparams; i++) TG_TRY(push_param(m->params[i], !wgrad, arr, n, cap));
    if (wgrad && m->shared) TG_TRY(push_param(m->shared, 0, arr, n, cap));
    for (int i = 0; i < m->nchildren; i++) TG_TRY(collect(m->children[i], wgrad, arr, n, cap));
    return TG_OK;
}

static tg_status param_list(tg_module *m, int wgrad, tg_param ***out, int *n)
{
    int cap = 0;
    *out = NULL;
    *n = 0;
    tg_status st = collect(m, wgrad, out, n, &cap);
    if (st != TG_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

tg_status tg_module_parameters(tg_module *m, tg_param ***out, int *n) { return param_list(m, 0, out, n); }
tg_status tg_module_wgrad_params(tg_module *m, tg_param ***out, int *n) { return param_list(m, 1, out, n); }

tg_module *tg_module_retain(tg_module *m)
{
    if (m) m->refcount++;
    return m;
}

static void saved_list_free(struct tg_saved *s)
{
    while (s) {
        struct tg_saved *next = s->next;
        tg_saved_free(s);
        s = next;
    }
}

void tg_module_drop_state(tg_module *m)
{
    saved_list_free(m->saved);
    m->saved = NULL;
    saved_list_free(m->wq_head);
    m->wq_head = m->wq_tail = NULL;
    m->nopen = 0;
    m->fwd_last = 0;
    for (int i = 0; i < m->nchildren; i++) tg_module_drop_state(m->children[i]);
}

/* Frees the items of list *head of microbatch mb (0: all). */
static void saved_list_drop(struct tg_saved **head, int mb)
{
    for (struct tg_saved **pp = head; *pp;) {
        struct tg_saved *s = *pp;
        if (mb == 0 || s->mb == mb) {
            *pp = s->next;
            s->next = NULL;
            tg_saved_free(s);
        } else {
            pp = &s->next;
        }
    }
}

void tg_module_drop_saved(tg_module *m, int mb)
{
    saved_list_drop(&m->saved, mb);
    if (mb == 0) m->nopen = 0, m->fwd_last = 0;
    else open_remove(m, mb);
    saved_list_drop(&m->wq_head, mb); /* and the delayed wgrads of mb still queued */
    m->wq_tail = m->wq_head;
    while (m->wq_tail && m->wq_tail->next) m->wq_tail = m->wq_tail->next;
    for (int i = 0; i < m->nchildren; i++) tg_module_drop_saved(m->children[i], mb);
}

void tg_module_drop_step(tg_module *m, int64_t step)
{
    if (m->mb_step == step) {
        saved_list_drop(&m->saved, 0);
        m->nopen = 0, m->fwd_last = 0;
    }
    for (struct tg_saved **pp = &m->wq_head; *pp;) {
        struct tg_saved *q = *pp;
        if (q->step == step) {
            *pp = q->next;
            q->next = NULL;
            tg_saved_free(q);
        } else {
            pp = &q->next;
        }
    }
    m->wq_tail = m->wq_head;
    while (m->wq_tail && m->wq_tail->next) m->wq_tail = m->wq_tail->next;
}

void tg_module_release(tg_module *m)
{
    if (!m || --m->refcount > 0) return;
    if (m->vt->destroy) m->vt->destroy(m);
    tg_fp8_state_free(m->fp8);
    saved_list_free(m->saved);
    saved_list_free(m->wq_head);
    free(m->open_mb);
    for (int i = 0; i < m->npre; i++)
        if (m->pre_hooks[i].free_ud) m->pre_hooks[i].free_ud(m->pre_hooks[i].ud);
    free(m->pre_hooks);
    for (int i = 0; i < m->nparams; i++) {
        if (m->params[i]->owner == m) m->params[i]->owner = NULL;
        tg_param_release(m->params[i]);
    }
    free(m->params);
    for (int i = 0; i < m->nchildren; i++) tg_module_release(m->children[i]);
    free(m->children);
    free(m->name);
    free(m);
}

/* ------------------------------------------------------------------ forward pre-hooks */
tg_status tg_module_add_forward_pre_hook(tg_module *m, tg_forward_pre_hook_fn fn, void *ud, void (*free_ud)(void *),
                                         int *id)
{
    char label[160];
    if (id) *id = 0;
    if (!m) return tg_error(TG_EINVAL, "add_forward_pre_hook: no module");
    if (!fn) return tg_error(TG_EINVAL, "add_forward_pre_hook on %s: no function", tg_module_label(m, label, sizeof label));
    struct tg_pre_hook *h = realloc(m->pre_hooks, (size_t)(m->npre + 1) * sizeof *h);
    if (!h) return tg_error(TG_ENOMEM, "out of host memory");
    m->pre_hooks = h;
    m->pre_hooks[m->npre++] = (struct tg_pre_hook){.fn = fn, .ud = ud, .free_ud = free_ud, .id = ++m->last_pre_id};
    if (id) *id = m->last_pre_id;
    return TG_OK;
}

tg_status tg_module_remove_forward_pre_hook(tg_module *m, int id)
{
    char label[160];
    if (!m) return tg_error(TG_EINVAL, "remove_forward_pre_hook: no module");
    tg_module_label(m, label, sizeof label);
    if (m->pre_dispatching)
        return tg_error(TG_ESTATE, "remove_forward_pre_hook on %s: its pre-hooks are running (remove it after)", label);
    for (int i = 0; i < m->npre; i++) {
        if (m->pre_hooks[i].id != id) continue;
        struct tg_pre_hook h = m->pre_hooks[i];
        memmove(&m->pre_hooks[i], &m->pre_hooks[i + 1], (size_t)(m->npre - i - 1) * sizeof *m->pre_hooks);
        m->npre--;
        if (h.free_ud) h.free_ud(h.ud);
        return TG_OK;
    }
    return tg_error(TG_EINVAL, "remove_forward_pre_hook on %s: no pre-hook with id %d", label, id);
}

int tg_module_forward_pre_hook_count(const tg_module *m) { return m ? m->npre : 0; }
const char *tg_module_name(const tg_module *m) { return m && m->name ? m->name : ""; }

tg_status tg_module_run_forward_pre_hooks(tg_module *m, int mb)
{
    if (m->npre) TG_TRY(tg_engine_forward_pre(m, mb));
    for (int i = 0; i < m->nchildren; i++) TG_TRY(tg_module_run_forward_pre_hooks(m->children[i], mb));
    return TG_OK;
}

/* ------------------------------------------------------------------ helpers for module code */
tg_status tg_module_alloc(const struct tg_module_vtbl *vt, const tg_module_opts *o, tg_module **out)
{
    *out = NULL;
    tg_module_opts def;
    if (!o) tg_module_opts_default(&def), o = &def;
    if (o->dtype != TG_F32 && o->dtype != TG_BF16)
        return tg_error(TG_EINVAL, "%s: dtype %s (modules compute in f32 or bf16)", vt->type, tg_dtype_name(o->dtype));
    if (!tg_device_valid(o->device)) {
        char d[32];
        return tg_error(TG_EINVAL, "%s: device %s does not exist", vt->type, tg_device_str(o->device, d, sizeof d));
    }
    if (!(o->eps >= 0) || isinf(o->eps)) /* (0: the default) */
        return tg_error(TG_EINVAL, "%s: eps %g (a finite number > 0 expected; 0 takes the default 1e-5)", vt->type, o->eps);
    if (!(o->init_std >= 0) || isinf(o->init_std))
        return tg_error(TG_EINVAL, "%s: init_std %g (a finite number >= 0 expected)", vt->type, o->init_std);
    tg_module *m = calloc(1, sizeof *m);
    if (!m) return tg_error(TG_ENOMEM, "out of host memory");
    m->vt = vt;
    m->refcount = 1;
    m->opts = *o;
    m->name = strdup(o->name ? o->name : "");
    if (!m->name) {
        free(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->opts.name = m->name;
    if (m->opts.chunk < 1) m->opts.chunk = 1;
    if (m->opts.eps == 0) m->opts.eps = 1e-5;
    m->exec_mode = "eager";
    m->forward_step = -1;
    *out = m;
    return TG_OK;
}

tg_status tg_module_add_param(tg_module *m, const char *suffix, int ndim, const int64_t *shape, double init_std,
                              double init_const, tg_param **out)
{
    char name[256];
    if (m->name[0]) snprintf(name, sizeof name, "%s.%s", m->name, suffix);
    else snprintf(name, sizeof name, "%s", suffix);
    tg_tensor *f = NULL, *data = NULL;
    /* draw in f32 then round, so f32 and bf16 modules start from the same values */
    TG_TRY(tg_tensor_new(TG_F32, ndim, shape, m->opts.device, &f));
    tg_status st = init_std > 0 ? tg_randn(f, 0.0, init_std) : tg_fill(f, init_const);
    if (st == TG_OK && m->opts.dtype != TG_F32) {
        st = tg_tensor_new(m->opts.dtype, ndim, shape, m->opts.device, &data);
        if (st == TG_OK) st = tg_copy(data, f);
        tg_tensor_free(f);
    } else {
        data = f;
    }
    if (st != TG_OK) {
        tg_tensor_free(data);
        return st;
    }
    tg_param *p;
    TG_TRY(tg_param_new(name, data, m->opts.fuse_wgrad_accumulation, &p));
    tg_param **arr = realloc(m->params, (size_t)(m->nparams + 1) * sizeof *arr);
    if (!arr) {
        tg_param_release(p);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->params = arr;
    m->params[m->nparams++] = p;
    p->owner = m;
    if (out) *out = p;
    return TG_OK;
}

tg_status tg_module_add_child(tg_module *m, tg_module *child)
{
    tg_module **arr = realloc(m->children, (size_t)(m->nchildren + 1) * sizeof *arr);
    if (!arr) return tg_error(TG_ENOMEM, "out of host memory");
    m->children = arr;
    m->children[m->nchildren++] = tg_module_retain(child);
    return TG_OK;
}

void tg_saved_free(struct tg_saved *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) tg_tensor_free(s->t[i]);
    free(s);
}

tg_status tg_module_save(tg_module *m, int mb, tg_tensor **t, int n)
{
    TG_ASSERT(n >= 0 && n <= 8);
    struct tg_saved *s = calloc(1, sizeof *s);
    if (!s) {
        for (int i = 0; i < n; i++) tg_tensor_free(t[i]);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    s->mb = mb;
    s->step = tg_step_index();
    s->n = n;
    for (int i = 0; i < n; i++) s->t[i] = t[i];
    for (struct tg_saved **pp = &m->saved; *pp; pp = &(*pp)->next)
        if ((*pp)->mb == mb) {
            struct tg_saved *old = *pp;
            *pp = old->next;
            tg_saved_free(old);
            break;
        }
    s->next = m->saved;
    m->saved = s;
    return TG_OK;
}

static tg_status missing(tg_module *m, int mb)
{
    char have[128] = "";
    size_t len = 0;
    int k = 0;
    for (struct tg_saved *s = m->saved; s && len + 16 < sizeof have; s = s->next, k++)
        len += (size_t)snprintf(have + len, sizeof have - len, "%s%d", k ? ", " : "", s->mb);
    return tg_error(TG_ESTATE, "backward of microbatch %d before its forward (or after its backward); saved microbatches: %s",
                    mb, k ? have : "none");
}

/* A context saved in another step than the open one (or outside steps) is not this backward's forward. */
static tg_status other_step(const struct tg_saved *s)
{
    int64_t now = tg_step_index();
    if (s->step == now) return TG_OK;
    char then[48] = "outside steps", cur[48] = "outside steps";
    if (s->step) snprintf(then, sizeof then, "in step %lld", (long long)s->step);
    if (now) snprintf(cur, sizeof cur, "in step %lld", (long long)now);
    return tg_error(TG_ESTATE,
                    "backward of microbatch %d %s, but its forward ran %s (a microbatch's forward and backward belong "
                    "to one step; run the forward again)",
                    s->mb, cur, then);
}

tg_status tg_module_peek(tg_module *m, int mb, struct tg_saved **out)
{
    for (struct tg_saved *s = m->saved; s; s = s->next)
        if (s->mb == mb) {
            *out = NULL;
            TG_TRY(other_step(s));
            *out = s;
            return TG_OK;
        }
    *out = NULL;
    return missing(m, mb);
}

tg_status tg_module_take(tg_module *m, int mb, struct tg_saved **out)
{
    for (struct tg_saved **pp = &m->saved; *pp; pp = &(*pp)->next)
        if ((*pp)->mb == mb) {
            *out = NULL;
            TG_TRY(other_step(*pp));
            *out = *pp;
            *pp = (*pp)->next;
            (*out)->next = NULL;
            return TG_OK;
        }
    *out = NULL;
    return missing(m, mb);
}

tg_status tg_module_wgrad_or_queue(tg_module *m, struct tg_saved *item)
{
    TG_ASSERT(m->vt->wgrad);
    if (!m->opts.delay_wgrad) {
        tg_status st = run_wgrad(m, item);
        tg_saved_free(item);
        return st;
    }
    item->next = NULL;
    item->step = tg_step_index();
    if (m->wq_tail) m->wq_tail->next = item;
    else m->wq_head = item;
    m->wq_tail = item;
    return TG_OK;
}

tg_status tg_module_wgrad_done_all(tg_module *m, int mb)
{
    for (int i = 0; i < m->nparams; i++) TG_TRY(tg_param_wgrad_done(m->params[i], mb));
    return TG_OK;
}

tg_status tg_module_tensor(tg_module *m, tg_dtype dt, int ndim, const int64_t *shape, tg_tensor **out)
{
    return tg_tensor_new(dt, ndim, shape, m->opts.device, out);
}

/* ------------------------------------------------------------------ shape helpers */
static const char *describe(const tg_tensor *t, char *buf, size_t n)
{
    char sh[64];
    snprintf(buf, n, "%s %s", tg_tensor_shape_str(t, sh, sizeof sh), tg_dtype_name(t->dtype));
    return buf;
}

tg_status tg_nn_check_rows(const char *what, const tg_tensor *t, tg_dtype dt, int64_t last)
{
    char a[96];
    if (!t) return tg_error(TG_EINVAL, "%s is missing, expected (..., %lld) %s", what, (long long)last, tg_dtype_name(dt));
    if (t->ndim < 2 || t->ndim > 4 || t->shape[t->ndim - 1] != last || t->dtype != dt)
        return tg_error(TG_EINVAL, "%s is %s, expected (N, %lld) or (B, T, %lld) %s", what, describe(t, a, sizeof a),
                        (long long)last, (long long)last, tg_dtype_name(dt));
    return TG_OK;
}

tg_status tg_nn_check_like(const char *what, const tg_tensor *t, const tg_tensor *like, int64_t last, tg_dtype dt)
{
    char a[96], want[96];
    int okay = t && t->ndim == like->ndim && t->dtype == dt && t->shape[t->ndim - 1] == last;
    for (int i = 0; okay && i < like->ndim - 1; i++) okay = t->shape[i] == like->shape[i];
    if (okay) return TG_OK;
    size_t len = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < like->ndim - 1; i++) len += (size_t)snprintf(want + len, sizeof want - len, "%lld,", (long long)like->shape[i]);
    snprintf(want + len, sizeof want - len, "%lld] %s", (long long)last, tg_dtype_name(dt));
    return tg_error(TG_EINVAL, "%s is %s, expected %s", what, t ? describe(t, a, sizeof a) : "missing", want);
}

tg_status tg_nn_new_like(tg_module *m, const tg_tensor *like, int64_t last, tg_dtype dt, tg_tensor **out)
{
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < like->ndim; i++) shape[i] = like->shape[i];
    shape[like->ndim - 1] = last;
    return tg_module_tensor(m, dt, like->ndim, shape, out);
}

tg_status tg_nn_rows(const tg_tensor *t, tg_tensor **out)
{
    int64_t c = t->shape[t->ndim - 1];
    int64_t shape[2] = {c ? tg_tensor_numel(t) / c : 0, c};
    return tg_tensor_view(t, 0, 2, shape, out);
}

void tg_nn_child_opts(const tg_module *m, const char *suffix, tg_module_opts *o, char *buf, size_t n)
{
    *o = m->opts;
    if (m->name[0]) snprintf(buf, n, "%s.%s", m->name, suffix);
    else snprintf(buf, n, "%s", suffix);
    o->name = buf;
}
